// Agent benchmark (npm run bench:agent): dispatch latency, from Apply returning to the agent's
// claim (the order's started_at), with the default 5 s poll interval and with 100 ms; and the
// agent's idle RSS and CPU over a quiet period with the default interval.
//
// The controller and skippy run as processes from dist/, the agent on a real engine when one can
// be started (scripts/docker-engine.sh). The figure is the dispatch path, not Compose: a sample
// is an order its Apply created, from Apply returning to the claim. With its push stream open
// (the default) the poll interval is only the fallback; the "no stream" rows (--no-watch) show
// the pull floor, where the next heartbeat finds the order.
// Options: --samples <n> (default 8 at 5 s with the stream, 6 without, 30 at 100 ms), --idle <s>
// (default 20). The defaults finish in about two minutes; more samples are opt-in.
import { mkdtemp, rm } from "node:fs/promises";
import { removeProjects } from "./engine-projects.js";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { execFileSync, type ChildProcess } from "node:child_process";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { benchTenant } from "./bench-tenant.js";
import { percentile, procStats } from "./measure.js";
import { spawnJson, stopChild } from "./node-child.js";
import { startController } from "./controller-process.js";

const dist = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const ADMIN = "bench-admin-token-0123456789abcdef";
const { values } = parseArgs({ options: { samples: { type: "string" }, idle: { type: "string", default: "20" } } });

const stop = stopChild;

// A real engine when one can be had: orders then succeed (a busybox project), so neither the
// order's own retries nor the reconciler's follow-ups get in the way of the samples. Without
// one, orders fail at once with DOCKER_UNAVAILABLE (retried), and the run takes much longer.
let engine: string | undefined;
try {
  const out = execFileSync(join(resolve(dist, ".."), "scripts", "docker-engine.sh"), ["start"], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "ignore"],
    timeout: 120_000,
  });
  engine = /DOCKER_HOST=(\S+)/.exec(out)?.[1];
} catch {
  console.error("bench:agent: no Docker engine; orders will fail with DOCKER_UNAVAILABLE and be retried");
}
const base = await mkdtemp(join(resolve(dist, ".."), ".bench-data-agent-"));
const children: ChildProcess[] = [];
try {
  const dataDir = join(base, "data");
  const ctl = await startController(dist, dataDir, ADMIN);
  children.push(ctl.child);
  const { url, ca } = ctl;
  const caFile = join(dataDir, "tls", "ca.crt");
  const auth: Interceptor = (next) => (req) => (req.header.set("x-admin-token", ADMIN), next(req));
  const t = createConnectTransport({ baseUrl: `${url}/v1`, httpVersion: "2", nodeOptions: { ca }, interceptors: [auth] });
  const nodes = createClient(NodeService, t);
  const resources = createClient(ResourceService, t);
  const deploy = createClient(DeploymentService, t);
  const orders = createClient(WorkOrderService, t);

  const rows: string[] = [];
  const figures: Record<string, unknown> = {};
  for (const [w, label, interval, intervalMs, defaultSamples, watch] of [
    [0, "poll 5s (default)", "5s", 5000, 8, true],
    [1, "poll 100ms", "100ms", 100, 30, true],
    [2, "poll 5s, no stream", "5s", 5000, 6, false],
    [3, "poll 100ms, no stream", "100ms", 100, 30, false],
  ] as const) {
    const nodeId = `bench-node-${w}`;
    const token = (await nodes.registerNode({ nodeId })).token;
    await resources.createResource({ resourceType: "tenant", resource: benchTenant(w) });
    const agent = await spawnJson(
      [
        join(dist, "agent", "main.js"),
        "--controller",
        url,
        "--node-id",
        nodeId,
        "--ca-file",
        caFile,
        "--state-dir",
        join(base, `state-${w}`),
        "--work-dir",
        join(base, `work-${w}`),
        "--poll-interval",
        interval,
        "--log-level",
        "warn",
        ...(watch ? [] : ["--no-watch"]),
      ],
      { SKIPPY_NODE_TOKEN: token, DOCKER_HOST: engine ?? `unix://${join(base, "no-engine.sock")}` },
    );
    children.push(agent.child);
    await new Promise((r) => setTimeout(r, 1500));
    const samples = Number(values.samples ?? defaultSamples);
    console.error(`bench:agent: ${label}: measuring ${samples} dispatches...`);
    const latencies: number[] = [];
    for (let i = 0; i < samples; i++) {
      await new Promise((r) => setTimeout(r, Math.random() * intervalMs)); // land anywhere in the poll cycle
      // Apply returns the order in flight when there is one (the reconciler retries failed
      // orders by itself); only an order this Apply created is a sample.
      const asked = Date.now();
      const res = await deploy.apply({ tenantId: `bench-tenant-${w}` });
      const returned = Date.now();
      if (timestampDate(res.workOrder!.createdAt!).getTime() < asked - 2) {
        for (;;) {
          const o = (await orders.getWorkOrder({ id: res.workOrder!.id })).workOrder!;
          if (o.finishedAt) break;
          await new Promise((r) => setTimeout(r, 20));
        }
        i--;
        continue;
      }
      for (;;) {
        const o = (await orders.getWorkOrder({ id: res.workOrder!.id })).workOrder!;
        if (o.status !== WorkOrderStatus.PENDING && o.startedAt) {
          latencies.push(timestampDate(o.startedAt).getTime() - returned);
          break;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    latencies.sort((a, b) => a - b);
    console.error(`bench:agent: ${label}: ${samples} samples, p50 ${percentile(latencies, 50)} ms`);
    rows.push(
      `| ${label.padEnd(21)} | ${String(samples).padStart(7)} | ${String(percentile(latencies, 50)).padStart(6)} | ${String(percentile(latencies, 99)).padStart(6)} |`,
    );
    figures[watch ? interval : `${interval}_no_stream`] = { samples, p50_ms: percentile(latencies, 50), p99_ms: percentile(latencies, 99) };

    if (w === 0) {
      const idleS = Number(values.idle);
      console.error(`bench:agent: measuring the idle agent for ${idleS} s...`);
      await new Promise((r) => setTimeout(r, 3000));
      const a = procStats(agent.child.pid!);
      await new Promise((r) => setTimeout(r, idleS * 1000));
      const b = procStats(agent.child.pid!);
      figures.idle = {
        seconds: idleS,
        rss_mb: +b.rssMb.toFixed(1),
        cpu_percent_of_core: +((100 * (b.cpuSeconds - a.cpuSeconds)) / idleS).toFixed(2),
      };
    }
    await stop(agent.child);
  }
  console.log("| dispatch              | samples | p50 ms | p99 ms |");
  console.log("| --------------------- | ------- | ------ | ------ |");
  for (const r of rows) console.log(r);
  const idle = figures.idle as { seconds: number; rss_mb: number; cpu_percent_of_core: number };
  console.log(`\nagent idle (poll 5s, ${idle.seconds}s): RSS ${idle.rss_mb} MB, CPU ${idle.cpu_percent_of_core}% of one core`);
  console.log(`${idle.rss_mb < 80 ? "MET " : "MISS"}  idle RSS < 80 MB`);
  console.log(`${idle.cpu_percent_of_core < 1 ? "MET " : "MISS"}  idle CPU < 1% of a core`);
  console.log(JSON.stringify({ bench: "agent", node: process.version, ...figures }));
} finally {
  for (const c of children) await stop(c).catch(() => undefined);
  if (engine) removeProjects(engine, ["bench-0", "bench-1", "bench-2", "bench-3"]);
  await rm(base, { recursive: true, force: true });
}
