// The agent's own counters: running totals of what this process did since it started, under a
// boot id chosen at start (so a reader tells a restart from a count that went down). Every
// heartbeat carries a snapshot (AgentCounters in the contract), and --metrics-listen serves them
// (metrics-listener.ts). In memory only: a restart starts them from zero, which is what the boot
// id says. Bounded: at most AGENT_ORDER_PAIRS type x code pairs; a new code past them is OTHER.
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { AgentCountersSchema, type AgentCounters } from "../gen/skipper/v1/resource_pb.js";
import type { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { AGENT_ORDER_PAIRS, isCounterCode, orderTypeName } from "../common/agent-counter-rules.js";

/** What an agent counts besides orders and answered heartbeats, each a running total. */
export type AgentEvent =
  | "heartbeatFailures"
  | "claimsRefused"
  | "leasesLost"
  | "reportRetries"
  | "watchReconnects"
  | "sessionReconnects"
  | "sessionFallbacks";

export class AgentTally {
  readonly bootId: string;
  readonly startedAt: Date;
  private readonly events: Record<AgentEvent, number> = {
    heartbeatFailures: 0,
    claimsRefused: 0,
    leasesLost: 0,
    reportRetries: 0,
    watchReconnects: 0,
    // Served by --metrics-listen; AgentCounters in the contract has no field for them yet.
    sessionReconnects: 0,
    sessionFallbacks: 0,
  };
  // "type\0code" -> orders ended so.
  private readonly orders = new Map<string, number>();
  private heartbeatsAcknowledged = 0;

  constructor(now: Date = new Date(), bootId: string = randomUUID()) {
    this.bootId = bootId;
    this.startedAt = now;
  }

  /** One more `event`. */
  count(event: AgentEvent): void {
    this.events[event]++;
  }

  /**
   * The controller answered the heartbeat that carried `sent`. Two beats answered while both were
   * in flight (one sent during an order, one after it) count once, so that consecutive beats a
   * controller receives differ by one (how it reads increases: controller/metrics/agent-counter-ledger.ts).
   */
  acknowledged(sent: AgentCounters): void {
    this.heartbeatsAcknowledged = Math.max(this.heartbeatsAcknowledged, Number(sent.heartbeatsAcknowledged) + 1);
  }

  /** An order of `type` ended with result `code` (run, or given up after a restart). */
  orderEnded(type: WorkOrderType, code: string): void {
    const name = orderTypeName(type);
    let key = `${name}\0${isCounterCode(code) ? code : "OTHER"}`;
    if (!this.orders.has(key) && this.orders.size >= AGENT_ORDER_PAIRS) key = `${name}\0OTHER`;
    this.orders.set(key, (this.orders.get(key) ?? 0) + 1);
  }

  /** The running total of `event`, or of heartbeats answered. */
  total(event: AgentEvent | "heartbeatsAcknowledged"): number {
    return event === "heartbeatsAcknowledged" ? this.heartbeatsAcknowledged : this.events[event];
  }

  /** Orders ended, by type and code. */
  orderCounts(): { type: string; code: string; count: number }[] {
    return [...this.orders].map(([key, count]) => {
      const [type, code] = key.split("\0") as [string, string];
      return { type, code, count };
    });
  }

  /** The counters as a heartbeat carries them. */
  snapshot(): AgentCounters {
    const n = (e: AgentEvent) => BigInt(this.events[e]);
    return create(AgentCountersSchema, {
      bootId: this.bootId,
      startedAt: timestampFromDate(this.startedAt),
      heartbeatsAcknowledged: BigInt(this.heartbeatsAcknowledged),
      heartbeatFailures: n("heartbeatFailures"),
      claimsRefused: n("claimsRefused"),
      leasesLost: n("leasesLost"),
      reportRetries: n("reportRetries"),
      watchReconnects: n("watchReconnects"),
      sessionReconnects: n("sessionReconnects"),
      sessionFallbacks: n("sessionFallbacks"),
      orders: this.orderCounts().map((o) => ({ type: o.type, code: o.code, count: BigInt(o.count) })),
    });
  }
}
