// Session soak (npm run bench:soak -- [--minutes 3] [--sessions 50] [--orders-per-s 40]
// [--life-ms 4000] [--store <postgres url>]). Run on demand, never in CI; it prints figures.
//
// Node's http2 and Connect have had per-stream leaks (nodejs/node#42710, connect-es#725), and a
// controller that holds a session per agent for weeks must not grow with the sessions it has
// seen. This runs the controller (dist/controller/main.js, file store unless --store) and, for a
// fixed time, --sessions simulated agents that each open their node's Session, send the full
// heartbeat, ack and report every order pushed to them, send a keepalive every second, and close
// the session after about --life-ms (jittered) to open a new one; one reopen in four also opens a
// new HTTP/2 connection. An admin client creates INSPECT orders for random nodes at
// --orders-per-s. The controller's RSS is sampled every 2 s.
//
// It prints RSS and the heap held after a collection (every 3 s, gc-probe.ts) per tenth of the
// run, the orders finished and sessions opened, and the verdicts: memory is flat when the median
// of the last fifth is within 10 % of the median of the second fifth (the first fifth is warm-up:
// caches, JIT, pools filling). The heap is the leak's witness; RSS also moves with the allocator.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { NodeService, SessionAnswerSubject } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { clientFor, startController } from "./controller-process.js";
import { probeArgs, probeMemory } from "./gc-memory.js";
import { stopChild } from "./node-child.js";
import { answerOf, openSession } from "./session-phases.js";

const ADMIN = "soak-admin-token-0123456789abcdef";
const dist = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "3" },
    sessions: { type: "string", default: "50" },
    "orders-per-s": { type: "string", default: "40" },
    "life-ms": { type: "string", default: "4000" },
    store: { type: "string" },
    // A new connection every n sessions of an agent (default 4); 0: one connection per agent.
    "connection-every": { type: "string", default: "4" },
    // Leave out the full heartbeat report at the start of each session (keepalives only).
    "no-report": { type: "boolean", default: false },
  },
});
const durationMs = Number(values.minutes) * 60_000;
const sessions = Number(values.sessions);
const ordersPerS = Number(values["orders-per-s"]);
const lifeMs = Number(values["life-ms"]);
if (!(durationMs > 0 && sessions > 0 && ordersPerS >= 0 && lifeMs > 0))
  throw new Error("soak: --minutes, --sessions, --life-ms must be positive");

const dataDir = await mkdtemp(join(tmpdir(), "skipper-soak-"));
// gc-probe.ts: on SIGUSR2 the controller collects garbage and writes its memory to probeFile, so
// the heap figure is what it holds, not what waits for the collector.
const probeFile = join(dataDir, "memory.probe");
const probe = probeArgs(dist);
// SOAK_HEAP_SNAPSHOTS=<dir>: the controller writes a heap snapshot there after the warm-up and at
// the end (SIGUSR1), to compare what it holds (Chrome DevTools' comparison view).
const snapshots = process.env.SOAK_HEAP_SNAPSHOTS;
if (snapshots) probe.push("--heapsnapshot-signal=SIGUSR1", `--diagnostic-dir=${resolve(snapshots)}`);
const ctl = await startController(dist, join(dataDir, "data"), ADMIN, probe, values.store ? ["--store", values.store] : [], {
  BENCH_PROBE_FILE: probeFile,
});
const admin = { "x-admin-token": ADMIN };
const nodesAdmin = clientFor(NodeService, ctl.url, ctl.ca, admin);
const ordersAdmin = clientFor(WorkOrderService, ctl.url, ctl.ca, admin);
const nodeIds = Array.from({ length: sessions }, (_, k) => `soak-node-${k}`);
const tokens = await Promise.all(nodeIds.map(async (nodeId) => (await nodesAdmin.registerNode({ nodeId })).token));

/** The controller's RSS and held heap (V8's used heap + external), in MB, after a collection. */
async function memoryMb(): Promise<{ rss: number; heap: number } | undefined> {
  const m = await probeMemory(ctl.child, probeFile);
  return m && { rss: m.rss / 2 ** 20, heap: m.heap / 2 ** 20 };
}

const start = performance.now();
const deadline = start + durationMs;
const samples: Array<{ t: number; rss: number; heap: number }> = [];
let finished = 0;
let opened = 0;
let connections = 0;
const failures: string[] = [];

/**
 * Agent k's client on a connection of its own, from a loopback address of its own (the
 * controller's per-address cap sees a host per agent, as in a real fleet); the connection closes
 * once idle for a second, as an agent's old one does when it moves to a new one.
 */
function connection(k: number): Client<typeof NodeService> {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${tokens[k]}`);
    return next(req);
  };
  const localAddress = `127.0.${1 + Math.floor(k / 250)}.${2 + (k % 250)}`;
  const transport = createConnectTransport({
    baseUrl: `${ctl.url}/v1`,
    httpVersion: "2",
    nodeOptions: { ca: ctl.ca, localAddress } as object,
    interceptors: [auth],
    idleConnectionTimeoutMs: 1000,
  });
  return createClient(NodeService, transport);
}

/** One simulated agent: sessions of about lifeMs, one after another, until the deadline. */
async function agent(k: number): Promise<void> {
  let client: Client<typeof NodeService> | undefined;
  for (let round = 0; performance.now() < deadline; round++) {
    const every = Number(values["connection-every"]);
    if (!client || (every > 0 && round % every === 0)) {
      client = connection(k);
      connections++;
    }
    try {
      await session(client, k);
    } catch (e) {
      // As an agent does: count it, wait a moment, open a new session.
      failures.push((e as Error).message);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** One session of about lifeMs: full heartbeat, keepalives every second, every pushed order done. */
async function session(client: Client<typeof NodeService>, k: number): Promise<void> {
  const s = await openSession(client, k, nodeIds[k]);
  opened++;
  try {
    if (!values["no-report"])
      s.send({ case: "heartbeat", value: { report: { nodeId: nodeIds[k], agentVersion: "soak", heartbeatIntervalMs: 1000n } } });
    const until = Math.min(deadline, performance.now() + lifeMs * (0.5 + Math.random()));
    let lastBeat = performance.now();
    while (performance.now() < until) {
      const wake = Math.min(until, lastBeat + 1000);
      const order = await s.next((m) => (m.kind.case === "order" ? m.kind.value.workOrder : undefined), wake);
      if (performance.now() >= lastBeat + 1000) {
        s.send({ case: "heartbeat", value: {} });
        lastBeat = performance.now();
      }
      if (!order) continue;
      const token = order.claim?.fencingToken ?? 0n;
      s.send({ case: "ack", value: { workOrderId: order.id, fencingToken: token } });
      if (!(await s.next(answerOf(SessionAnswerSubject.ACK, order.id)))?.accepted) continue;
      s.send({ case: "result", value: { workOrderId: order.id, fencingToken: token, result: { success: true, code: "INSPECT_OK" } } });
      if ((await s.next(answerOf(SessionAnswerSubject.RESULT, order.id)))?.accepted) finished++;
    }
  } finally {
    await s.close();
  }
}

/** Creates INSPECT orders for random nodes at ordersPerS until the deadline. */
async function producer(): Promise<number> {
  let created = 0;
  while (performance.now() < deadline) {
    const due = start + (created / Math.max(ordersPerS, 1e-9)) * 1000;
    if (ordersPerS === 0 || performance.now() < due) {
      await new Promise((r) => setTimeout(r, ordersPerS === 0 ? 1000 : Math.max(1, due - performance.now())));
      continue;
    }
    const nodeId = nodeIds[Math.floor(Math.random() * nodeIds.length)]!;
    await ordersAdmin.createWorkOrder({
      type: WorkOrderType.INSPECT,
      target: { nodeId },
      action: { kind: { case: "inspect", value: {} } },
    });
    created++;
  }
  return created;
}

if (snapshots) {
  setTimeout(() => ctl.child.kill("SIGUSR1"), durationMs * 0.3).unref();
  setTimeout(() => ctl.child.kill("SIGUSR1"), durationMs * 0.97).unref();
}
const sampler = setInterval(() => {
  const t = (performance.now() - start) / 1000;
  memoryMb().then(
    (m) => m && samples.push({ t, ...m }),
    () => undefined,
  );
}, 3000);
console.error(`soak: ${sessions} agents, ${values.minutes} min, ${ordersPerS} orders/s, sessions of ~${lifeMs} ms`);
let created = 0;
try {
  [created] = await Promise.all([producer(), ...nodeIds.map((_, k) => agent(k))]);
} finally {
  clearInterval(sampler);
  await stopChild(ctl.child);
  await rm(dataDir, { recursive: true, force: true });
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)]! : Number.NaN;
};
const part = (from: number, to: number, key: "rss" | "heap") =>
  median(samples.filter((s) => s.t >= (from * durationMs) / 1000 && s.t < (to * durationMs) / 1000).map((s) => s[key]));
console.log("| tenth of the run | RSS MB | heap held after GC, MB |\n| --- | --- | --- |");
for (let i = 0; i < 10; i++)
  console.log(`| ${i + 1} | ${part(i / 10, (i + 1) / 10, "rss").toFixed(1)} | ${part(i / 10, (i + 1) / 10, "heap").toFixed(1)} |`);
console.log(`\n${opened} sessions opened on ${connections} connections, ${created} orders created, ${finished} finished over sessions`);
if (failures.length > 0) console.log(`${failures.length} sessions failed (reopened), first: ${failures[0]}`);
for (const key of ["heap", "rss"] as const) {
  const warm = part(0.2, 0.4, key);
  const last = part(0.8, 1, key);
  const growth = last / warm - 1;
  console.log(
    `${Math.abs(growth) <= 0.1 ? "MET " : "MISS"}  ${key} flat over the soak: ${warm.toFixed(1)} MB after warm-up, ${last.toFixed(1)} MB at the end (${(growth * 100).toFixed(1)} %, bar 10 %)`,
  );
}
console.log(
  JSON.stringify({
    bench: "soak",
    sessions,
    minutes: Number(values.minutes),
    opened,
    connections,
    created,
    finished,
    failures: failures.length,
    rss: samples,
  }),
);
