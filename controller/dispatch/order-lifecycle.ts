// The one owner of a work order's life after it is queued. Each verb makes the store transition
// (whose rules are domain/work-order-transitions.ts), records what follows from it (an end:
// reconcile/order-end.ts, the one owner of every end; a start, a retry, a cancel asked of a node:
// order-outcome.ts), rings the node's stream when the order is pending again or asked to stop,
// and tells the reconciler (reconcile/triggers.ts) when the order has ended. The lease monitor
// (lease-monitor.ts) and expiry (order-expiry.ts) make the transitions no caller asks for.
//
//   pending --claim--> running --finish--> succeeded | failed | retry_pending (--> pending)
//      |                  '--lease lapses--> pending
//      '--cancel / expire--> cancelled | failed
import type { WorkOrder, WorkOrderResult } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderStatus } from "../../gen/skipper/v1/work_order_pb.js";
import { crashPoint } from "../../common/crash-points.js";
import type { Logger } from "../../common/logging/logger.js";
import { redact } from "../../common/logging/redact.js";
import { resultCause, retriableWith } from "../../common/failure-cause.js";
import type { Trace } from "../base/context.js";
import type { ReconcileTriggers } from "../reconcile/triggers.js";
import type { FinishOutcome } from "../store/store.js";
import { isSkipperError } from "../base/errors.js";
import type { OrderFeed } from "./order-feed.js";
import { expiredAt, expireOrder } from "./order-expiry.js";
import { cancelRequestedEvent, retryScheduledEvent, startWrites, type OutcomeDeps } from "./order-outcome.js";
import { endWrites, recordOrderEnd } from "../reconcile/order-end.js";
import { isFinishedStatus } from "../../common/order-status.js";
import { blankValues, valuesHandedTo } from "./order-secrets.js";
import { goesBefore, nextPoolOrderFor } from "./pool-orders.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";

/** What the verbs need: the outcome recorders' deps, the clock, the lease, the feed and the triggers. */
export interface LifecycleDeps extends OutcomeDeps {
  now: () => Date;
  /** Opens the values an order was handed, to blank them from what its node reports. */
  keyRing?: SecretKeyRing;
  leaseMs: number;
  feed: OrderFeed;
  triggers: ReconcileTriggers;
}

/**
 * The node's next pending order, highest priority first: its own, or a pool order it is eligible
 * for (pool-orders.ts), whichever goes first. One whose expires_at has passed is failed (EXPIRED)
 * here rather than handed out for a claim that must refuse it.
 */
export async function nextOrderFor(deps: LifecycleDeps & { logger: Logger }, nodeId: string): Promise<WorkOrder | undefined> {
  let order = await deps.store.nextPendingWorkOrder(nodeId);
  while (order && expiredAt(order, deps.now())) {
    await expireOrder(deps, order, deps.now());
    order = await deps.store.nextPendingWorkOrder(nodeId);
  }
  const pooled = await nextPoolOrderFor(deps, nodeId);
  return pooled && (!order || goesBefore(pooled, order)) ? pooled : order;
}

/**
 * Claims `order` (a lease with a new fencing token) and records its start: for its node, or, a
 * pool order, for `claimer` (whose eligibility the caller checked; the store fills target.node_id).
 */
export async function claimOrder(deps: LifecycleDeps, order: WorkOrder, trace: Trace, log: Logger, claimer?: string): Promise<WorkOrder> {
  const nodeId = claimer ?? order.target?.nodeId ?? "";
  // The claim, its event and its deployment RUNNING: one step.
  const claimed = await deps.store.claimWorkOrder(order.id, nodeId, deps.now(), deps.leaseMs, (o) => startWrites(o, trace));
  log.info(
    {
      action: "work_order_started",
      result: "ok",
      node_id: nodeId,
      tenant_id: order.target?.tenantId,
      metadata: { work_order_id: order.id },
    },
    "work order claimed",
  );
  return claimed;
}

/**
 * Claims the node's next pending order (what nextOrderFor would return), or returns undefined when
 * none is pending. An order that another call claimed between the look and the claim (a second
 * agent process, or a call through another controller) is passed over for the one after it: each
 * order is claimed once, by the store's compare-and-set, never by this look. `traceOf` gives the
 * claim's trace for the order found (its correlation id is the order's).
 */
export async function claimNextOrder(
  deps: LifecycleDeps & { logger: Logger },
  nodeId: string,
  traceOf: (order: WorkOrder) => Trace,
  log: Logger,
): Promise<WorkOrder | undefined> {
  // Bounded: each turn passes over an order some other call took; this many in a row is a storm
  // of competing claims, and the caller asks again.
  for (let turn = 0; turn < 64; turn++) {
    const order = await nextOrderFor(deps, nodeId);
    if (!order) return undefined;
    try {
      return await claimOrder(deps, order, traceOf(order), log, nodeId);
    } catch (e) {
      // Taken meanwhile (or expired at this instant): the index no longer offers it, look again.
      if (!(isSkipperError(e) && e.code === "WORK_ORDER_NOT_CLAIMABLE")) throw e;
    }
  }
  return undefined;
}

/** Extends the lease of the node holding the claim under `fencingToken`. */
export function renewLease(deps: LifecycleDeps, order: WorkOrder, nodeId: string, fencingToken: bigint): Promise<WorkOrder> {
  return deps.store.renewWorkOrderLease(order.id, nodeId, fencingToken, deps.now(), deps.leaseMs);
}

/**
 * Records a node's result: the order ends (outcome recorded, reconciler told) or, after a
 * retriable failure with attempts left, waits for its next attempt. A duplicate report of a
 * result already recorded changes nothing but what a crash left unrecorded of its outcome. The
 * result is node-reported free text: it is redacted once, here, before anything (the order,
 * events, the deployment, logs, snapshots, webhooks) keeps it, the values the order was handed
 * blanked too.
 */
export async function finishOrder(
  deps: LifecycleDeps,
  order: WorkOrder,
  nodeId: string,
  reported: WorkOrderResult,
  fencingToken: bigint,
  trace: Trace,
  log: Logger,
): Promise<FinishOutcome> {
  const result = redact(reported);
  // An agent older than result.cause sends none: read it here from what it did send, and retry
  // as a newer agent would.
  if (!result.success && !result.cause) {
    result.cause = resultCause(result.code, result.message, result.details?.command?.stderr ?? "");
    result.retriable = retriableWith(result.code, result.retriable, result.cause);
  }
  // The controller knows which values it handed this order: a node that echoes one back (in a
  // message, a command's output) does not get it stored, shown or sent on.
  if (deps.keyRing) blankValues(result, await valuesHandedTo(deps.store, deps.keyRing, order));
  // The order's new state, its events and its deployment's phase are one write (store.ts StepOf).
  const outcome = await deps.store.finishWorkOrder(order.id, nodeId, result, deps.now(), fencingToken, (o) =>
    o.status === WorkOrderStatus.RETRY_PENDING ? [retryScheduledEvent(o, trace)] : endWrites(o, trace),
  );
  if (outcome.duplicate) {
    // A crash may have cut short what follows a finish (its events, the deployment, the target
    // record): the node reports again until it is answered, and the replay is idempotent (fixed
    // event ids, absolute updates). Ad-hoc orders have no deployment for start-up recovery to find.
    if (isFinishedStatus(outcome.workOrder.status)) await recordOrderEnd(deps, outcome.workOrder, trace);
    return outcome;
  }
  crashPoint("dispatch.after-finish");
  const after = outcome.workOrder;
  const ids = { node_id: nodeId, tenant_id: order.target?.tenantId, work_order_id: order.id };
  if (after.status === WorkOrderStatus.RETRY_PENDING) {
    log.warn(
      {
        action: "work_order_retry_scheduled",
        result: result.code,
        ...ids,
        metadata: { attempt: after.attempts.length, message: result.message, cause: result.cause?.summary },
      },
      "work order failed; another attempt follows",
    );
    return outcome;
  }
  await recordOrderEnd(deps, after, trace, true);
  deps.triggers.orderEnded(after);
  const ok = after.status === WorkOrderStatus.SUCCESS;
  const meta = { work_order_id: order.id, message: result.message, cause: result.cause?.summary };
  log[ok ? "info" : "warn"](
    {
      action: ok ? "work_order_succeeded" : "work_order_failed",
      result: result.code,
      node_id: nodeId,
      tenant_id: order.target?.tenantId,
      metadata: meta,
    },
    `work order ${ok ? "succeeded" : "failed"}`,
  );
  return outcome;
}

/**
 * Cancels `order`: one no node holds ends at once (outcome recorded, reconciler told); a running
 * one is asked to stop (its node hears it on its stream, else at its next lease renewal). A cancel
 * of an order already cancelled records its end again, as a duplicate report does: what a crash
 * cut short of it is written, the rest is written once.
 */
export async function cancelOrder(
  deps: LifecycleDeps,
  order: WorkOrder,
  reason: string,
  requestId: string,
  trace: Trace,
  log: Logger,
): Promise<WorkOrder> {
  // Called only when this cancel changed the order: its end, or the request its node hears.
  let changed = false;
  const after = await deps.store.cancelWorkOrder(order.id, reason, requestId, deps.now(), (o) => {
    changed = true;
    return o.status === WorkOrderStatus.CANCELLED ? endWrites(o, trace) : [cancelRequestedEvent(o, trace, reason)];
  });
  if (after.status === WorkOrderStatus.CANCELLED) {
    // A repeated cancel records the end again: what a crash cut short of it is written once.
    await recordOrderEnd(deps, after, trace, changed);
    if (order.status !== WorkOrderStatus.CANCELLED) deps.triggers.orderEnded(after);
  } else if (changed && after.cancelRequest) {
    deps.feed.publish(after);
  }
  log.info(
    {
      action: "work_order_cancel",
      result: WorkOrderStatus[after.status] ?? "",
      tenant_id: order.target?.tenantId,
      work_order_id: order.id,
      metadata: { reason },
    },
    "work order cancel",
  );
  return after;
}
