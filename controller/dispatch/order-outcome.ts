// What happens around a work order's transitions before its end besides the order itself: its
// start (event, the deployment RUNNING), a lapsed lease, a cancel asked of its node, a retry. Its
// end, however it comes, is reconcile/order-end.ts's. Each function is idempotent where it may be
// replayed (deterministic event ids, absolute updates); recoverOrderOutcomes is the start-up
// replay of starts and ends a crash cut short.
import { causeData } from "../../common/failure-cause.js";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { isFinishedStatus } from "../../common/order-status.js";
import { DeploymentPhase } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Trace } from "../base/context.js";
import { recordOrderEnd, type OrderEndDeps } from "../reconcile/order-end.js";
import type { Store } from "../store/store.js";
import { eachScannedResource, eachWorkOrder } from "../store/each-page.js";
import { recordEvents, transitionEventId } from "../events/event-recorder.js";
import { orderEvent } from "../events/order-events.js";
import { updateDeployment } from "../resources/deployment-status.js";

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
export type OutcomeDeps = OrderEndDeps;

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
        ...causeData(order.result?.cause),
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
    if (!order || !isFinishedStatus(order.status)) continue;
    const phase = await deploymentPhase(store, order);
    if (phase === DeploymentPhase.PENDING || phase === DeploymentPhase.RUNNING || (await deps.records.outcomeMissing(order))) {
      await recordOrderEnd(deps, order, traceOf(order));
      repaired++;
    }
  }
  return repaired;
}

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
