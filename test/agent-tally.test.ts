// The agent's own counters (agent/agent-tally.ts): against a fake controller, the agent counts a
// failed heartbeat, a refused claim, an order it ran and a report it had to send again, and its
// next heartbeats carry the totals under its boot id; --metrics-listen serves the same totals in
// Prometheus' text format (parsed strictly), on loopback only unless allowed otherwise. Waits are
// for observed progress, never for a time.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { HeartbeatRequest } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { AgentTally } from "../agent/agent-tally.js";
import { loadAgentConfig } from "../agent/config.js";
import type { ControllerClients } from "../agent/controller-client.js";
import { parseMetricsAddress } from "../agent/metrics-address.js";
import { listenForMetrics } from "../agent/metrics-listener.js";
import { AGENT_ORDER_PAIRS } from "../common/agent-counter-rules.js";
import { commandOk, startInProcessAgent } from "./helpers/in-process-agent.js";
import { parsePrometheusText, sampleSum } from "./helpers/prometheus-text.js";

const silent = pino({ level: "silent" });

function order(id: string): WorkOrder {
  return create(WorkOrderSchema, {
    id,
    type: WorkOrderType.EXECUTE_COMMAND,
    target: { nodeId: "n1" },
    action: { kind: { case: "executeCommand", value: { command: { argv: ["true"] } } } },
  });
}

function claimed(o: WorkOrder): WorkOrder {
  const c = create(WorkOrderSchema, o);
  c.status = WorkOrderStatus.RUNNING;
  const now = Date.now();
  c.claim = {
    $typeName: "skipper.v1.WorkOrderClaim",
    nodeId: "n1",
    claimedAt: timestampFromMs(now),
    leaseExpiresAt: timestampFromMs(now + 600_000),
    fencingToken: 1n,
  };
  return c;
}

/** A controller that fails the first heartbeat, refuses the first order's claim and the second's first report. */
class FakeController {
  beats: HeartbeatRequest[] = [];
  private queue = [order("o-refused"), order("o-run")];
  private heartbeatsFailed = 0;
  private reportsFailed = 0;

  clients(): ControllerClients {
    const nodes = {
      heartbeat: async (req: HeartbeatRequest) => {
        if (this.heartbeatsFailed++ === 0) throw new ConnectError("connect ECONNREFUSED", Code.Unavailable);
        this.beats.push(req);
        return { pendingWorkOrders: this.queue.length };
      },
      getNextWorkOrder: async () => ({ workOrder: this.queue[0] }),
      reportResourceState: async () => ({}),
    };
    const orders = {
      claimWorkOrder: async ({ id }: { id: string }) => {
        const o = this.queue.shift()!;
        if (id === "o-refused") throw new ConnectError("work order o-refused was cancelled", Code.FailedPrecondition);
        return { workOrder: claimed(o) };
      },
      renewWorkOrderLease: async () => ({}),
      reportWorkOrderResult: async () => {
        if (this.reportsFailed++ === 0) throw new ConnectError("connect ECONNRESET", Code.Unavailable);
        return {};
      },
    };
    return { nodes, orders } as unknown as ControllerClients;
  }
}

describe("the agent's counters", () => {
  let dir: string;
  const stops: (() => Promise<void>)[] = [];
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skippy-tally-"));
  });
  afterEach(async () => {
    for (const stop of stops.splice(0)) await stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("counts a failed heartbeat, a refused claim, an order run and a report sent again, and heartbeats carry the totals", async () => {
    const ctl = new FakeController();
    const tally = new AgentTally();
    // Polling: the fake has no Session RPC.
    const agent = startInProcessAgent({
      nodeId: "n1",
      dir,
      clients: ctl.clients(),
      transport: "poll",
      pollIntervalMs: 100,
      log: silent,
      allowCommands: ["true"],
      executors: commandOk,
      tally,
    });
    stops.push(agent.stop);
    const beat = await vi.waitFor(
      () => {
        const b = ctl.beats.find((x) => x.agentCounters?.orders.length);
        if (!b) throw new Error("no heartbeat with an order counted yet");
        return b;
      },
      { timeout: 20_000, interval: 20 },
    );
    const c = beat.agentCounters!;
    expect(c.bootId).toBe(tally.bootId);
    expect(c.orders.map((o) => [o.type, o.code, o.count])).toEqual([["execute_command", "COMMAND_OK", 1n]]);
    expect([c.heartbeatFailures, c.claimsRefused, c.reportRetries, c.leasesLost]).toEqual([1n, 1n, 1n, 0n]);
    // The first answered beat carries 0 answered beats; each later one at most one more than the
    // beat before (the same when two were in flight together).
    const acked = ctl.beats.map((b) => Number(b.agentCounters!.heartbeatsAcknowledged));
    expect(acked[0]).toBe(0);
    for (let i = 1; i < acked.length; i++) expect(acked[i]! - acked[i - 1]!).toBeOneOf([0, 1]);
    expect(acked.at(-1)).toBeGreaterThan(0);
    await agent.stop();
  });

  it("keeps at most its pairs of type and code, counting new codes past them and malformed ones as OTHER", () => {
    const tally = new AgentTally();
    tally.orderEnded(WorkOrderType.INSPECT, "not a code");
    for (let i = 0; i < AGENT_ORDER_PAIRS + 10; i++) tally.orderEnded(WorkOrderType.EXECUTE_COMMAND, `CODE_${i}`);
    const pairs = tally.orderCounts();
    expect(pairs.find((p) => p.type === "inspect")).toEqual({ type: "inspect", code: "OTHER", count: 1 });
    expect(pairs).toHaveLength(AGENT_ORDER_PAIRS + 1);
    expect(pairs.find((p) => p.type === "execute_command" && p.code === "OTHER")?.count).toBe(11);
  });

  it("serves the totals at --metrics-listen in Prometheus' text format, and only /metrics", async () => {
    const tally = new AgentTally();
    tally.orderEnded(WorkOrderType.DEPLOY_SERVICE, "APPLY_OK");
    tally.orderEnded(WorkOrderType.DEPLOY_SERVICE, "APPLY_OK");
    tally.count("watchReconnects");
    const page = await listenForMetrics({ host: "127.0.0.1", port: 0 }, tally, "9.9.9", silent);
    try {
      const read = async () => {
        const r = await fetch(page.url);
        expect(r.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
        return parsePrometheusText(await r.text());
      };
      let f = await read();
      expect(f.get("skippy_orders_total")?.type).toBe("counter");
      expect(sampleSum(f, "skippy_orders_total", { type: "deploy_service", code: "APPLY_OK" })).toBe(2);
      expect(sampleSum(f, "skippy_watch_reconnects_total")).toBe(1);
      expect(sampleSum(f, "skippy_claims_refused_total")).toBe(0);
      expect(sampleSum(f, "skippy_build_info", { version: "9.9.9" })).toBe(1);
      expect(sampleSum(f, "skippy_start_time_seconds")).toBe(tally.startedAt.getTime() / 1000);
      tally.count("watchReconnects");
      f = await read();
      expect(sampleSum(f, "skippy_watch_reconnects_total")).toBe(2);
      expect((await fetch(page.url.replace("/metrics", "/"))).status).toBe(404);
      expect((await fetch(page.url, { method: "POST" })).status).toBe(405);
    } finally {
      await page.close();
    }
  });

  it("--metrics-listen takes a loopback HOST:PORT; another address only with --metrics-allow-remote", () => {
    expect(parseMetricsAddress("127.0.0.1:9464", false)).toEqual({ host: "127.0.0.1", port: 9464 });
    expect(parseMetricsAddress("[::1]:9464", false)).toEqual({ host: "::1", port: 9464 });
    expect(parseMetricsAddress("localhost:0", false)).toEqual({ host: "localhost", port: 0 });
    for (const bad of ["9464", "127.0.0.1", "127.0.0.1:70000", "[::1:9464", "[nope]:1", "a b:1"])
      expect(() => parseMetricsAddress(bad, false), bad).toThrow(/must be HOST:PORT/);
    for (const remote of ["0.0.0.0:9464", "10.1.2.3:9464", "[::]:9464", "metrics.example:9464"])
      expect(() => parseMetricsAddress(remote, false), remote).toThrow(/is not a loopback address.*--metrics-allow-remote/);
    expect(parseMetricsAddress("0.0.0.0:9464", true)).toEqual({ host: "0.0.0.0", port: 9464 });

    const env = { SKIPPY_NODE_TOKEN: "t" };
    const noFile = () => "";
    const cfg = (argv: string[], more: Record<string, string> = {}) => {
      const c = loadAgentConfig(["--node-id", "n1", ...argv], { ...env, ...more }, noFile);
      return c === "help" ? undefined : c.metricsListen;
    };
    expect(cfg([])).toBeUndefined();
    expect(cfg(["--metrics-listen", "127.0.0.1:9464"])).toEqual({ host: "127.0.0.1", port: 9464 });
    expect(cfg([], { SKIPPY_METRICS_LISTEN: "[::1]:9100" })).toEqual({ host: "::1", port: 9100 });
    expect(() => cfg(["--metrics-listen", "0.0.0.0:9464"])).toThrow(/not a loopback address/);
    expect(cfg(["--metrics-listen", "0.0.0.0:9464", "--metrics-allow-remote"])).toEqual({ host: "0.0.0.0", port: 9464 });
    expect(cfg([], { SKIPPY_METRICS_LISTEN: "0.0.0.0:9464", SKIPPY_METRICS_ALLOW_REMOTE: "1" })).toEqual({ host: "0.0.0.0", port: 9464 });
  });
});
