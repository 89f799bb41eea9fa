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
// It prints RSS per tenth of the run, the orders finished and sessions opened, and the verdict:
// memory is flat when the median RSS of the last fifth is within 10 % of the median of the
// second fifth (the first fifth is warm-up: caches, JIT, pools filling).
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createClient, type Client } from "@connectrpc/connect";
import { NodeService, SessionAnswerSubject } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { clientFor, startController, transportTo } from "./controller-process.js";
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
  },
});
const durationMs = Number(values.minutes) * 60_000;
const sessions = Number(values.sessions);
const ordersPerS = Number(values["orders-per-s"]);
const lifeMs = Number(values["life-ms"]);
if (!(durationMs > 0 && sessions > 0 && ordersPerS >= 0 && lifeMs > 0))
  throw new Error("soak: --minutes, --sessions, --life-ms must be positive");

const dataDir = await mkdtemp(join(tmpdir(), "skipper-soak-"));
const ctl = await startController(dist, dataDir, ADMIN, [], values.store ? ["--store", values.store] : []);
const admin = { "x-admin-token": ADMIN };
const nodesAdmin = clientFor(NodeService, ctl.url, ctl.ca, admin);
const ordersAdmin = clientFor(WorkOrderService, ctl.url, ctl.ca, admin);
const nodeIds = Array.from({ length: sessions }, (_, k) => `soak-node-${k}`);
const tokens = await Promise.all(nodeIds.map(async (nodeId) => (await nodesAdmin.registerNode({ nodeId })).token));

async function rssMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
}

const start = performance.now();
const deadline = start + durationMs;
const samples: Array<{ t: number; mb: number }> = [];
let finished = 0;
let opened = 0;
let connections = 0;

/** One simulated agent: sessions of about lifeMs, one after another, until the deadline. */
async function agent(k: number): Promise<void> {
  const headers = { authorization: `Bearer ${tokens[k]}` };
  let client: Client<typeof NodeService> | undefined;
  for (let round = 0; performance.now() < deadline; round++) {
    if (!client || round % 4 === 0) {
      client = createClient(NodeService, transportTo(ctl.url, ctl.ca, headers));
      connections++;
    }
    const s = await openSession(client, k, nodeIds[k]);
    opened++;
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

const sampler = setInterval(() => {
  rssMb(ctl.child.pid!).then(
    (mb) => samples.push({ t: (performance.now() - start) / 1000, mb }),
    () => undefined,
  );
}, 2000);
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
const fifth = (i: number) => samples.filter((s) => s.t >= (i * durationMs) / 5000 && s.t < ((i + 1) * durationMs) / 5000).map((s) => s.mb);
console.log("| tenth of the run | RSS MB (median) |\n| --- | --- |");
for (let i = 0; i < 10; i++) {
  const part = samples.filter((s) => s.t >= (i * durationMs) / 10_000 && s.t < ((i + 1) * durationMs) / 10_000).map((s) => s.mb);
  console.log(`| ${i + 1} | ${median(part).toFixed(1)} |`);
}
const warm = median(fifth(1));
const last = median(fifth(4));
const growth = last / warm - 1;
console.log(`\n${opened} sessions opened on ${connections} connections, ${created} orders created, ${finished} finished over sessions`);
console.log(`RSS after warm-up ${warm.toFixed(1)} MB, at the end ${last.toFixed(1)} MB (${(growth * 100).toFixed(1)} %)`);
console.log(`${Math.abs(growth) <= 0.1 ? "MET " : "MISS"}  memory flat over the soak (last fifth within 10 % of the second)`);
console.log(
  JSON.stringify({ bench: "soak", sessions, minutes: Number(values.minutes), opened, connections, created, finished, rss: samples }),
);
