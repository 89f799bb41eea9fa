// The one owner of a work order's end. An order ends one of five ways, each recorded here, once,
// the same way whoever ends it:
//   succeeded, failed  its node reported (dispatch/order-lifecycle.ts finishOrder);
//   cancelled          an admin cancelled it before a node claimed it, or its node stopped on the
//                      admin's request (order-lifecycle.ts cancelOrder, finishOrder);
//   expired            no node claimed it before its expires_at (expirePendingOrder, here;
//                      dispatch/order-expiry.ts calls it for the sweep and the hand-out);
//   superseded         a newer desired state replaced it before a node claimed it (supersedeOrder,
//                      here; a reconcile pass calls it through order-issuer.ts): CANCELLED with
//                      result code SUPERSEDED, its deployment SUPERSEDED; not a failure.
//                      (Orders stored before this was so are FAILED with SUPERSEDED: read alike.)
// The order's transition, its events and its deployment's phase (endWrites) are one write
// (store.ts StepOf: one log frame on the file store, one statement on PostgreSQL); what follows
// from it (END_RULES: the tenant's target record with the data removals it carried, the
// snapshot) are further writes, batched per tenant (target-records.ts). Each is idempotent (fixed event ids dated by the order's finish,
// absolute updates, a target record counts an outcome once), so a replay writes each once:
// start-up recovery (dispatch/order-outcome.ts recoverOrderOutcomes: orders of unsettled
// deployments and of target records still waiting), a node's repeated report, a repeated cancel.
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { crashPoint } from "../../common/crash-points.js";
import { causeData } from "../../common/failure-cause.js";
import { DeploymentPhase, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderResultSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Trace } from "../base/context.js";
import { buildEvent, recordEvents, type EventType } from "../events/event-recorder.js";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import { orderEvent } from "../events/order-events.js";
import { deploymentEdit, updateDeployment, type DeploymentStatusValue } from "../resources/deployment-status.js";
import type { SnapshotWriter } from "../snapshots/snapshot-writer.js";
import { eachScannedResource } from "../store/each-page.js";
import type { StepWrites, Store } from "../store/store.js";
import { changesTarget } from "./target-outcome.js";
import type { TargetRecords } from "./target-records.js";
import { reportedImageLock } from "./image-locks.js";

/** The ways an order ends. */
export type OrderEnd = "succeeded" | "failed" | "cancelled" | "expired" | "superseded";

/** What an end writes besides the order itself. */
interface EndRule {
  /** The order's event. */
  event: EventType;
  /** The deployment's event, when the order carries one; none: the deployment's phase changes silently. */
  deploymentEvent: EventType | undefined;
  /**
   * Whether the tenant hears of it: the target record (for orders that change what a node runs)
   * and the snapshot. A superseded order never ran, and the pass that replaced it writes the record.
   */
  tellsTenant: boolean;
}

const END_RULES: { readonly [end in OrderEnd]: EndRule } = {
  succeeded: { event: "work_order_succeeded", deploymentEvent: "deployment_succeeded", tellsTenant: true },
  failed: { event: "work_order_failed", deploymentEvent: "deployment_failed", tellsTenant: true },
  cancelled: { event: "work_order_cancelled", deploymentEvent: "deployment_failed", tellsTenant: true },
  expired: { event: "work_order_failed", deploymentEvent: "deployment_failed", tellsTenant: true },
  superseded: { event: "work_order_cancelled", deploymentEvent: "deployment_superseded", tellsTenant: false },
};

/** The result code of an order superseded before a node claimed it. */
export const SUPERSEDED = "SUPERSEDED";
/** The result code of an order no node claimed before its expires_at. */
export const EXPIRED = "EXPIRED";

/** How `order` ended, or undefined while it has not. */
export function endOf(order: WorkOrder): OrderEnd | undefined {
  switch (order.status) {
    case WorkOrderStatus.SUCCESS:
      return "succeeded";
    case WorkOrderStatus.CANCELLED:
      return order.result?.code === SUPERSEDED ? "superseded" : "cancelled";
    case WorkOrderStatus.FAILED:
      // Both codes are given here only (an agent reports neither), to a pending order.
      if (order.result?.code === SUPERSEDED) return "superseded";
      if (order.result?.code === EXPIRED) return "expired";
      return "failed";
    default:
      return undefined;
  }
}

/** What recording an end needs: the store, snapshots, and the owner of the target records. */
export interface OrderEndDeps {
  store: Store;
  snapshots: SnapshotWriter;
  records: TargetRecords;
}

/**
 * Records how `order` ended (it must have): its events, its deployment's phase, and (END_RULES)
 * the tenant's target record and snapshot. Idempotent: a replay after a crash writes each once.
 * `told`: the transition wrote endWrites (the events and the deployment) with the order, in the same step.
 */
export async function recordOrderEnd(deps: OrderEndDeps, order: WorkOrder, trace: Trace, told = false): Promise<void> {
  const end = endOf(order);
  if (end === undefined) throw new Error(`work order ${order.id} has not ended (status ${WorkOrderStatus[order.status]})`);
  await recordOnStore(deps.store, order, end, trace, told);
  if (!END_RULES[end].tellsTenant) return;
  // Under the tenant's lock, exclusive with passes: a pass reads the records and the pending data
  // removals, then writes.
  if (changesTarget(order)) {
    crashPoint("dispatch.before-target-record");
    const removal = order.type === WorkOrderType.REMOVE_SERVICE;
    const dataDone = end === "succeeded" && (order.type === WorkOrderType.DEPLOY_SERVICE || removal);
    const store = deps.store;
    await deps.records.recordFinished(order, finishOf(order), dataDone ? () => dataRemoved(store, order, trace) : undefined);
  }
  await deps.snapshots.afterChange(order.target?.tenantId ?? "", trace);
}

/**
 * Ends a pending order that a newer desired state made stale, before any node claimed it:
 * cancelled, SUPERSEDED, recorded. Nothing ran, so the tenant hears nothing (the pass that calls this writes
 * the target record): the store is all it needs. Throws WORK_ORDER_NOT_CLAIMABLE when the order is
 * no longer pending.
 */
export async function supersedeOrder(store: Store, order: WorkOrder, now: Date, trace: Trace): Promise<WorkOrder> {
  const result = create(WorkOrderResultSchema, {
    success: false,
    code: SUPERSEDED,
    message: "replaced by an order for a newer desired state before any node claimed it",
  });
  // Its events and its deployment SUPERSEDED are written with the step (endWrites): nothing follows.
  return store.supersedeWorkOrder(order.id, result, now, WorkOrderStatus.CANCELLED, (o) => endWrites(o, trace));
}

/**
 * Ends a pending order past its expires_at: failed EXPIRED, recorded. Throws
 * WORK_ORDER_NOT_CLAIMABLE when it moved on meanwhile (claimed, cancelled).
 */
export async function expirePendingOrder(deps: OrderEndDeps, order: WorkOrder, now: Date): Promise<WorkOrder> {
  const at = order.expiresAt ? timestampDate(order.expiresAt).toISOString() : "";
  const result = create(WorkOrderResultSchema, {
    success: false,
    retriable: false,
    code: EXPIRED,
    message: `no node claimed the order before it expired at ${at}`,
  });
  const trace = { requestId: order.requestId, correlationId: order.correlationId };
  const done = await deps.store.supersedeWorkOrder(order.id, result, now, WorkOrderStatus.FAILED, (o) => endWrites(o, trace));
  await recordOrderEnd(deps, done, trace, true);
  return done;
}

/**
 * The events of an ended order (its own, and its deployment's when END_RULES say so), for the
 * transition that ends it to write in the same step (store.ts EventsOf). None for an order that
 * has not ended (a failure that waits for another attempt). Fixed ids, dated by the order's
 * finish: written again by a replay, each is stored once.
 */
export function endEvents(order: WorkOrder, trace: Trace): Event[] {
  const end = endOf(order);
  if (end === undefined) return [];
  const rule = END_RULES[end];
  const result = order.result;
  const deploymentId = order.desiredState?.deploymentId ?? "";
  // Dated by the order's finish: a replay must land on the same day (Store.appendEvent).
  const at = finishOf(order);
  const data = { code: result?.code ?? "", message: result?.message ?? "", ...causeData(result?.cause) };
  const deploymentEvent = deploymentId === "" ? undefined : rule.deploymentEvent;
  return [
    orderEvent(order, rule.event, trace, { data, at }),
    ...(deploymentEvent === undefined
      ? []
      : [orderEvent(order, deploymentEvent, trace, { data, at, resourceType: "deployment", resourceId: deploymentId })]),
  ].map(buildEvent);
}

/**
 * What an end writes with the order's transition, in the same step (store.ts StepOf): its events
 * (endEvents) and its deployment's phase. The one record of an order's end: a crash keeps all of
 * it or none.
 */
export function endWrites(order: WorkOrder, trace: Trace): StepWrites {
  const end = endOf(order);
  if (end === undefined) return { events: [], resources: [] };
  return { events: endEvents(order, trace), resources: deploymentEdit(order.desiredState?.deploymentId ?? "", deploymentEnd(order, end)) };
}

// The end's events and its deployment's phase (unless `told`: written with the order's step,
// endWrites): what every end writes.
async function recordOnStore(store: Store, order: WorkOrder, end: OrderEnd, trace: Trace, told = false): Promise<void> {
  if (told) return;
  await Promise.all(endEvents(order, trace).map((e) => store.appendEvent(e)));
  await updateDeployment(store, order.desiredState?.deploymentId ?? "", deploymentEnd(order, end));
}

// The deployment's status after `order` ended `end` (absolute: a replay writes the same).
function deploymentEnd(order: WorkOrder, end: OrderEnd): (d: DeploymentStatusValue, dep: Resource) => void {
  const ok = end === "succeeded";
  const result = order.result;
  const at = finishOf(order);
  const data = { code: result?.code ?? "", message: result?.message ?? "" };
  return (d, dep) => {
    d.phase = ok ? DeploymentPhase.SUCCEEDED : end === "superseded" ? DeploymentPhase.SUPERSEDED : DeploymentPhase.FAILED;
    d.resultCode = data.code;
    // A failure's cause first: what `skipper get deployments` and the dashboard show of it.
    d.message = !ok && result?.cause?.summary ? `${result.cause.summary}: ${data.message}` : data.message;
    d.cause = ok ? undefined : result?.cause;
    d.finishedAt = timestampFromDate(at);
    // The images the node runs (or, refused, found): what `skipper get deployment` shows per node.
    d.imageDigests = reportedImageLock(result?.details?.imageLock);
    if (ok) dep.lastAppliedState = dep.desiredState;
  };
}

function finishOf(order: WorkOrder): Date {
  return order.finishedAt ? timestampDate(order.finishedAt) : new Date();
}

/**
 * A deploy or removal issued after a deletion with delete_data succeeded on its node: it carried
 * that deletion's volume removals (delete_volumes), so the node leaves the deleted resources'
 * pending lists. Volumes the agent could not remove are named in a data_delete_incomplete event
 * (the data stays; the removal is not tried again).
 */
async function dataRemoved(store: Store, order: WorkOrder, trace: Trace): Promise<void> {
  const tenantId = order.target?.tenantId ?? "";
  const nodeId = order.target?.nodeId ?? "";
  const createdAt = order.createdAt ? timestampDate(order.createdAt).getTime() : 0;
  for (const type of ["service", "volume"] as const) {
    for await (const r of eachScannedResource(store, { resourceType: type, tenantId, includeDeleted: true, pageSize: 500 })) {
      const d = r.deletion;
      if (!d?.dataPendingOnNodes.includes(nodeId) || (d.deletedAt && timestampDate(d.deletedAt).getTime() > createdAt)) continue;
      await store.updateResource(type, r.id, (cur) => {
        if (cur.deletion) cur.deletion.dataPendingOnNodes = cur.deletion.dataPendingOnNodes.filter((n) => n !== nodeId);
        return cur;
      });
    }
  }
  const asked = order.desiredState?.deleteVolumes ?? [];
  const done = new Set(order.result?.details?.volumesDeleted ?? []);
  const kept = asked.filter((v) => !done.has(v));
  if (kept.length > 0) {
    await recordEvents(store, [
      // Dated by the order's finish, as its other end events.
      orderEvent(order, "data_delete_incomplete", trace, {
        at: order.finishedAt ? timestampDate(order.finishedAt) : undefined,
        data: { volumes: kept, message: order.result?.message ?? "" },
      }),
    ]);
  }
}
