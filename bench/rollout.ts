// Rollout benchmark (npm run bench:rollout). Run on demand; it prints figures.
//
// The controller runs as its own process (dist/controller/main.js, file store, generated TLS),
// as in bench:dispatch. This process registers --nodes nodes (default 1,000; or
// SKIPPER_BENCH_NODES) labelled fleet=bench, the first --canary of them (default 10) also
// ring=canary, and plays their agents (sim-fleet.ts; --transport session, the default as skippy's
// is: a Session per node, orders claimed as they are pushed, acked, results and full reports on
// the session; --transport watch: a WatchWorkOrders stream, unary heartbeats, claims and reports;
// either way by a pool of --workers, default 100, each apply taking --apply-ms, default 0). One
// tenant is placed on every node by label and deployed at v1 (not timed). Then --rounds rounds
// (default 3), alternating:
//
//   A  the tenant changes to a new version with no rollout policy: the same orders, without waves
//   B  the tenant changes to a new version with a four-wave policy: ring=canary, 10 %, 50 %, the
//      rest; no bake time, no promote gate, no max_parallel
//
// and (unless --no-control) one more A after the last B. Each B is set against the mean of the A
// before and the A after it (the baseline drifts between runs: the store grows; against the A
// before alone with --no-control for the last round), and the waves' overhead is the median of
// the rounds'.
//
// Each run is timed from the UpdateResource call until the tenant's record shows every node's
// target applied on the new spec and the change's rollout record SUCCEEDED (polled every 25 ms
// once the last report is answered; the last report's answer and the rollout's own finished_at
// are shown too, with how long reports waited for their answer). Over each run: the
// controller's CPU (user + system, from /proc, as % of one core) and its peak RSS (sampled every
// 100 ms), this process's CPU, and what every other process used (the machine may be shared,
// which slows the controller down). Between runs the fleet settles for a heartbeat interval, so
// each run starts with every agent having reported what it runs.
//
// Options: --nodes <n>, --workers <n>, --apply-ms <ms>, --canary <n>, --heartbeat <s> (10),
//          --transport session|watch, --rounds <n> (3), --timeout <s> per run (1800),
//          --no-control, --cpu-prof <dir> (controller V8 profile).
import { mkdtemp, rm } from "node:fs/promises";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { type Timestamp, timestampMs } from "@bufbuild/protobuf/wkt";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema, type ResourceSpecSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { type Rollout, RolloutStatus, type RolloutPolicySchema } from "../gen/skipper/v1/rollout_pb.js";
import { RolloutService } from "../gen/skipper/v1/rollout_service_pb.js";
import { machineBusy, percentile, procStats } from "./measure.js";
import { printFigures, type RunFigures } from "./rollout-figures.js";
import { clientFor, type Controller, startController } from "./controller-process.js";
import { stopChild } from "./node-child.js";
import { type Finished, SimFleet } from "./sim-fleet.js";

const dist = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const ADMIN = "bench-admin-token-0123456789abcdef";
const TENANT = "bench-rollout";
const { values } = parseArgs({
  options: {
    nodes: { type: "string", default: process.env.SKIPPER_BENCH_NODES ?? "1000" },
    workers: { type: "string", default: "100" },
    "apply-ms": { type: "string", default: "0" },
    canary: { type: "string", default: "10" },
    heartbeat: { type: "string", default: "10" },
    timeout: { type: "string", default: "1800" },
    "no-control": { type: "boolean", default: false },
    transport: { type: "string", default: "session" },
    rounds: { type: "string", default: "3" },
    "cpu-prof": { type: "string" },
  },
});
const NODES = Number(values.nodes);
const WORKERS = Number(values.workers);
const APPLY_MS = Number(values["apply-ms"]);
const CANARY = Number(values.canary);
const HEARTBEAT_MS = Number(values.heartbeat) * 1000;
const TIMEOUT_MS = Number(values.timeout) * 1000;
const ROUNDS = Number(values.rounds);
const TRANSPORT = values.transport;
if (![NODES, WORKERS, HEARTBEAT_MS, TIMEOUT_MS, ROUNDS].every((n) => n > 0) || !(APPLY_MS >= 0) || !(CANARY >= 0))
  throw new Error("--nodes, --workers, --heartbeat, --rounds and --timeout must be positive; --apply-ms and --canary at least 0");
if (TRANSPORT !== "session" && TRANSPORT !== "watch") throw new Error("--transport must be session or watch");

type Policy = MessageInitShape<typeof RolloutPolicySchema>;
const FOUR_WAVES: Policy = {
  waves: [
    { name: "canary", nodeSelector: { ring: "canary" } },
    { name: "ten-percent", size: { case: "percent", value: 10 } },
    { name: "half", size: { case: "percent", value: 50 } },
    { name: "rest" },
  ],
  maxParallel: 0,
};

const log = (line: string) => console.error(line);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const nodeId = (i: number) => `node-${String(i).padStart(5, "0")}`;
const versionOf = (f: Finished) => /image: bench:(v\d+)/.exec(f.order.desiredState?.composeProject?.composeFile ?? "")?.[1];

function tenantSpec(version: string, policy?: Policy): MessageInitShape<typeof ResourceSpecSchema> {
  return {
    kind: {
      case: "tenant",
      value: {
        deploymentPolicy: { nodeSelector: { fleet: "bench" } },
        compose: { projectName: TENANT, composeFile: `services:\n  web:\n    image: bench:${version}\n` },
        rollout: policy,
      },
    },
  };
}

/** Which version each node last reported applied, and who waits for a version to be everywhere. */
class Progress {
  readonly on = new Map<string, { version: string; specHash: string; issuedAt: number }>();
  orders = new Map<string, number>();
  lastAt = 0;
  private waiter: { version: string; resolve: () => void } | undefined;

  finished(f: Finished): void {
    const version = versionOf(f);
    if (f.order.target?.tenantId !== TENANT || !version) return;
    const issuedAt = f.order.createdAt ? timestampMs(f.order.createdAt) : Number.NaN;
    this.on.set(f.nodeId, { version, specHash: f.order.desiredState?.specHash ?? "", issuedAt });
    this.orders.set(version, (this.orders.get(version) ?? 0) + 1);
    this.lastAt = f.at;
    if (this.waiter && this.count(this.waiter.version) === NODES) this.waiter.resolve();
  }
  count(version: string): number {
    let n = 0;
    for (const v of this.on.values()) if (v.version === version) n++;
    return n;
  }
  everywhere(version: string): Promise<void> {
    if (this.count(version) === NODES) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiter = { version, resolve };
    });
  }
}

const base = await mkdtemp(join(resolve(dist, ".."), ".bench-data-rollout-"));
let ctl: Controller | undefined;
let fleet: SimFleet | undefined;
// Interrupted: stop the controller and drop its data too.
for (const sig of ["SIGINT", "SIGTERM"] as const)
  process.once(sig, () => {
    fleet?.close();
    ctl?.child.kill("SIGKILL");
    void rm(base, { recursive: true, force: true }).finally(() => process.exit(130));
  });
try {
  const profile = values["cpu-prof"] ? ["--cpu-prof", "--cpu-prof-dir", resolve(values["cpu-prof"])] : [];
  ctl = await startController(dist, join(base, "data"), ADMIN, profile);
  const { url, ca } = ctl;
  const pid = ctl.child.pid!;
  const admin = { "x-admin-token": ADMIN };
  const nodes = clientFor(NodeService, url, ca, admin);
  const resources = clientFor(ResourceService, url, ca, admin);
  const rollouts = clientFor(RolloutService, url, ca, admin);
  const progress = new Progress();
  fleet = new SimFleet({
    url,
    ca,
    workers: WORKERS,
    applyMs: APPLY_MS,
    heartbeatMs: HEARTBEAT_MS,
    transport: TRANSPORT,
    onFinished: (f) => progress.finished(f),
  });
  const f = fleet;

  log(
    `rollout bench: ${NODES} nodes (${CANARY} ring=canary) on ${TRANSPORT}, ${WORKERS} agent workers, apply ${APPLY_MS} ms, data in ${base}`,
  );
  const t0 = performance.now();
  for (let i = 0; i < NODES; i += 25) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(25, NODES - i) }, async (_, k) => {
        const id = nodeId(i + k);
        const labels = { fleet: "bench", ring: i + k < CANARY ? "canary" : "main" };
        return { id, token: (await nodes.registerNode({ nodeId: id, labels })).token };
      }),
    );
    for (const b of batch) f.add(b.id, b.token);
    if ((i + 25) % 250 === 0) log(`setup: ${i + 25} of ${NODES} nodes registered`);
  }
  await f.start();
  log(
    `setup: ${NODES} ${TRANSPORT === "session" ? "sessions" : "streams"} open, first heartbeats in (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
  );

  await resources.createResource({
    resourceType: "tenant",
    resource: create(ResourceSchema, { id: TENANT, resourceType: "tenant", desiredState: tenantSpec("v1") }),
  });
  await waitEverywhere("v1", "setup");
  log(`setup: v1 on every node (${((performance.now() - t0) / 1000).toFixed(1)} s)`);

  const runs: RunFigures[] = [];
  const plan: [string, string, Policy | undefined][] = [];
  for (let r = 1; r <= ROUNDS; r++) {
    plan.push([`A${r} (no waves)`, `v${plan.length + 2}`, undefined]);
    plan.push([`B${r} (four waves)`, `v${plan.length + 2}`, FOUR_WAVES]);
  }
  if (!values["no-control"]) plan.push([`A${ROUNDS + 1} (no waves)`, `v${plan.length + 2}`, undefined]);
  for (const [name, version, policy] of plan) {
    log(`settling ${HEARTBEAT_MS / 1000 + 2} s (a heartbeat round, so every agent has reported what it runs)`);
    await sleep(HEARTBEAT_MS + 2000);
    runs.push(await timedChange(name, version, policy));
  }
  printFigures(runs, { nodes: NODES, workers: WORKERS, applyMs: APPLY_MS, heartbeatMs: HEARTBEAT_MS, transport: TRANSPORT });

  /** Resolves when every node reported `version` applied; logs progress every 5 s; throws after --timeout. */
  async function waitEverywhere(version: string, label: string, onTick?: () => string): Promise<void> {
    const started = performance.now();
    const tick = setInterval(() => {
      const s = ((performance.now() - started) / 1000).toFixed(0);
      log(`${label}: ${s} s, ${progress.count(version)} of ${NODES} nodes on ${version}${onTick ? `, ${onTick()}` : ""}`);
    }, 5000);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        progress.everywhere(version),
        new Promise((_, rej) => {
          timer = setTimeout(() => rej(new Error(`${label}: ${version} not on every node after ${TIMEOUT_MS / 1000} s`)), TIMEOUT_MS);
        }),
      ]);
    } catch (e) {
      await diagnose(version);
      throw e;
    } finally {
      clearInterval(tick);
      clearTimeout(timer);
    }
  }

  /** Says what the controller shows for a change that did not finish. */
  async function diagnose(version: string): Promise<void> {
    const behind = [...Array(NODES).keys()].map(nodeId).filter((n) => progress.on.get(n)?.version !== version);
    log(`not on ${version}: ${behind.length} node(s), e.g. ${behind.slice(0, 5).join(", ")}; agent counts ${JSON.stringify(f.counts)}`);
    const r = (await rollouts.listRollouts({ tenantId: TENANT, pageSize: 1 })).rollouts[0];
    if (r) log(`latest rollout ${r.id}: ${RolloutStatus[r.status]} ${r.message}`);
    const t = (await resources.getResource({ resourceType: "tenant", id: TENANT })).resource;
    log(`tenant convergence: ${t?.convergence?.message}`);
  }

  /** Changes the tenant to `version` (with `policy`) and measures until the change is done everywhere. */
  async function timedChange(name: string, version: string, policy: Policy | undefined): Promise<RunFigures> {
    log(`run ${name}: v${Number(version.slice(1)) - 1} -> ${version}${policy ? ", four waves" : ", no rollout policy"}`);
    let peakRss = procStats(pid).rssMb;
    const sampler = setInterval(() => {
      peakRss = Math.max(peakRss, procStats(pid).rssMb);
    }, 100);
    let lastCpu = procStats(pid).cpuSeconds;
    let lastTick = performance.now();
    const cpu0 = lastCpu;
    const bench0 = process.cpuUsage();
    const machine0 = machineBusy().busySeconds;
    const wall0 = Date.now();
    const start = performance.now();
    const ordersBefore = progress.orders.get(version) ?? 0;
    const [reportsBefore, retriesBefore] = [f.reportMs.length, f.counts.retries];
    try {
      await resources.updateResource({ resourceType: "tenant", id: TENANT, desiredState: tenantSpec(version, policy) });
      await waitEverywhere(version, `run ${name}`, () => {
        const cpu = procStats(pid).cpuSeconds;
        const now = performance.now();
        const pct = (100 * (cpu - lastCpu)) / ((now - lastTick) / 1000);
        [lastCpu, lastTick] = [cpu, now];
        return `controller ${pct.toFixed(0)}% of a core over the last 5 s, rss ${procStats(pid).rssMb.toFixed(0)} MB, load ${loadavg()[0]!.toFixed(1)}, ${f.counts.retries - retriesBefore} retried calls`;
      });
      const lastReportS = (progress.lastAt - start) / 1000;
      const rollout = await confirmed(version);
      const seconds = (performance.now() - start) / 1000;
      const cpu = procStats(pid).cpuSeconds - cpu0;
      const used = process.cpuUsage(bench0);
      const benchCpu = (used.user + used.system) / 1e6;
      const machine = machineBusy().busySeconds - machine0;
      const rel = (t: Timestamp | undefined) => (t ? (timestampMs(t) - wall0) / 1000 : Number.NaN);
      const reports = f.reportMs.slice(reportsBefore).sort((x, y) => x - y);
      const figures: RunFigures = {
        name,
        version,
        withWaves: policy !== undefined,
        seconds,
        lastReportS,
        rolloutDoneS: rel(rollout.finishedAt),
        orders: (progress.orders.get(version) ?? 0) - ordersBefore,
        cpuPercent: (100 * cpu) / seconds,
        peakRssMb: peakRss,
        reportMs: [percentile(reports, 50), percentile(reports, 99), reports.at(-1) ?? Number.NaN],
        retries: f.counts.retries - retriesBefore,
        benchCpuPercent: (100 * benchCpu) / seconds,
        otherCpuPercent: (100 * Math.max(0, machine - cpu - benchCpu)) / seconds,
        waves: rollout.waves.map((w) => ({
          name: w.name,
          nodes: w.nodes.length,
          startS: rel(w.startedAt),
          issuedS: (Math.max(...w.nodes.map((n) => progress.on.get(n.nodeId)?.issuedAt ?? Number.NaN)) - wall0) / 1000,
          doneS: rel(w.completedAt),
        })),
      };
      log(
        `run ${name}: ${seconds.toFixed(2)} s (last report ${lastReportS.toFixed(2)} s), ${figures.orders} orders, controller ${figures.cpuPercent.toFixed(0)}% of a core, peak rss ${peakRss.toFixed(0)} MB, other processes ${figures.otherCpuPercent.toFixed(0)}% of a core`,
      );
      return figures;
    } finally {
      clearInterval(sampler);
    }
  }

  /** Polls until every target applied the node's new spec and the change's rollout SUCCEEDED; returns that rollout. */
  async function confirmed(version: string): Promise<Rollout> {
    const hashes = new Map([...progress.on].filter(([, v]) => v.version === version).map(([n, v]) => [n, v.specHash]));
    const toHash = hashes.values().next().value ?? "";
    const deadline = performance.now() + TIMEOUT_MS;
    for (;;) {
      const r = (await rollouts.listRollouts({ tenantId: TENANT, pageSize: 1 })).rollouts[0];
      if (r?.toSpecHash === toHash && r.status === RolloutStatus.SUCCEEDED) {
        const t = (await resources.getResource({ resourceType: "tenant", id: TENANT })).resource?.currentState?.kind;
        const targets = t?.case === "tenant" ? t.value.targets : [];
        if (targets.length === NODES && targets.every((x) => x.appliedHash === hashes.get(x.nodeId))) return r;
      }
      if (performance.now() > deadline) {
        await diagnose(version);
        throw new Error(`the controller did not confirm ${version} everywhere`);
      }
      await sleep(25);
    }
  }
} finally {
  fleet?.close();
  if (ctl) await stopChild(ctl.child);
  // SKIPPER_BENCH_KEEP=1 leaves the data directory for a look at the events and records afterwards.
  if (process.env.SKIPPER_BENCH_KEEP === "1") console.error(`data kept in ${base}`);
  else await rm(base, { recursive: true, force: true });
}
process.exit(0);
