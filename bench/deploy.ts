// Deploy benchmark (npm run bench:deploy). Run on demand; it prints figures.
//
// What a user waits for, through Skipper and without it, on the same engine in the same run:
//
//   skipper create -> serving   CreateResource of a tenant (its own compose file: a busybox httpd
//                               on a loopback port, stop_grace_period 1s) until the port answers
//                               with the tenant's page (polled every 20 ms, 200 ms per try)
//   skipper delete -> gone      DeleteResource of that tenant until the engine shows none of the
//                               project's containers (polled every 50 ms)
//   bare up -d -> serving       `compose up -d` of the same file (same compose program the agent
//                               uses) until the port answers (polled from the start, as above)
//   bare down -> gone           `compose down` until the containers are gone
//   (and, for reference, when each says it is done: the deploy order's finished_at, `up -d`'s return)
//
// The controller and skippy run as processes from dist/ (file store, TLS, the push stream), the
// agent on a real engine (scripts/docker-engine.sh start). Rounds alternate Skipper and bare, each
// with its own project and port; the first round warms the engine and is not counted.
// Target (issue 18): Skipper within 1.5x of bare compose for both.
//
// Options: --rounds <n> (default 5, plus the warm-up round).
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { promisify } from "node:util";
import { create } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Client } from "@connectrpc/connect";
import type { WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { clientFor, startController } from "./controller-process.js";
import { percentile } from "./measure.js";
import { stopChild } from "./node-child.js";
import { removeProjects } from "./engine-projects.js";

const run = promisify(execFile);
const dist = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const ADMIN = "bench-admin-token-0123456789abcdef";
const { values } = parseArgs({ options: { rounds: { type: "string", default: "5" } } });
const ROUNDS = Number(values.rounds);
const log = (m: string) => console.error(`bench:deploy: ${m}`);

function composeFile(port: number, greeting: string): string {
  return [
    "services:",
    "  web:",
    "    image: skipper-busybox:local",
    `    command: ["sh", "-c", "mkdir -p /www && echo ${greeting} > /www/index.html && exec httpd -f -p 8080 -h /www"]`,
    "    ports:",
    `      - "127.0.0.1:${port}:8080"`,
    "    stop_grace_period: 1s",
    "",
  ].join("\n");
}

async function serving(port: number, greeting: string, deadlineMs = 120_000): Promise<void> {
  const end = Date.now() + deadlineMs;
  while (Date.now() < end) {
    try {
      // Each try gives up after 200 ms: one that reaches the engine's port proxy while the
      // container's network is still coming up waits for a TCP retransmit (about 1 s).
      const r = await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(200) });
      if ((await r.text()).trim() === greeting) return;
    } catch {
      // not yet
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`port ${port} never served ${greeting}`);
}

// The tenant's deploy order, once it has finished.
async function finishedOrder(orders: Client<typeof WorkOrderService>, tenantId: string): Promise<WorkOrder> {
  for (;;) {
    const o = (await orders.listWorkOrders({ tenantId })).workOrders.find((w) => w.finishedAt);
    if (o) return o;
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function gone(engine: string, project: string, deadlineMs = 120_000): Promise<void> {
  const end = Date.now() + deadlineMs;
  while (Date.now() < end) {
    const { stdout } = await run("docker", ["ps", "-aq", "--filter", `label=com.docker.compose.project=${project}`], {
      env: { ...process.env, DOCKER_HOST: engine },
    });
    if (stdout.trim() === "") return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`project ${project} never went`);
}

// The compose program the agent would use: the v2 plugin when it answers, else v1.
function composeProgram(engine: string): { program: string; base: string[] } {
  const env = { ...process.env, DOCKER_HOST: engine };
  try {
    execFileSync("docker", ["compose", "version", "--short"], { env, stdio: "ignore" });
    return { program: "docker", base: ["compose"] };
  } catch {
    return { program: "docker-compose", base: [] };
  }
}

const out = execFileSync(join(resolve(dist, ".."), "scripts", "docker-engine.sh"), ["start"], {
  encoding: "utf8",
  stdio: ["ignore", "pipe", "ignore"],
  timeout: 180_000,
});
const engine = /DOCKER_HOST=(\S+)/.exec(out)?.[1];
if (!engine) throw new Error("bench:deploy needs a Docker engine (scripts/docker-engine.sh start)");
const compose = composeProgram(engine);
const base = await mkdtemp(join(resolve(dist, ".."), ".bench-data-deploy-"));
const children: ChildProcess[] = [];
const projects: string[] = [];
const figures = {
  skipperUp: [] as number[],
  skipperDown: [] as number[],
  bareUp: [] as number[],
  bareDown: [] as number[],
  // When each side says it is done: Skipper's deploy order finished, bare `up -d` returned.
  skipperDone: [] as number[],
  bareDone: [] as number[],
};
try {
  const dataDir = join(base, "data");
  const ctl = await startController(dist, dataDir, ADMIN);
  children.push(ctl.child);
  const { url, ca } = ctl;
  const caFile = join(dataDir, "tls", "ca.crt");
  const headers = { "x-admin-token": ADMIN };
  const nodes = clientFor(NodeService, url, ca, headers);
  const resources = clientFor(ResourceService, url, ca, headers);
  const orders = clientFor(WorkOrderService, url, ca, headers);
  const token = (await nodes.registerNode({ nodeId: "bench-deploy" })).token;
  const agent = spawn(
    process.execPath,
    [
      join(dist, "agent", "main.js"),
      "--controller",
      url,
      "--node-id",
      "bench-deploy",
      "--ca-file",
      caFile,
      "--state-dir",
      join(base, "state"),
      "--work-dir",
      join(base, "work"),
      "--log-level",
      "warn",
    ],
    { env: { ...process.env, SKIPPY_NODE_TOKEN: token, DOCKER_HOST: engine }, stdio: ["ignore", "ignore", "inherit"] },
  );
  children.push(agent);
  // The agent is ready when its first heartbeat is in.
  for (;;) {
    const n = (await resources.getResource({ resourceType: "node", id: "bench-deploy" })).resource;
    if (n?.currentState?.kind.case === "node" && n.currentState.kind.value.lastHeartbeatAt) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  log(`controller and agent up; compose: ${[compose.program, ...compose.base].join(" ")}; ${ROUNDS} rounds + 1 warm-up`);
  for (let round = 0; round <= ROUNDS; round++) {
    const port = 19100 + round * 2;
    // Skipper: the tenant's own compose file on this node.
    const tenant = `bench-deploy-${round}`;
    projects.push(tenant);
    const greeting = `skipper-${round}`;
    let t0 = performance.now();
    const wall0 = Date.now();
    await resources.createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id: tenant,
        resourceType: "tenant",
        desiredState: {
          kind: {
            case: "tenant",
            value: { deploymentPolicy: { targetNodeId: "bench-deploy" }, compose: { composeFile: composeFile(port, greeting) } },
          },
        },
      }),
    });
    await serving(port, greeting);
    const sUp = performance.now() - t0;
    const order = await finishedOrder(orders, tenant);
    const sDone = timestampMs(order.finishedAt!) - wall0;
    t0 = performance.now();
    await resources.deleteResource({ resourceType: "tenant", id: tenant });
    await gone(engine, tenant);
    const sDown = performance.now() - t0;
    // Bare compose: the same file, its own project and port.
    const bare = `bench-bare-${round}`;
    projects.push(bare);
    const dir = join(base, bare);
    await mkdir(dir, { recursive: true });
    const bareGreeting = `bare-${round}`;
    await writeFile(join(dir, "docker-compose.yml"), composeFile(port + 1, bareGreeting));
    const env = { ...process.env, DOCKER_HOST: engine };
    const args = (...a: string[]) => [...compose.base, "-p", bare, "-f", join(dir, "docker-compose.yml"), ...a];
    // The port is polled from the start, as for Skipper: a try made while the container is still
    // starting is itself slower to be answered (the engine's port proxy), so both sides pay it.
    t0 = performance.now();
    let bDone = 0;
    const upDone = run(compose.program, args("up", "-d"), { env }).then(() => (bDone = performance.now() - t0));
    await serving(port + 1, bareGreeting);
    const bUp = performance.now() - t0;
    await upDone;
    t0 = performance.now();
    await run(compose.program, args("down"), { env });
    await gone(engine, bare);
    const bDown = performance.now() - t0;
    const f = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
    log(`round ${round}${round === 0 ? " (warm-up)" : ""}: skipper up ${f(sUp)}, down ${f(sDown)}; bare up ${f(bUp)}, down ${f(bDown)}`);
    if (round === 0) continue;
    figures.skipperUp.push(sUp);
    figures.skipperDown.push(sDown);
    figures.bareUp.push(bUp);
    figures.bareDown.push(bDown);
    figures.skipperDone.push(sDone);
    figures.bareDone.push(bDone);
  }
  const p50 = (xs: number[]) =>
    percentile(
      [...xs].sort((a, b) => a - b),
      50,
    );
  const rows = [
    ["create -> serving", p50(figures.skipperUp), p50(figures.bareUp)],
    ["delete -> gone", p50(figures.skipperDown), p50(figures.bareDown)],
  ] as const;
  const doneRow = ["create -> reported done", p50(figures.skipperDone), p50(figures.bareDone)] as const;
  console.log(`deploy benchmark: ${ROUNDS} rounds, compose ${[compose.program, ...compose.base].join(" ")}, node ${process.version}`);
  console.log("| path | skipper p50 | bare compose p50 | ratio | target <= 1.5x |");
  console.log("|---|---|---|---|---|");
  for (const [name, s, b] of rows) {
    console.log(
      `| ${name} | ${(s / 1000).toFixed(2)} s | ${(b / 1000).toFixed(2)} s | ${(s / b).toFixed(2)}x | ${s / b <= 1.5 ? "met" : "MISSED"} |`,
    );
  }
  const [dn, ds, db] = doneRow;
  console.log(
    `| (${dn}: order finished / up -d returned) | ${(ds / 1000).toFixed(2)} s | ${(db / 1000).toFixed(2)} s | ${(ds / db).toFixed(2)}x | |`,
  );
  console.log(
    JSON.stringify({
      bench: "deploy",
      rounds: ROUNDS,
      compose: [compose.program, ...compose.base].join(" "),
      p50_ms: Object.fromEntries([...rows, doneRow].map(([n, s, b]) => [n, { skipper: Math.round(s), bare: Math.round(b) }])),
      samples_ms: Object.fromEntries(Object.entries(figures).map(([k, v]) => [k, v.map(Math.round)])),
    }),
  );
} finally {
  for (const c of children.reverse()) await stopChild(c).catch(() => undefined);
  removeProjects(engine, projects);
  await rm(base, { recursive: true, force: true });
}
