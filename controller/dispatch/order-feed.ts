// Push, with pull as the floor: an in-process feed of orders that became pending, per node, for
// the WatchWorkOrders streams of connected agents. Losing a notice costs nothing but latency:
// agents still poll.
// A node may hold a few watches at once (an agent holds one; a restarted agent's old stream can
// linger until its dead connection is noticed), and no more: each costs the controller memory.
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { SkipperError } from "../base/errors.js";

export type OrderListener = (order: WorkOrder) => void;

/** Watch streams one node may hold open by default. */
export const DEFAULT_WATCHES_PER_NODE = 4;

export class OrderFeed {
  private readonly listeners = new Map<string, Set<OrderListener>>();

  constructor(private readonly maxPerNode = DEFAULT_WATCHES_PER_NODE) {}

  /**
   * Calls `fn` for each order that becomes pending for `nodeId`; returns the unsubscribe. Throws
   * RESOURCE_EXHAUSTED when the node already holds its limit of watches.
   */
  subscribe(nodeId: string, fn: OrderListener): () => void {
    let set = this.listeners.get(nodeId);
    if (set && this.maxPerNode > 0 && set.size >= this.maxPerNode) {
      throw new SkipperError("RESOURCE_EXHAUSTED", `node ${nodeId} already holds ${set.size} work-order watches (the limit)`, {
        node_id: nodeId,
        limit: this.maxPerNode,
      });
    }
    if (!set) this.listeners.set(nodeId, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0 && this.listeners.get(nodeId) === set) this.listeners.delete(nodeId);
    };
  }

  /**
   * Set when other controllers share the store: each notice published here is passed on, for the
   * watches that the order's node holds on them (see ../cluster.ts).
   */
  relay: ((order: WorkOrder) => void) | undefined;

  /** Tells the order's node's watchers that it is pending (here, and through relay elsewhere). */
  publish(order: WorkOrder): void {
    this.deliver(order);
    this.relay?.(order);
  }

  /**
   * Tells this controller's watchers of the order's node only (a notice relayed from another one);
   * a pool order that no node holds, every watcher: each asks for its next order, and the ones
   * the pool admits try to claim it (pool-eligibility.ts), one of them with success. A listener
   * that passes the order on to its node passes a pool order only if the pool admits the node
   * (pool-orders.ts nodeMayHear): the order carries its action.
   */
  deliver(order: WorkOrder): void {
    const nodeId = order.target?.nodeId ?? "";
    if (nodeId === "" && order.target?.pool) {
      for (const set of [...this.listeners.values()]) for (const fn of [...set]) fn(order);
      return;
    }
    const set = this.listeners.get(nodeId);
    if (set) for (const fn of [...set]) fn(order);
  }

  /** True when `nodeId` holds a watch here. */
  watching(nodeId: string): boolean {
    return this.listeners.has(nodeId);
  }

  /** Open watches (all nodes). */
  get watchers(): number {
    let n = 0;
    for (const set of this.listeners.values()) n += set.size;
    return n;
  }
}
