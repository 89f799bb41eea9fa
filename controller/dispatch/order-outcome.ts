// What happens around a work order's transitions besides the order itself: the deployment's
// phase, the tenant's observed state, events and snapshots. Each function is idempotent (events
// have deterministic ids, updates set absolute values), so start-up recovery can replay them for
// orders whose side effects a crash interrupted.
import { timestampFromDate, timestampDate } from "@bufbuild/protobuf/wkt";
import { crashPoint } from "../../common/crash-points.js";
import { DeploymentPhase } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Trace } from "../context.js";
import { changesTarget } from "../reconcile/target-outcome.js";
import type { TargetRecords } from "../reconcile/target-records.js";
import type { Store } from "../store/store.js";
import { eachScannedResource, eachWorkOrder } from "../store/each-page.js";
import { recordEvents, transitionEventId } from "../events/event-recorder.js";
import { orderEvent } from "../events/order-events.js";
import { updateDeployment } from "../resources/deployment-status.js";
import type { SnapshotWriter } from "../snapshots/snapshot-writer.js";

/** Records a claimed order's start: event (one per claim) and deployment phase RUNNING. */
export async function onOrderStarted(store: Store, order: WorkOrder, trace: Trace): Promise<void> {
  const deploymentId = order.desiredState?.deploymentId ?? "";
  const token = order.claim?.fencingToken ?? 0n;
  const claimedAt = order.claim?.claimedAt ?? order.startedAt;
  await recordEvents(store, [
    orderEvent(order, "work_order_started", trace, {
      // The first claim keeps the plain transition id; later claims (retries, lapsed leases) add theirs.
      id: token > 1n ? transitionEventId(`${order.id}#${token}`, "work_order_started") : undefined,
      at: claimedAt ? timestampDate(claimedAt) : undefined,
      data: { fencing_token: token.toString(), attempt: order.attempts.length },
    }),
  ]);
  await updateDeployment(store, deploymentId, (d) => {
    if (d.phase === DeploymentPhase.PENDING) d.phase = DeploymentPhase.RUNNING;
  });
}

/** What recording an outcome needs: the store, snapshots, and the owner of the target records. */
export interface OutcomeDeps {
  store: Store;
  snapshots: SnapshotWriter;
  records: TargetRecords;
}

/** Records a finished order's outcome on the deployment and tenant, with events and snapshots. */
export async function onOrderFinished(deps: OutcomeDeps, order: WorkOrder, trace: Trace): Promise<void> {
  const { store, snapshots } = deps;
  const ok = order.status === WorkOrderStatus.SUCCESS;
  const result = order.result;
  const tenantId = order.target?.tenantId ?? "";
  const deploymentId = order.desiredState?.deploymentId ?? "";
  const at = order.finishedAt ? timestampDate(order.finishedAt) : new Date();
  const data = { code: result?.code ?? "", message: result?.message ?? "" };
  const removal = order.type === WorkOrderType.REMOVE_SERVICE;
  await recordEvents(store, [
    orderEvent(
      order,
      ok ? "work_order_succeeded" : order.status === WorkOrderStatus.CANCELLED ? "work_order_cancelled" : "work_order_failed",
      trace,
      { data, at },
    ),
    ...(deploymentId === ""
      ? []
      : [
          orderEvent(order, ok ? "deployment_succeeded" : "deployment_failed", trace, {
            data,
            at,
            resourceType: "deployment",
            resourceId: deploymentId,
          }),
        ]),
  ]);
  await updateDeployment(store, deploymentId, (d, dep) => {
    d.phase = ok ? DeploymentPhase.SUCCEEDED : DeploymentPhase.FAILED;
    d.resultCode = result?.code ?? "";
    d.message = result?.message ?? "";
    d.finishedAt = timestampFromDate(at);
    if (ok) dep.lastAppliedState = dep.desiredState;
  });
  // Under the tenant's lock, exclusive with passes: a pass reads the records and the pending data
  // removals, then writes.
  if (changesTarget(order)) {
    crashPoint("dispatch.before-target-record");
    const dataDone = ok && (order.type === WorkOrderType.DEPLOY_SERVICE || removal);
    await deps.records.recordFinished(order, at, dataDone ? () => dataRemoved(store, order, trace) : undefined);
  }
  await snapshots.afterChange(tenantId, trace);
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
      // Dated by the order's finish, as its other outcome events: a replay must land on the same day (Store.appendEvent).
      orderEvent(order, "data_delete_incomplete", trace, {
        at: order.finishedAt ? timestampDate(order.finishedAt) : undefined,
        data: { volumes: kept, message: order.result?.message ?? "" },
      }),
    ]);
  }
}

/** Records that the claim of `before` lapsed and the order (`after`) is pending again. */
export async function onLeaseExpired(store: Store, before: WorkOrder, after: WorkOrder): Promise<void> {
  const claim = before.claim;
  await recordEvents(store, [
    orderEvent(
      before,
      "work_order_lease_expired",
      { requestId: before.requestId, correlationId: before.correlationId },
      {
        id: undefined, // recorded once, by the monitor that made the transition: no replay to dedupe
        nodeId: claim?.nodeId,
        data: {
          fencing_token: (claim?.fencingToken ?? 0n).toString(),
          lease_expired_at: claim?.leaseExpiresAt ? timestampDate(claim.leaseExpiresAt).toISOString() : "",
          attempts: after.attempts.length,
        },
      },
    ),
  ]);
}

/** Records an admin's request to stop a running order. */
export async function onCancelRequested(store: Store, order: WorkOrder, trace: Trace, reason: string): Promise<void> {
  await recordEvents(store, [orderEvent(order, "work_order_cancel_requested", trace, { id: undefined, data: { reason } })]);
}

/** Records that a retriable failure sent the order to wait for another attempt. */
export async function onOrderRetryScheduled(store: Store, order: WorkOrder, trace: Trace): Promise<void> {
  const n = order.attempts.length;
  await recordEvents(store, [
    orderEvent(order, "work_order_retry_scheduled", trace, {
      id: transitionEventId(`${order.id}#${n}`, "work_order_retry_scheduled"),
      data: {
        code: order.result?.code ?? "",
        message: order.result?.message ?? "",
        attempt: n,
        max_attempts: order.maxAttempts,
        next_attempt_at: order.nextAttemptAt ? timestampDate(order.nextAttemptAt).toISOString() : "",
      },
    }),
  ]);
}

/**
 * Re-runs outcome side effects a crash cut short: for running orders whose deployment is still
 * pending, and for finished orders whose deployment is not terminal or whose target record still
 * waits for them. The finished ones are found from the deployments and target records, not by
 * reading every finished order (a retention period holds a great many).
 */
export async function recoverOrderOutcomes(deps: OutcomeDeps): Promise<number> {
  const { store } = deps;
  let repaired = 0;
  for await (const order of eachWorkOrder(store, { status: WorkOrderStatus.RUNNING })) {
    if ((await deploymentPhase(store, order)) !== DeploymentPhase.PENDING) continue;
    await onOrderStarted(store, order, traceOf(order));
    repaired++;
  }
  for (const id of await unsettledOrderIds(deps)) {
    const order = await store.getWorkOrder(id);
    if (!order || !FINISHED.includes(order.status)) continue;
    const phase = await deploymentPhase(store, order);
    if (phase === DeploymentPhase.PENDING || phase === DeploymentPhase.RUNNING || (await deps.records.outcomeMissing(order))) {
      await onOrderFinished(deps, order, traceOf(order));
      repaired++;
    }
  }
  return repaired;
}

const FINISHED = [WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED];

// The orders of deployments still pending or running, and those target records wait for.
async function unsettledOrderIds(deps: OutcomeDeps): Promise<Set<string>> {
  const ids = new Set(await deps.records.awaitingOutcome());
  const unsettled = [DeploymentPhase.PENDING, DeploymentPhase.RUNNING];
  for await (const d of eachScannedResource(deps.store, { resourceType: "deployment", deploymentPhases: unsettled })) {
    if (d.currentState?.kind.case !== "deployment" || d.desiredState?.kind.case !== "deployment") continue;
    const phase = d.currentState.kind.value.phase;
    if (phase === DeploymentPhase.PENDING || phase === DeploymentPhase.RUNNING) ids.add(d.desiredState.kind.value.workOrderId);
  }
  ids.delete("");
  return ids;
}

async function deploymentPhase(store: Store, order: WorkOrder): Promise<DeploymentPhase | undefined> {
  const deploymentId = order.desiredState?.deploymentId ?? "";
  const dep = deploymentId === "" ? undefined : await store.getResource("deployment", deploymentId);
  return dep?.currentState?.kind.case === "deployment" ? dep.currentState.kind.value.phase : undefined;
}

function traceOf(order: WorkOrder): Trace {
  return { requestId: order.requestId, correlationId: order.correlationId };
}
