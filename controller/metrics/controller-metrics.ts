// The controller's Prometheus metrics (prom-client): one registry per controller, the metrics
// named by Prometheus' conventions (a skipper_ prefix, units in names, _total on counters), and
// one method per thing worth counting, called by the module where it happens: the interceptor
// and the front doors (RPCs), the metered store (work-order transitions, store writes), the
// reconciler (passes), idempotency (replays), heartbeats (the agents' own counters, summed over
// the nodes whose beats this controller received: agent-counter-ledger.ts). The fleet's gauges
// are counted when scraped (fleet-census.ts, fleet-gauges.ts). Labels take values from small fixed sets only
// (metric-labels.ts): never a tenant, order or node id, never text a caller or a node chose. The
// README lists every metric.
import type { DescMethod } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Code } from "@connectrpc/connect";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { AgentCounters } from "../../gen/skipper/v1/resource_pb.js";
import { ORDER_TYPE_NAMES } from "../../common/agent-counter-rules.js";
import { AgentCounterLedger, type HeardCounters } from "./agent-counter-ledger.js";
import type { FleetCounts } from "./fleet-census.js";
import { registerFleetGauges } from "./fleet-gauges.js";
import { codeLabel, enumLabel, resultCodeLabel, rpcLabels } from "./metric-labels.js";

/** What is counted of agent sessions (the `event` label of skipper_agent_session_events_total). */
export type SessionEvent =
  | "opened"
  | "ended_closed"
  | "ended_replaced"
  | "ended_revoked"
  | "ended_refused"
  | "ended_failed"
  | "ended_stalled"
  | "pushed"
  | "released"
  | "kept";

export interface ControllerMetricsOptions {
  version: string;
  /** The store's backend ("file", "postgres"). */
  backend: string;
  /** Whether this controller runs the loops (reconcile, leases, liveness) now. */
  leading: () => boolean;
}

// Seconds. Calls and store writes take milliseconds; a pass over a large tenant, seconds; an
// order may wait for its node from milliseconds (a push stream) to hours (a node offline).
const CALL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const WRITE_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const DISPATCH_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600];

/** The controller's metrics and the registry that exposes them. */
export class ControllerMetrics {
  private readonly registry = new Registry();
  private readonly rpcs = this.counter(
    "skipper_rpc_requests_total",
    "RPC calls answered, by method and Connect code (every protocol, REST included).",
    ["service", "method", "code"],
  );
  private readonly rpcSeconds = this.histogram(
    "skipper_rpc_duration_seconds",
    "Time to answer a unary RPC call, whatever its outcome.",
    ["service", "method"],
    CALL_BUCKETS,
  );
  private readonly ordersCreated = this.counter("skipper_work_orders_created_total", "Work orders created, by type.", ["type"]);
  private readonly ordersFinished = this.counter(
    "skipper_work_orders_finished_total",
    "Work orders that ended, by type, final status and result code (OTHER: a code the contract does not list).",
    ["type", "status", "code"],
  );
  private readonly dispatchSeconds = this.histogram(
    "skipper_work_order_dispatch_latency_seconds",
    "Time from an order's creation to its first claim by its node.",
    ["type"],
    DISPATCH_BUCKETS,
  );
  private readonly leasesExpired = this.counter(
    "skipper_work_order_leases_expired_total",
    "Claims whose lease lapsed (the order went back to pending), by order type.",
    ["type"],
  );
  private readonly passSeconds = this.histogram(
    "skipper_reconcile_pass_duration_seconds",
    "Time of one tenant's reconcile pass, by result (ok, error).",
    ["result"],
    CALL_BUCKETS,
  );
  private readonly promotionSeconds = this.histogram(
    "skipper_delivery_pass_duration_seconds",
    "Time of one environment's promotion pass (read, plan, write), by result (ok, error).",
    ["result"],
    CALL_BUCKETS,
  );
  private readonly promotionActions = this.counter(
    "skipper_delivery_actions_total",
    "What promotion passes did, by action: promote, demote, run-verification, end-promotion, hold.",
    ["action"],
  );
  private readonly waiting = new Gauge({
    name: "skipper_delivery_versions_waiting",
    help: "Releases waiting to enter an environment (its candidates), by environment id (at most 64 distinct ids; more are counted as _other).",
    labelNames: ["environment"],
    registers: [this.registry],
  });
  // Environments are written by fleet admins and few; the cap keeps a mistake from growing the series without bound.
  private readonly environments = new Set<string>();
  private readonly writeSeconds = this.histogram(
    "skipper_store_write_duration_seconds",
    "Time of a store write until it is durable, by store operation.",
    ["operation"],
    WRITE_BUCKETS,
  );
  private readonly idempotencyHits = this.counter(
    "skipper_idempotency_hits_total",
    "Calls whose x-idempotency-key was seen before: replayed (the first response), or conflict (another body).",
    ["method", "result"],
  );
  private readonly sessionEvents = this.counter(
    "skipper_agent_session_events_total",
    "Agent sessions (NodeService.Session) on this controller: opened; ended, by why (closed, replaced, revoked, refused, failed, stalled); orders pushed; pushes released unacknowledged.",
    ["event"],
  );
  // The agents' own counters, summed over the nodes whose heartbeats reached this controller.
  private readonly agents = new AgentCounterLedger();
  private readonly agentOrders = this.counter(
    "skipper_agent_orders_total",
    "Orders agents ended, by type and result code, as their heartbeats to this controller report them.",
    ["type", "code"],
  );
  private readonly agentCounts = {
    starts: this.counter("skipper_agent_starts_total", "Agent processes started (their first heartbeat reached this controller).", []),
    heartbeatFailures: this.counter("skipper_agent_heartbeat_failures_total", "Heartbeats agents failed to deliver.", []),
    claimsRefused: this.counter("skipper_agent_claims_refused_total", "Claims of agents the controller refused.", []),
    leasesLost: this.counter("skipper_agent_leases_lost_total", "Leases agents lost (refused, not renewed in time, lapsed).", []),
    reportRetries: this.counter("skipper_agent_report_retries_total", "Result reports agents sent again after one failed.", []),
    watchReconnects: this.counter(
      "skipper_agent_watch_reconnects_total",
      "Times agents' WatchWorkOrders streams connected again after breaking.",
      [],
    ),
    sessionReconnects: this.counter(
      "skipper_agent_session_reconnects_total",
      "Times agents' Session streams were opened again after one ended or failed.",
      [],
    ),
    sessionFallbacks: this.counter(
      "skipper_agent_session_fallbacks_total",
      "Times agents on transport auto fell back to polling (no Session RPC, or no stream).",
      [],
    ),
  };

  constructor(opts: ControllerMetricsOptions) {
    new Gauge({
      name: "skipper_build_info",
      help: "Always 1: the controller's version and store backend.",
      labelNames: ["version", "store"],
      registers: [this.registry],
    }).set({ version: opts.version, store: opts.backend }, 1);
    const leader: Gauge = new Gauge({
      name: "skipper_controller_leader",
      help: "1 when this controller runs the loops (reconcile, leases, liveness, retention), else 0.",
      registers: [this.registry],
      collect: () => leader.set(opts.leading() ? 1 : 0),
    });
  }

  /** A call answered with `code` (undefined: OK); `seconds` it took, for unary calls. */
  rpcHandled(method: DescMethod, code: Code | undefined, seconds?: number): void {
    const labels = rpcLabels(method);
    this.rpcs.inc({ ...labels, code: codeLabel(code) });
    if (seconds !== undefined) this.rpcSeconds.observe(labels, seconds);
  }

  /** A work order was stored. */
  orderCreated(o: WorkOrder): void {
    this.ordersCreated.inc({ type: typeLabel(o) });
  }

  /** A node claimed an order: its first claim is the end of its dispatch. */
  orderClaimed(o: WorkOrder): void {
    if (o.claim?.fencingToken !== 1n || !o.createdAt || !o.claim.claimedAt) return;
    const waited = (timestampMs(o.claim.claimedAt) - timestampMs(o.createdAt)) / 1000;
    this.dispatchSeconds.observe({ type: typeLabel(o) }, Math.max(0, waited));
  }

  /** An order ended (succeeded, failed, cancelled, superseded or expired). */
  orderFinished(o: WorkOrder): void {
    this.ordersFinished.inc({ type: typeLabel(o), status: enumLabel(WorkOrderStatus, o.status), code: resultCodeLabel(o.result?.code) });
  }

  /** A claim's lease lapsed. */
  leaseExpired(o: WorkOrder): void {
    this.leasesExpired.inc({ type: typeLabel(o) });
  }

  /** One tenant's reconcile pass ran for `seconds`. */
  reconcilePassed(seconds: number, ok: boolean): void {
    this.passSeconds.observe({ result: ok ? "ok" : "error" }, seconds);
  }

  /** One environment's promotion pass took `seconds`. */
  promotionPassed(seconds: number, ok: boolean): void {
    this.promotionSeconds.observe({ result: ok ? "ok" : "error" }, seconds);
  }

  /** A promotion pass took an action (`event` actions are not counted). */
  promotionActed(action: string): void {
    if (action !== "event") this.promotionActions.inc({ action });
  }

  /** Environment `id` has `n` releases waiting to enter it (its last pass's candidates). */
  versionsWaiting(id: string, n: number): void {
    if (!this.environments.has(id) && this.environments.size < 64) this.environments.add(id);
    this.waiting.set({ environment: this.environments.has(id) ? id : "_other" }, n);
  }

  /** A store write (`operation`, a Store method's name) took `seconds`. */
  storeWrote(operation: string, seconds: number): void {
    this.writeSeconds.observe({ operation }, seconds);
  }

  /** A call's idempotency key was known: its first response replayed, or a conflict. */
  idempotencyHit(method: string, result: "replayed" | "conflict"): void {
    this.idempotencyHits.inc({ method, result });
  }

  /**
   * A heartbeat received here carried an agent's `counters`: the skipper_agent_* sums grow by
   * what they add to the last ones heard from that node (agent-counter-ledger.ts).
   */
  agentReported(nodeId: string, counters: AgentCounters, at: Date): void {
    const { orders, ...counts } = this.agents.record(nodeId, counters, at);
    for (const o of orders)
      this.agentOrders.inc({ type: ORDER_TYPE_NAMES.has(o.type) ? o.type : "unknown", code: resultCodeLabel(o.code) }, o.count);
    for (const [name, n] of Object.entries(counts) as [keyof typeof this.agentCounts, number][]) if (n > 0) this.agentCounts[name].inc(n);
  }

  /** The counters `nodeId`'s agent last reported to this controller, and when (undefined: none here). */
  agentCounters(nodeId: string): HeardCounters | undefined {
    return this.agents.latest(nodeId);
  }

  /** Something happened to an agent session (controller/dispatch/agent-session.ts). */
  sessionEvent(event: SessionEvent): void {
    this.sessionEvents.inc({ event });
  }

  /** Reports the number of open agent sessions, `open()`, at every scrape. */
  countSessions(open: () => number): void {
    const gauge: Gauge = new Gauge({
      name: "skipper_agent_sessions",
      help: "Agent sessions (NodeService.Session) open on this controller now.",
      registers: [this.registry],
      collect: () => gauge.set(open()),
    });
  }

  /** Reports the fleet's gauges from `census` at every scrape (fleet-census.ts bounds its cost). */
  countFleet(census: () => Promise<FleetCounts>): void {
    registerFleetGauges(this.registry, census);
  }

  /** The exposition in Prometheus' text format, this controller's metrics and the process's. */
  async exposition(): Promise<{ contentType: string; text: string }> {
    const merged = Registry.merge([processMetrics(), this.registry]);
    return { contentType: merged.contentType, text: await merged.metrics() };
  }

  private counter<L extends string>(name: string, help: string, labelNames: L[]): Counter<L> {
    return new Counter({ name, help, labelNames, registers: [this.registry] });
  }

  private histogram<L extends string>(name: string, help: string, labelNames: L[], buckets: number[]): Histogram<L> {
    return new Histogram({ name, help, labelNames, buckets, registers: [this.registry] });
  }
}

function typeLabel(o: WorkOrder): string {
  return enumLabel(WorkOrderType, o.type);
}

// CPU, memory, event loop and GC describe the process, not one controller (a test process builds
// many): prom-client's default metrics are collected once per process, under their usual names.
let processRegistry: Registry | undefined;
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}
