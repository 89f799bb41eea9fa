// Carries out the reconciler's actions for one target: issues a deploy (a deployment record and
// its deploy_service order) or a removal order, with their events, and supersedes a pending order
// that a newer desired state made stale (that end is order-end.ts's, as every end is). The
// decisions are plan-target.ts's; this only executes.
import type { DeploySafety } from "../../gen/skipper/v1/safety_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { ComposePolicy, Resource } from "../../gen/skipper/v1/resource_pb.js";
import { crashPoint } from "../../common/crash-points.js";
import { newDeploymentId, newWorkOrderId } from "../base/ordered-ids.js";
import type { Logger } from "../../common/logging/logger.js";
import type { Trace } from "../base/context.js";
import { isSkipperError } from "../base/errors.js";
import { buildEvent, transitionEventId, type EventInput } from "../events/event-recorder.js";
import type { Store } from "../store/store.js";
import { supersedeOrder } from "./order-end.js";
import { planDeployment, planRemoval, planRollback } from "./plan-deployment.js";
import type { TargetAction } from "./plan-target.js";
import { resolveRollback } from "./rollback-spec.js";
import type { LockLookup } from "./image-locks.js";
import { create as createMessage, type JsonObject } from "@bufbuild/protobuf";
import { RollbackActionSchema } from "../../gen/skipper/v1/order_action_pb.js";

export interface IssuerDeps {
  store: Store;
  logger: Logger;
  /** Told of every order created (WatchWorkOrders streams). */
  onOrderCreated?: (order: WorkOrder) => void;
}

/** One order a pass issued or found in flight for a target. */
export interface TargetOrder {
  nodeId: string;
  workOrder: WorkOrder;
  deployment?: Resource;
  /** True when this pass created it. */
  created: boolean;
}

// A pending order for an older desired state is replaced rather than waited for (a burst of
// changes becomes one order). One a node has claimed runs to its end.
export async function supersedeStale(
  deps: IssuerDeps,
  o: WorkOrder | undefined,
  desiredHash: string,
  now: Date,
  trace: Trace,
): Promise<WorkOrder | undefined> {
  if (!o || o.status !== WorkOrderStatus.PENDING || o.type === WorkOrderType.ROLLBACK) return o;
  const removal = o.type === WorkOrderType.REMOVE_SERVICE;
  const stale = removal ? desiredHash !== "" : (o.desiredState?.specHash ?? "") !== desiredHash;
  if (!stale) return o;
  try {
    await supersedeOrder(deps.store, o, now, trace);
    deps.logger.info(
      { action: "work_order_superseded", result: "ok", tenant_id: o.target?.tenantId, node_id: o.target?.nodeId, work_order_id: o.id },
      "reconcile: stale pending order superseded",
    );
    return undefined;
  } catch (e) {
    if (isSkipperError(e) && e.code === "WORK_ORDER_NOT_CLAIMABLE") return (await deps.store.getWorkOrder(o.id)) ?? o;
    throw e;
  }
}

/**
 * Issues a rollback the reconciler decided on (a rollout's, or a quarantine's): an order that
 * returns the node to the spec `toHash` (the newest order that applied it there), holding the
 * desired hash it replaces. Throws CONFLICT when no such order is kept.
 */
export async function issueRollback(
  deps: IssuerDeps,
  tenant: Resource,
  terms: { priority: number; imageLock?: LockLookup },
  action: Extract<TargetAction, { kind: "rollback" }>,
  trace: Trace,
  now: Date,
  drift?: string[],
): Promise<TargetOrder> {
  const plan = await resolveRollback(deps.store, tenant, action.nodeId, createMessage(RollbackActionSchema), action.toHash);
  plan.action.quarantineReason = action.quarantine ?? "";
  // The spec returned to runs the images it ran (an order kept from before locks carries none).
  if (plan.desiredState.imageLock?.specHash !== plan.desiredState.specHash)
    plan.desiredState.imageLock = terms.imageLock?.(plan.desiredState.specHash);
  // A repair restores what runs: the desired spec is not held back afterwards.
  if (action.repair) plan.action.holdsDesiredHash = "";
  const workOrderId = newWorkOrderId();
  const base = { ...trace, tenantId: tenant.id, nodeId: action.nodeId, workOrderId };
  const reason = action.quarantine ? "quarantine" : action.repair ? "drift" : "rollout_rollback";
  const workOrder = await deps.store.createWorkOrder(
    planRollback({ ...base, priority: terms.priority, now, desiredState: plan.desiredState, action: plan.action, reason }),
    () =>
      [
        ...driftEvents(base, drift),
        createdEvent(base, {
          type: "rollback",
          reason,
          spec_hash: action.toHash,
          resolved_from: plan.action.resolvedFrom,
          ...(action.quarantine ? { quarantine_reason: action.quarantine } : {}),
        }),
      ].map(buildEvent),
  );
  deps.onOrderCreated?.(workOrder);
  deps.logger.info(
    { action: "work_order_created", result: "ok", ...logIds(base), metadata: { type: "rollback", reason } },
    "reconcile: rollback order issued",
  );
  return { nodeId: action.nodeId, workOrder, created: true };
}

/** Issues the order an action asks for: a deploy (deployment record + deploy_service order) or a removal. */
export async function issueOrder(
  deps: IssuerDeps,
  tenantId: string,
  terms: { priority: number; safety?: DeploySafety; composePolicy?: ComposePolicy; imageLock?: LockLookup },
  action: Exclude<TargetAction, { kind: "rollback" }>,
  trace: Trace,
  now: Date,
  removal: { removeVolumes: boolean; deleteVolumes: string[] },
  drift?: string[],
): Promise<TargetOrder> {
  const { store } = deps;
  const workOrderId = newWorkOrderId();
  const base = { ...trace, tenantId, nodeId: action.nodeId, workOrderId };
  const ids = { ...base, priority: terms.priority };
  const events = driftEvents(base, drift);
  if (action.kind === "deploy") {
    const deploymentId = newDeploymentId();
    const plan = planDeployment({
      ...ids,
      deploymentId,
      rendered: action.rendered,
      reason: action.reason,
      safety: terms.safety,
      composePolicy: terms.composePolicy,
      imageLock: terms.imageLock?.(action.rendered.specHash),
      now,
    });
    // Each record with its events, one write each (store.ts EventsOf).
    const deployment = await store.createResource(plan.deployment, (d) => [
      buildEvent({
        id: transitionEventId(deploymentId, "deployment_started"),
        type: "deployment_started",
        resourceType: "deployment",
        resourceId: deploymentId,
        deploymentId,
        ...base,
        revision: d.metadata?.resourceVersion,
      }),
    ]);
    crashPoint("reconcile.after-deployment");
    const workOrder = await store.createWorkOrder(plan.workOrder, () =>
      [
        ...events,
        {
          ...createdEvent(base, { type: "deploy_service", reason: action.reason, spec_hash: action.rendered.specHash }),
          deploymentId,
        },
      ].map(buildEvent),
    );
    deps.onOrderCreated?.(workOrder);
    deps.logger.info(
      {
        action: "work_order_created",
        result: "ok",
        ...logIds(base),
        metadata: { type: "deploy_service", reason: action.reason, deployment_id: deploymentId },
      },
      "reconcile: deploy order issued",
    );
    return { nodeId: action.nodeId, workOrder, deployment, created: true };
  }
  const { removeVolumes, deleteVolumes } = removal;
  const order = planRemoval({ ...ids, projectName: action.projectName, removeVolumes, deleteVolumes, now });
  const workOrder = await store.createWorkOrder(order, () =>
    [
      ...events,
      createdEvent(base, {
        type: "remove_service",
        project: action.projectName,
        remove_volumes: removeVolumes,
        delete_volumes: order.desiredState?.deleteVolumes ?? [],
      }),
    ].map(buildEvent),
  );
  deps.onOrderCreated?.(workOrder);
  deps.logger.info(
    { action: "work_order_created", result: "ok", ...logIds(base), metadata: { type: "remove_service", project: action.projectName } },
    "reconcile: removal order issued",
  );
  return { nodeId: action.nodeId, workOrder, created: true };
}

type OrderBase = Trace & { tenantId: string; nodeId: string; workOrderId: string };

/** work_order_created for an order the reconciler issued (a fixed id: recording it twice is once). */
function createdEvent(base: OrderBase, data: JsonObject): EventInput {
  const id = transitionEventId(base.workOrderId, "work_order_created");
  return { id, type: "work_order_created", resourceType: "work_order", resourceId: base.workOrderId, ...base, data };
}

/** drift_detected for the differences that made the order, if any. */
function driftEvents(base: OrderBase, drift: string[] | undefined): EventInput[] {
  if (!drift || drift.length === 0) return [];
  return [{ type: "drift_detected", ...base, resourceType: "tenant", resourceId: base.tenantId, data: { differences: drift } }];
}

function logIds(b: { tenantId: string; nodeId: string; workOrderId: string; requestId: string; correlationId: string }) {
  return {
    tenant_id: b.tenantId,
    node_id: b.nodeId,
    request_id: b.requestId,
    correlation_id: b.correlationId,
    work_order_id: b.workOrderId,
  };
}
