// Waiting for an ad-hoc order a caller queued for its answer (the CLI's exec and logs, the
// dashboard's logs view), with one rule for when to give up on it: cancel what no node has taken,
// never what one has. An order still pending after the claim deadline, or when the waiter leaves
// (its signal aborts, a read fails), is cancelled: it would otherwise run later, for nobody. An
// order a node has taken is waited for to its end: stopping it halfway would leave a command half
// run, and its own timeout (WorkOrder.timeout) is what bounds a run. Imported by the dashboard
// too: no Node APIs here.
import { WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { isFinishedStatus } from "./order-status.js";

/** How long a queued order may wait for its node to take it. */
export const CLAIM_WITHIN_MS = 60_000;
/** How often the waiter reads the order. */
export const ASK_EVERY_MS = 250;

/** The calls a wait makes (a WorkOrderService client has them). */
export interface OrderCalls {
  getWorkOrder(req: { id: string }, opts?: { signal?: AbortSignal }): Promise<{ workOrder?: WorkOrder }>;
  cancelWorkOrder(req: { id: string; reason: string }): Promise<{ workOrder?: WorkOrder }>;
}

/** What a wait ended with: the finished order, or the one no node took in time. */
export interface WaitEnd {
  order: WorkOrder;
  /**
   * Set when nobody took the order within the wait: why, in a sentence, and what became of the
   * order (cancelled, or still queued when the cancel itself failed).
   */
  untaken?: string;
}

export interface WaitOptions {
  /** Resolves after `ms` (rejects when the waiter leaves). */
  pause: (ms: number) => Promise<void>;
  claimWithinMs?: number;
  /** Aborted when the waiter leaves; an order still pending then is cancelled with `leaving`. */
  signal?: AbortSignal;
  /** The cancel's reason when the waiter leaves. */
  leaving?: string;
}

/** Reads `queued` until it has finished, cancelling it (and saying so) when no node took it in time. */
export async function waitForOrder(calls: OrderCalls, queued: WorkOrder, opts: WaitOptions): Promise<WaitEnd> {
  const claimWithinMs = opts.claimWithinMs ?? CLAIM_WITHIN_MS;
  const deadline = Date.now() + claimWithinMs;
  let order = queued;
  try {
    while (!isFinishedStatus(order.status)) {
      if (order.status === WorkOrderStatus.PENDING && Date.now() >= deadline) {
        const untaken = await cancelUntaken(calls, order, `the node did not take the order within ${claimWithinMs / 1000}s`);
        if (untaken.untaken !== undefined) return untaken;
        // Taken (or even finished) at the last moment: wait for it after all.
        order = untaken.order;
        continue;
      }
      await opts.pause(ASK_EVERY_MS);
      order = (await calls.getWorkOrder({ id: order.id }, { signal: opts.signal })).workOrder ?? order;
    }
    return { order };
  } catch (e) {
    // The waiter left: an order nobody took is not left to run for nobody.
    if (order.status === WorkOrderStatus.PENDING) {
      void calls.cancelWorkOrder({ id: order.id, reason: opts.leaving ?? "its waiter left" }).catch(() => {});
    }
    throw e;
  }
}

// Cancels a pending order past the claim deadline: untaken says what became of it, or the order a
// node took meanwhile is returned to wait for.
async function cancelUntaken(calls: OrderCalls, order: WorkOrder, reason: string): Promise<WaitEnd> {
  let after: WorkOrder;
  try {
    after = (await calls.cancelWorkOrder({ id: order.id, reason })).workOrder ?? order;
  } catch (e) {
    // Refused because the node took (or even finished) it meanwhile: wait for it after all.
    const now = await calls.getWorkOrder({ id: order.id }).then(
      (r) => r.workOrder,
      () => undefined,
    );
    if (now && now.status !== WorkOrderStatus.PENDING) return { order: now };
    // Not cancelled: say so, since the order may still run when the node comes back.
    const why = e instanceof Error ? e.message : String(e);
    return { order, untaken: `${reason}, and cancelling it failed (${why}): order ${order.id} is still queued` };
  }
  if (after.status === WorkOrderStatus.CANCELLED) return { order: after, untaken: `${reason}; the order was cancelled` };
  if (after.status === WorkOrderStatus.PENDING) return { order: after, untaken: `${reason}; order ${order.id} is still queued` };
  return { order: after };
}
