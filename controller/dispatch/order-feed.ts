// Push, with pull as the floor: an in-process feed of orders that became pending, per node, for
// the WatchWorkOrders streams of connected agents. Losing a notice costs nothing but latency:
// agents still poll.
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";

export type OrderListener = (order: WorkOrder) => void;

export class OrderFeed {
  private readonly listeners = new Map<string, Set<OrderListener>>();

  /** Calls `fn` for each order that becomes pending for `nodeId`; returns the unsubscribe. */
  subscribe(nodeId: string, fn: OrderListener): () => void {
    let set = this.listeners.get(nodeId);
    if (!set) this.listeners.set(nodeId, (set = new Set()));
    set.add(fn);
    return () => {
      set.delete(fn);
      if (set.size === 0 && this.listeners.get(nodeId) === set) this.listeners.delete(nodeId);
    };
  }

  /** Tells the order's node's watchers that it is pending. */
  publish(order: WorkOrder): void {
    const set = this.listeners.get(order.target?.nodeId ?? "");
    if (set) for (const fn of [...set]) fn(order);
  }

  /** Open watches (all nodes). */
  get watchers(): number {
    let n = 0;
    for (const set of this.listeners.values()) n += set.size;
    return n;
  }
}
