// Controller benchmark (npm run bench). Run on demand, never in CI; it prints figures, it does
// not pass or fail a build.
//
// The controller runs as its own process (dist/controller/main.js, generated TLS, default
// logging) exactly as `npm start` runs it, once per store: the file store, then the PostgreSQL
// store on a private server (scripts/postgres.sh). This process drives it with N concurrent
// clients, each on its own HTTP/2 connection through the generated Connect client. Measured:
//
//   apply          DeploymentService.Apply of a converged tenant (a forced redeploy): a reconcile
//                  pass that writes deployment + work order + events, all durable. Each client
//                  works through its own pool of converged tenants (one apply each: a second
//                  apply would return the order already in flight), prepared before the phase
//   claim+result   ClaimNextWorkOrder, ReportWorkOrderResult (one finished order: two calls, as
//                  pg-boss's fetch + complete); --claim get-then-claim measures the older three-call
//                  path (GetNextWorkOrder, ClaimWorkOrder, ReportWorkOrderResult) instead
//   claim+result batch N   (with --batch N) ClaimWorkOrders of up to N + one ReportWorkOrderResults,
//                  on half of the orders apply made (the single-call phase takes the other half);
//                  its rate counts finished orders, beside the single-call row (bench/batch-claim.ts)
//   read           ResourceService.GetResource of a tenant
//   auth           (once, on a controller of its own on the file store) the cost of authentication
//                  per call: AccessService.WhoAmI with no credential, the admin token, an API key,
//                  a node token and a client certificate, and Heartbeat with the last two, side by
//                  side in 12 rounds of --duration / 20 s each (auth-cost.ts; npm run bench:auth runs it alone)
//
// and, in the same run and on the same disk, the ceilings they are compared with:
//
//   atomic write   open, write 1 KiB, fsync, close, rename, fsync directory (serial and N-way)
//   echo           a bare Connect HealthService.Check on the same TLS setup (bench/echo-server.ts)
//   pg-boss        claim + complete of one job (fetch, complete) on the same PostgreSQL server,
//                  N workers: the job queue Skipper's order path is held to (bench/pg-boss.ts)
//
// Options: --duration <s> per phase (default 10), --concurrency <n> (default 16), --pool <n>
//          converged tenants per client for the apply phase (default 150: enough for a 10 s phase
//          here, and the whole run takes about two minutes; a faster store needs more),
//          --dir <path> where data goes (default a temp dir on the repository's disk),
//          --cpu-prof <dir> writes a V8 CPU profile of the controller there,
//          --phases apply,claim,read,auth picks the controller phases,
//          --stores file,postgres picks the stores, --pg-url <url> a PostgreSQL server of yours
//          (a database bench_skipper and one bench_pgboss are made afresh on it).
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import pg from "pg";
import { mkdir, mkdtemp, open, readFile, rename, rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { HealthService } from "../gen/skipper/v1/health_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { benchTenant } from "./bench-tenant.js";
import { closedLoop, cpuSeconds, type PhaseResult } from "./closed-loop.js";
import { measureAuthCost } from "./auth-cost.js";
import { printAuthCost } from "./auth-figures.js";
import { pgBossClaimComplete } from "./pg-boss.js";
import { orderPhases } from "./order-phases.js";
import { sessionTargets } from "./session-phases.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const distRoot = resolve(here, "..");
const ADMIN = "bench-admin-token-0123456789abcdef";

const { values } = parseArgs({
  options: {
    duration: { type: "string", default: "10" },
    concurrency: { type: "string", default: "16" },
    dir: { type: "string" },
    // Writes a V8 CPU profile of the controller (.cpuprofile, open in Chrome DevTools) to this dir.
    "cpu-prof": { type: "string" },
    // Controller phases to run, comma-separated (claim and session use the orders apply created;
    // auth runs once, on a controller of its own; session and keepalive: bench/session-phases.ts).
    phases: { type: "string", default: "apply,claim,read,auth" },
    // Converged tenants prepared per client for the apply phase (one apply each).
    pool: { type: "string", default: "150" },
    // Stores to run the controller on, in order: file, postgres (a private server from
    // scripts/postgres.sh, or --pg-url). Without a PostgreSQL server the postgres runs are skipped.
    stores: { type: "string", default: "file,postgres" },
    "pg-url": { type: "string" },
    // How a client takes an order: claim-next (one call) or get-then-claim (two calls).
    claim: { type: "string", default: "claim-next" },
    // Also run claim+result in batches of N (ClaimWorkOrders + ReportWorkOrderResults) on half
    // of the orders apply made; 0: no batch phase.
    batch: { type: "string", default: "0" },
  },
});
if (values.claim !== "claim-next" && values.claim !== "get-then-claim") throw new Error("--claim must be claim-next or get-then-claim");
const durationMs = Number(values.duration) * 1000;
const concurrency = Number(values.concurrency);
const phases = new Set(values.phases.split(","));
const batch = Number(values.batch);
if (!Number.isInteger(batch) || batch < 0 || batch > 100) throw new Error("--batch must be 0 to 100");
if (!(durationMs > 0) || !(concurrency > 0)) throw new Error("--duration and --concurrency must be positive");

// ---------- helpers ----------

/** Starts a node process and waits for the first stdout JSON line matching `ready`. */
async function startProcess(
  args: string[],
  env: NodeJS.ProcessEnv,
  ready: (line: Record<string, unknown>) => string | undefined,
): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout! });
  return new Promise((resolveStart, reject) => {
    child.once("exit", (code) => reject(new Error(`${args[0]} exited with ${code} before it was ready`)));
    lines.on("line", (line) => {
      let parsed: Record<string, unknown>;
      try {
        parsed = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      const url = ready(parsed);
      if (url) {
        lines.removeAllListeners("line");
        child.stdout!.resume(); // keep draining request logs so the controller never blocks on a full pipe
        resolveStart({ child, url });
      }
    });
  });
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  await exited;
}

function clientFor<S extends DescService>(service: S, baseUrl: string, ca: string, headers: Record<string, string>): Client<S> {
  const auth: Interceptor = (next) => (req) => {
    for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
    return next(req);
  };
  return createClient(
    service,
    createConnectTransport({ baseUrl: `${baseUrl}/v1`, httpVersion: "2", nodeOptions: { ca }, interceptors: [auth] }),
  );
}

// ---------- ceilings ----------

async function atomicWriteCeiling(dir: string, workers: number): Promise<PhaseResult> {
  const payload = Buffer.alloc(1024, "x");
  let seq = 0;
  return closedLoop(`atomic write x${workers}`, workers, Math.min(durationMs, 5000), async (w) => {
    const n = seq++;
    const tmp = join(dir, `.w${w}-${n}.tmp`);
    const fh = await open(tmp, "wx", 0o600);
    await fh.write(payload);
    await fh.sync();
    await fh.close();
    await rename(tmp, join(dir, `w${w}-${n % 64}.json`));
    const d = await open(dir, "r");
    await d.sync();
    await d.close();
  });
}

// ---------- stores ----------

interface StoreChoice {
  name: string;
  /** The --store URL (none: the file store). */
  url?: string;
}

/** The PostgreSQL server the run uses: --pg-url, else scripts/postgres.sh's (started if need be). */
function postgresServer(): string | undefined {
  if (values["pg-url"]) return values["pg-url"];
  try {
    const out = execFileSync(join(distRoot, "..", "scripts", "postgres.sh"), ["start"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
    return /SKIPPER_STORE_URL=(\S+)/.exec(out)?.[1];
  } catch (e) {
    console.error(`bench: no PostgreSQL server (${(e as Error).message.split("\n")[0]}): the postgres and pg-boss runs are SKIPPED`);
    return undefined;
  }
}

/** A fresh database `name` on the server (dropped first if it exists); its URL. */
async function pgDatabase(name: string): Promise<string> {
  const admin = new pg.Client({ connectionString: pgUrl });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(pgUrl!);
  url.pathname = `/${name}`;
  return url.toString();
}

// ---------- main ----------

const base = values.dir ? resolve(values.dir) : await mkdtemp(join(resolve(distRoot, ".."), ".bench-data-"));
const echoDir = join(base, "echo");
const rawDir = join(base, "raw");
const children: ChildProcess[] = [];
const results: PhaseResult[] = [];
const storeNames = values.stores.split(",").filter(Boolean);
const pgUrl = storeNames.includes("postgres") ? postgresServer() : undefined;
const stores: StoreChoice[] = [];
for (const name of storeNames) {
  if (name === "file") stores.push({ name });
  else if (name === "postgres") {
    if (pgUrl) stores.push({ name, url: await pgDatabase("bench_skipper") });
  } else throw new Error(`--stores: unknown store '${name}' (file, postgres)`);
}

try {
  await Promise.all([mkdir(rawDir, { recursive: true }), mkdir(echoDir, { recursive: true })]);
  console.error(`bench: ${concurrency} clients, ${durationMs / 1000}s per phase, data in ${base}`);

  // Ceilings first, on an idle machine.
  const rawSerial = await atomicWriteCeiling(rawDir, 1);
  const rawParallel = await atomicWriteCeiling(rawDir, concurrency);
  results.push(rawSerial, rawParallel);

  const echo = await startProcess([join(here, "echo-server.js"), echoDir], {}, (l) => (typeof l.url === "string" ? l.url : undefined));
  children.push(echo.child);
  const echoCa = await readFile(join(echoDir, "tls", "ca.crt"), "utf8");
  const echoClients = Array.from({ length: concurrency }, () => clientFor(HealthService, echo.url, echoCa, {}));
  await Promise.all(echoClients.map((c) => c.check({}))); // connect + handshake outside the timing
  const echoCpu = cpuSeconds(echo.child.pid!);
  results.push(await closedLoop("echo Check", concurrency, durationMs, async (w) => void (await echoClients[w]!.check({})), echoCpu));
  const echoReaders = Array.from({ length: concurrency }, () => clientFor(ResourceService, echo.url, echoCa, {}));
  await Promise.all(echoReaders.map((c, w) => c.getResource({ resourceType: "tenant", id: `bench-tenant-${w}` })));
  const echoResult = await closedLoop(
    "echo GetResource",
    concurrency,
    durationMs,
    async (w) => void (await echoReaders[w]!.getResource({ resourceType: "tenant", id: `bench-tenant-${w}` })),
    echoCpu,
  );
  results.push(echoResult);
  await stopProcess(echo.child);

  // The controller, as npm start runs it: on the file store, then on PostgreSQL (when one can be had).
  for (const store of stores) results.push(...(await controllerPhases(store)));
  const auth = phases.has("auth")
    ? await measureAuthCost({
        dist: distRoot,
        dataDir: join(base, "controller-auth"),
        concurrency,
        roundMs: durationMs / 20,
        rounds: 12,
        warmupMs: 500,
        log: (l) => console.error(l),
      })
    : undefined;
  if (pgUrl && phases.has("claim")) {
    const boss = await pgBossClaimComplete(await pgDatabase("bench_pgboss"), concurrency, durationMs);
    results.push({ name: "pg-boss claim+complete", ...boss, clientCpu: NaN });
  }
  report(results, rawSerial, rawParallel, echoResult);
  if (auth) {
    console.log("");
    printAuthCost(auth);
  }
} finally {
  for (const c of children) await stopProcess(c).catch(() => undefined);
  if (!values.dir) await rm(base, { recursive: true, force: true });
}

// The controller's phases on one store; their names carry the store's.
async function controllerPhases(store: StoreChoice): Promise<PhaseResult[]> {
  const results: PhaseResult[] = [];
  const dataDir = join(base, `controller-${store.name}`);
  const storeArgs = store.url ? ["--store", store.url] : [];
  // The controller, as npm start runs it.
  const profile = values["cpu-prof"] ? ["--cpu-prof", "--cpu-prof-dir", resolve(values["cpu-prof"])] : [];
  const ctl = await startProcess(
    [...profile, join(distRoot, "controller", "main.js"), "--data-dir", dataDir, "--listen", "127.0.0.1:0", ...storeArgs],
    { SKIPPER_ADMIN_TOKEN: ADMIN },
    (l) => (l.action === "listen" ? String((l.metadata as { url: string }).url) : undefined),
  );
  children.push(ctl.child);
  const ca = await readFile(join(dataDir, "tls", "ca.crt"), "utf8");
  const ctlCpu = cpuSeconds(ctl.child.pid!);
  const admin = { "x-admin-token": ADMIN };

  // One node per client, and per client a pool of tenants on it, so clients measure the store,
  // not one tenant's lock. Each new tenant gets its first order from the reconciler; the clients
  // play the agents and finish those, so every pool tenant starts the phase converged.
  const setup = clientFor(NodeService, ctl.url, ca, admin);
  const tokens: string[] = [];
  for (let w = 0; w < concurrency; w++)
    tokens.push((await setup.registerNode({ nodeId: `bench-node-${w}`, displayName: `bench ${w}` })).token);
  const nodes = tokens.map((t) => clientFor(NodeService, ctl.url, ca, { authorization: `Bearer ${t}` }));
  const orders = tokens.map((t) => clientFor(WorkOrderService, ctl.url, ca, { authorization: `Bearer ${t}` }));
  const takeOne = async (w: number) => {
    if (values.claim === "claim-next") return (await nodes[w]!.claimNextWorkOrder({ nodeId: `bench-node-${w}` })).workOrder;
    const next = await nodes[w]!.getNextWorkOrder({ nodeId: `bench-node-${w}` });
    return next.workOrder && (await orders[w]!.claimWorkOrder({ id: next.workOrder.id })).workOrder;
  };
  // With --batch, the single-call phase leaves half of each client's orders to the batch phase.
  const singleLeft: number[] = [];
  const finishOne = async (w: number): Promise<boolean> => {
    // (Setup finishes its orders before the budget is set: unset means no limit.)
    if (batch > 0 && singleLeft[w] !== undefined && singleLeft[w]!-- <= 0) return false;
    const taken = await takeOne(w);
    if (!taken) return false;
    await orders[w]!.reportWorkOrderResult({
      id: taken.id,
      fencingToken: taken.fencingToken,
      result: { success: true, code: "APPLY_OK", message: "bench", details: { durationMs: 1n } },
    });
    return true;
  };
  const pool = phases.has("apply") ? Number(values.pool) : 0;
  const setupStart = performance.now();
  // Setup takes minutes with the default pool: say how far it is, every 10 s.
  const total = concurrency * (pool + 1);
  let created = 0;
  console.error(`setup: creating and converging ${total} tenants for the apply phase (--pool ${pool} per client)...`);
  const progress = setInterval(() => {
    console.error(`setup: ${created} of ${total} tenants created (${((performance.now() - setupStart) / 1000).toFixed(0)} s)`);
  }, 10_000);
  await Promise.all(
    Array.from({ length: concurrency }, async (_, w) => {
      const resources = clientFor(ResourceService, ctl.url, ca, admin);
      await resources.createResource({ resourceType: "tenant", resource: benchTenant(w) });
      created++;
      for (let k = 0; k < pool; k++) {
        await resources.createResource({ resourceType: "tenant", resource: benchTenant(w, k) });
        created++;
      }
      // The reconciler issues the first orders right after each create; wait for them all.
      while ((await nodes[w]!.heartbeat({ nodeId: `bench-node-${w}` })).pendingWorkOrders < pool + 1)
        await new Promise((r) => setTimeout(r, 50));
      while (await finishOne(w));
    }),
  );
  clearInterval(progress);
  console.error(
    `setup: ${concurrency} nodes, ${concurrency * (pool + 1)} converged tenants in ${((performance.now() - setupStart) / 1000).toFixed(1)} s`,
  );

  const deploys = Array.from({ length: concurrency }, () => clientFor(DeploymentService, ctl.url, ca, admin));
  const nextTenant = Array.from({ length: concurrency }, () => 0);
  if (phases.has("apply")) {
    results.push(
      await closedLoop(
        "apply",
        concurrency,
        durationMs,
        async (w) => {
          const k = nextTenant[w]!++;
          if (k >= pool) return false; // pool used up: this client stops (raise --pool)
          const res = await deploys[w]!.apply({ tenantId: `bench-tenant-${w}-${k}` });
          if (!res.workOrder) throw new Error("apply returned no work order");
        },
        ctlCpu,
      ),
    );
    const used = nextTenant.reduce((a, b) => a + Math.min(b, pool), 0);
    if (nextTenant.some((n) => n > pool))
      console.error(`apply: a client used up its pool of ${pool} tenants (${used} applies); raise --pool for a full-length phase`);
  }

  const made = nextTenant.map((n) => Math.min(n, pool));
  const ctx = { phases, batch, durationMs, nodes, orders, made, singleLeft, finishOne, ctlCpu };
  results.push(...(await orderPhases(ctx)));

  const readers = Array.from({ length: concurrency }, () => clientFor(ResourceService, ctl.url, ca, admin));
  await Promise.all(readers.map((c, w) => c.getResource({ resourceType: "tenant", id: `bench-tenant-${w}` })));
  if (phases.has("read"))
    results.push(
      await closedLoop(
        "read",
        concurrency,
        durationMs,
        async (w) => void (await readers[w]!.getResource({ resourceType: "tenant", id: `bench-tenant-${w}` })),
        ctlCpu,
      ),
    );
  await stopProcess(ctl.child);
  return results.map((r) => ({ ...r, name: `${r.name} (${store.name})` }));
}

function report(all: PhaseResult[], rawSerial: PhaseResult, rawParallel: PhaseResult, echoResult: PhaseResult): void {
  const byName = new Map(all.map((r) => [r.name, r]));
  const phaseOf = (name: string) => name.replace(/ \((file|postgres)\)$/, "");
  const ceilingOf: Record<string, PhaseResult> = {
    apply: rawParallel,
    "claim+result": rawParallel,
    "session orders": rawParallel,
    read: echoResult,
  };
  if (batch > 0) ceilingOf[`claim+result batch ${batch}`] = rawParallel;
  const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : "-");
  // Controller CPU per operation: what the "under 1 ms per finished order" counts.
  const cpuMs = (r: PhaseResult) => (r.cpu === undefined || r.rate === 0 ? NaN : (r.cpu * 1000) / r.rate);
  const rows = all.map((r) => {
    const ceiling = ceilingOf[phaseOf(r.name)];
    return [
      r.name,
      String(r.ops),
      fmt(r.rate, 0),
      fmt(r.p50, 2),
      fmt(r.p99, 2),
      r.cpu === undefined ? "-" : `${fmt(r.cpu * 100, 0)}%`,
      fmt(cpuMs(r), 2),
      `${fmt(r.clientCpu * 100, 0)}%`,
      ceiling ? `${fmt((100 * r.rate) / ceiling.rate, 0)}% of ${ceiling.name}` : "",
    ];
  });
  const header = ["phase", "ops", "ops/s", "p50 ms", "p99 ms", "server cpu", "cpu ms/op", "client cpu", "vs ceiling"];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  console.log(line(header));
  console.log(`| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`);
  for (const r of rows) console.log(line(r));

  const targets: Array<{ target: string; ok: boolean; value: number }> = [];
  const boss = byName.get("pg-boss claim+complete");
  for (const store of ["file", "postgres"]) {
    const apply = byName.get(`apply (${store})`);
    const claim = byName.get(`claim+result (${store})`);
    const read = byName.get(`read (${store})`);
    if (apply && store === "file")
      targets.push({
        target: "file: applies >= 60% of atomic write x16",
        ok: apply.rate >= 0.6 * rawParallel.rate,
        value: apply.rate / rawParallel.rate,
      });
    if (claim && store === "file") targets.push({ target: "file: finished orders/s >= 1000", ok: claim.rate >= 1000, value: claim.rate });
    if (claim && store === "postgres" && boss)
      targets.push({
        target: "postgres: finished orders/s >= pg-boss's jobs/s",
        ok: claim.rate >= boss.rate,
        value: claim.rate / boss.rate,
      });
    const batched = byName.get(`claim+result batch ${batch} (${store})`);
    if (batched && claim)
      targets.push({
        target: `${store}: batch ${batch} finished orders/s vs single calls (same run)`,
        ok: batched.rate >= claim.rate,
        value: batched.rate / claim.rate,
      });
    if (batched && store === "postgres" && boss)
      targets.push({
        target: `postgres: batch ${batch} finished orders/s >= pg-boss's jobs/s`,
        ok: batched.rate >= boss.rate,
        value: batched.rate / boss.rate,
      });
    if (claim) targets.push({ target: `${store}: controller CPU per finished order < 1 ms`, ok: cpuMs(claim) < 1, value: cpuMs(claim) });
    if (read) {
      targets.push({
        target: `${store}: reads >= 80% of echo GetResource`,
        ok: read.rate >= 0.8 * echoResult.rate,
        value: read.rate / echoResult.rate,
      });
      targets.push({ target: `${store}: read p99 < 50 ms`, ok: read.p99 < 50, value: read.p99 });
    }
  }
  targets.push(...sessionTargets(byName, cpuMs));
  console.log("");
  for (const t of targets) console.log(`${t.ok ? "MET " : "MISS"}  ${t.target}  (${fmt(t.value, 2)})`);
  console.log(
    JSON.stringify({
      bench: "controller",
      concurrency,
      duration_s: durationMs / 1000,
      node: process.version,
      phases: all.map((r) => ({ ...r, rate: Math.round(r.rate), p50: +r.p50.toFixed(3), p99: +r.p99.toFixed(3) })),
      raw_serial_writes_per_s: Math.round(rawSerial.rate),
      targets,
    }),
  );
}
