// Dispatch benchmark (npm run bench:dispatch). Run on demand; it prints figures.
//
// The controller runs as its own process (dist/controller/main.js, file store, generated TLS).
// This process plays --agents simulated agents (default 1,000), each a node with its own HTTP/2
// connection holding a WatchWorkOrders stream and heartbeating every --heartbeat seconds
// (default 10), as skippy does. Measured:
//
//   idle      the controller's RSS and CPU over --idle seconds (default 30) with every stream
//             open and the heartbeats going
//   dispatch  from CreateResource of a tenant placed on one node returning to that node's agent
//             holding the claim: the reconciler issues the order, the stream rings, the agent
//             claims; then from an Apply of that tenant being called to the claim of the order
//             it made (Apply returns after its pass issued the order). p50/p99 over --samples (default 500) of each, one at a time, random nodes.
import { spawn, type ChildProcess } from "node:child_process";
import { setMaxListeners } from "node:events";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { percentile, procStats } from "./measure.js";
import { hostAddress, SimNode } from "./sim-fleet.js";
import { clientFor } from "./controller-process.js";

const dist = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const ADMIN = "bench-admin-token-0123456789abcdef";
const { values } = parseArgs({
  options: {
    agents: { type: "string", default: "1000" },
    heartbeat: { type: "string", default: "10" },
    idle: { type: "string", default: "30" },
    samples: { type: "string", default: "500" },
    // Writes a V8 CPU profile of the controller to this directory.
    "cpu-prof": { type: "string" },
  },
});
const AGENTS = Number(values.agents);
const HEARTBEAT_MS = Number(values.heartbeat) * 1000;
const IDLE_MS = Number(values.idle) * 1000;
const SAMPLES = Number(values.samples);

/**
 * One simulated agent: a stream that claims what it is told about and reports success, with the
 * heartbeats of a SimNode (the projects it "runs").
 */
class SimAgent extends SimNode {
  private claimed = new Map<string, (at: { notified: number; claimed: number }) => void>();
  // Holds a watch stream until `signal` aborts, opening it again (after a second) when it fails,
  // as skippy does; `opened` is called once, when the first stream answers.
  watch(signal: AbortSignal, opened: () => void): void {
    let first = true;
    void (async () => {
      while (!signal.aborted) {
        await this.stream(signal, () => {
          if (first) opened();
          first = false;
        }).catch(() => undefined);
        if (!signal.aborted) await new Promise((r) => setTimeout(r, 1000));
      }
    })();
  }
  private async stream(signal: AbortSignal, answered: () => void): Promise<void> {
    for await (const n of this.nodes.watchWorkOrders({ nodeId: this.nodeId }, { signal })) {
      answered();
      if (!n.workOrder) continue;
      const notified = performance.now();
      const id = n.workOrder.id;
      try {
        const claim = await this.orders.claimWorkOrder({ id });
        const claimed = performance.now();
        await this.orders.reportWorkOrderResult({
          id,
          fencingToken: claim.workOrder?.fencingToken,
          result: { success: true, code: "APPLY_OK", message: "bench" },
        });
        const ds = n.workOrder.desiredState;
        const tenantId = n.workOrder.target?.tenantId ?? "";
        if (ds)
          this.running.set(tenantId, { projectName: ds.composeProject?.projectName ?? tenantId, specHash: ds.specHash, workOrderId: id });
        this.claimed.get(tenantId)?.({ notified, claimed });
      } catch {
        // claimed already (a notice can repeat): nothing to do
      }
    }
  }
  claimOf(tenantId: string): Promise<{ notified: number; claimed: number }> {
    return new Promise((r) => this.claimed.set(tenantId, r));
  }
}

const base = await mkdtemp(join(resolve(dist, ".."), ".bench-data-dispatch-"));
let ctl: ChildProcess | undefined;
const stop = new AbortController();
// Every agent's stream listens on this one signal.
setMaxListeners(0, stop.signal);
try {
  const dataDir = join(base, "data");
  const profile = values["cpu-prof"] ? ["--cpu-prof", "--cpu-prof-dir", resolve(values["cpu-prof"])] : [];
  // Room for every agent's connection and the admin clients (the default cap is 10,000).
  const cap = ["--max-connections", String(Math.max(10_000, AGENTS + 1000))];
  ctl = spawn(
    process.execPath,
    [...profile, join(dist, "controller", "main.js"), "--data-dir", dataDir, "--listen", "127.0.0.1:0", ...cap],
    {
      env: { ...process.env, SKIPPER_ADMIN_TOKEN: ADMIN },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const url = await new Promise<string>((res, rej) => {
    ctl!.once("exit", (c) => rej(new Error(`controller exited ${c}`)));
    const rl = createInterface({ input: ctl!.stdout! });
    rl.on("line", (line) => {
      try {
        const l = JSON.parse(line) as { action?: string; metadata?: { url?: string } };
        if (l.action === "listen" && l.metadata?.url) {
          rl.removeAllListeners("line");
          ctl!.stdout!.resume();
          res(l.metadata.url);
        }
      } catch {
        // not JSON
      }
    });
  });
  const ca = await readFile(join(dataDir, "tls", "ca.crt"), "utf8");
  const admin = { "x-admin-token": ADMIN };
  const nodes = clientFor(NodeService, url, ca, admin);
  const resources = clientFor(ResourceService, url, ca, admin);
  const deployments = clientFor(DeploymentService, url, ca, admin);

  const t0 = performance.now();
  const agents: SimAgent[] = [];
  for (let i = 0; i < AGENTS; i += 25) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(25, AGENTS - i) }, async (_, k) => {
        const nodeId = `sim-${i + k}`;
        const token = (await nodes.registerNode({ nodeId })).token;
        return new SimAgent(nodeId, url, ca, token, hostAddress(i + k));
      }),
    );
    agents.push(...batch);
  }
  // Streams open 250 at a time: ten thousand TLS handshakes at once would outlast the
  // controller's handshake timeout (agents that fail retry, but the setup would take longer).
  for (let i = 0; i < agents.length; i += 250) {
    const batch = agents.slice(i, i + 250);
    let open = 0;
    await new Promise<void>((res) => {
      for (const a of batch) a.watch(stop.signal, () => ++open === batch.length && res());
    });
  }
  // Heartbeats, staggered over the interval, as real agents' would be.
  await Promise.all(agents.map((a) => a.heartbeat(HEARTBEAT_MS)));
  const beats = agents.map((a, i) =>
    setTimeout(
      function beat() {
        void a.heartbeat(HEARTBEAT_MS).catch(() => undefined);
        beats[i] = setTimeout(beat, HEARTBEAT_MS);
      },
      (i * HEARTBEAT_MS) / agents.length,
    ),
  );
  const setupS = (performance.now() - t0) / 1000;

  // Idle: every stream open, heartbeats going.
  await new Promise((r) => setTimeout(r, 3000));
  const a0 = procStats(ctl.pid!);
  await new Promise((r) => setTimeout(r, IDLE_MS));
  const a1 = procStats(ctl.pid!);

  // Dispatch, one at a time.
  const lat: number[] = [];
  const toNotice: number[] = [];
  const toClaim: number[] = [];
  const applyLat: number[] = [];
  for (let s = 0; s < SAMPLES; s++) {
    const agent = agents[Math.floor(Math.random() * agents.length)]!;
    const tenantId = `bench-d-${s}`;
    const claimed = agent.claimOf(tenantId);
    await resources.createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id: tenantId,
        resourceType: "tenant",
        desiredState: {
          kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: agent.nodeId }, compose: { composeFile: "services: {}\n" } } },
        },
      }),
    });
    const returned = performance.now();
    const at = await claimed;
    lat.push(at.claimed - returned);
    toNotice.push(at.notified - returned);
    toClaim.push(at.claimed - at.notified);
    // Apply on the same tenant (its first order is done): a forced redeploy through the stream.
    // Timed from the call: Apply returns after its pass issued (and pushed) the order.
    const again = agent.claimOf(tenantId);
    const asked = performance.now();
    await deployments.apply({ tenantId });
    applyLat.push((await again).claimed - asked);
  }
  for (const b of beats) clearTimeout(b);
  for (const l of [lat, toNotice, toClaim, applyLat]) l.sort((a, b) => a - b);
  const figures = {
    agents: AGENTS,
    heartbeat_s: HEARTBEAT_MS / 1000,
    setup_s: Number(setupS.toFixed(1)),
    idle_s: IDLE_MS / 1000,
    controller_rss_mb: Number(a1.rssMb.toFixed(1)),
    controller_cpu_percent_of_core: Number(((100 * (a1.cpuSeconds - a0.cpuSeconds)) / (IDLE_MS / 1000)).toFixed(1)),
    dispatch_samples: lat.length,
    dispatch_ms_p50: Number(percentile(lat, 50).toFixed(2)),
    dispatch_ms_p99: Number(percentile(lat, 99).toFixed(2)),
    // The two legs: create returned -> the stream's notice (reconciler, order written, push),
    // and notice -> claim answered (the claim's round trip and durable move to running).
    notice_ms_p50: Number(percentile(toNotice, 50).toFixed(2)),
    notice_ms_p99: Number(percentile(toNotice, 99).toFixed(2)),
    claim_ms_p50: Number(percentile(toClaim, 50).toFixed(2)),
    claim_ms_p99: Number(percentile(toClaim, 99).toFixed(2)),
    apply_ms_p50: Number(percentile(applyLat, 50).toFixed(2)),
    apply_ms_p99: Number(percentile(applyLat, 99).toFixed(2)),
  };
  console.log(
    `dispatch benchmark: ${AGENTS} simulated agents with open streams, heartbeats every ${figures.heartbeat_s} s (setup ${figures.setup_s} s)`,
  );
  console.log("| measure | value | target |");
  console.log("|---|---|---|");
  console.log(`| controller RSS, idle streams | ${figures.controller_rss_mb} MB | < 300 MB |`);
  console.log(`| controller CPU, idle streams + heartbeats | ${figures.controller_cpu_percent_of_core}% of a core | < 10% |`);
  console.log(`| create -> claim via stream, p50 / p99 | ${figures.dispatch_ms_p50} / ${figures.dispatch_ms_p99} ms | p99 < 50 ms |`);
  console.log(`| of which create -> stream notice, p50 / p99 | ${figures.notice_ms_p50} / ${figures.notice_ms_p99} ms | |`);
  console.log(`| of which notice -> claim answered, p50 / p99 | ${figures.claim_ms_p50} / ${figures.claim_ms_p99} ms | |`);
  console.log(`| Apply called -> claim via stream, p50 / p99 | ${figures.apply_ms_p50} / ${figures.apply_ms_p99} ms | p99 < 50 ms |`);
  console.log(JSON.stringify({ bench: "dispatch", node: process.version, ...figures }));
} catch (e) {
  // Said, not swallowed by the exit below.
  console.error(`bench:dispatch failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  process.exitCode = 1;
} finally {
  stop.abort();
  if (ctl && ctl.exitCode === null && ctl.signalCode === null) {
    const exited = new Promise((r) => ctl!.once("exit", r));
    ctl.kill("SIGTERM");
    await exited;
  }
  await rm(base, { recursive: true, force: true });
  process.exit(process.exitCode ?? 0);
}
