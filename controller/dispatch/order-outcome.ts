// What happens around a work order's transitions before its end besides the order itself: the
// events of its start, a lapsed lease, a cancel asked of its node and a retry (each written with
// its step: store.ts EventsOf), and the deployment RUNNING. Its end, however it comes, is
// reconcile/order-end.ts's. Each function is idempotent where it may be replayed (deterministic
// event ids, absolute updates); recoverOrderOutcomes is the start-up replay of starts and ends a
// crash cut short.
import { causeData } from "../../common/failure-cause.js";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { isFinishedStatus } from "../../common/order-status.js";
import { DeploymentPhase } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Trace } from "../base/context.js";
import { recordOrderEnd, type OrderEndDeps } from "../reconcile/order-end.js";
import type { StepWrites, Store } from "../store/store.js";
import { eachScannedResource, eachWorkOrder } from "../store/each-page.js";
import { buildEvent, transitionEventId } from "../events/event-recorder.js";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import { orderEvent } from "../events/order-events.js";
import { deploymentEdit, updateDeployment } from "../resources/deployment-status.js";

/** The event of a claimed order's start (one per claim), written with the claim (store.ts EventsOf). */
export function startedEvent(order: WorkOrder, trace: Trace): Event {
  const token = order.claim?.fencingToken ?? 0n;
  const claimedAt = order.claim?.claimedAt ?? order.startedAt;
  return buildEvent(
    orderEvent(order, "work_order_started", trace, {
      // The first claim keeps the plain transition id; later claims (retries, lapsed leases) add theirs.
      id: token > 1n ? transitionEventId(`${order.id}#${token}`, "work_order_started") : undefined,
      at: claimedAt ? timestampDate(claimedAt) : undefined,
      data: { fencing_token: token.toString(), attempt: order.attempts.length },
    }),
  );
}

/** What a claim writes with the order, in the same step (store.ts StepOf): its event and its deployment RUNNING. */
export function startWrites(order: WorkOrder, trace: Trace): StepWrites {
  return { events: [startedEvent(order, trace)], resources: deploymentEdit(order.desiredState?.deploymentId ?? "", deploymentRunning) };
}

/** Records a claimed order's start again (start-up recovery: a claim stored before startWrites was written with it). */
export async function onOrderStarted(store: Store, order: WorkOrder, trace: Trace): Promise<void> {
  await store.appendEvent(startedEvent(order, trace));
  await updateDeployment(store, order.desiredState?.deploymentId ?? "", deploymentRunning);
}

function deploymentRunning(d: { phase: DeploymentPhase }): void {
  if (d.phase === DeploymentPhase.PENDING) d.phase = DeploymentPhase.RUNNING;
}

/** What recording an outcome needs: the store, snapshots, and the owner of the target records. */
export type OutcomeDeps = OrderEndDeps;

/** The event of the claim of `before` lapsing, the order (`after`) pending again: written with that step. */
export function leaseExpiredEvent(before: WorkOrder, after: WorkOrder): Event {
  const claim = before.claim;
  return buildEvent(
    orderEvent(
      before,
      "work_order_lease_expired",
      { requestId: before.requestId, correlationId: before.correlationId },
      {
        id: undefined, // written once, with the transition: no replay to dedupe
        nodeId: claim?.nodeId,
        data: {
          fencing_token: (claim?.fencingToken ?? 0n).toString(),
          lease_expired_at: claim?.leaseExpiresAt ? timestampDate(claim.leaseExpiresAt).toISOString() : "",
          attempts: after.attempts.length,
        },
      },
    ),
  );
}

/**
 * The event of the claim of `before` released, the order (`after`) pending again at once: the
 * session that pushed it ended before its agent acknowledged it. Written with that step.
 */
export function claimReleasedEvent(before: WorkOrder, after: WorkOrder, trace: Trace, sessionId: string): Event {
  const claim = before.claim;
  return buildEvent(
    orderEvent(before, "work_order_claim_released", trace, {
      // One per claim: a replay of the same release is refused by the step, not deduplicated here.
      id: transitionEventId(`${before.id}#${claim?.fencingToken ?? 0n}`, "work_order_claim_released"),
      nodeId: claim?.nodeId,
      data: { fencing_token: (claim?.fencingToken ?? 0n).toString(), session_id: sessionId, attempts: after.attempts.length },
    }),
  );
}

/** The event of an admin's request to stop a running order (written with the cancel: store.ts EventsOf). */
export function cancelRequestedEvent(order: WorkOrder, trace: Trace, reason: string): Event {
  return buildEvent(orderEvent(order, "work_order_cancel_requested", trace, { id: undefined, data: { reason } }));
}

/** The event of a retriable failure that sent the order to wait for another attempt (written with the finish). */
export function retryScheduledEvent(order: WorkOrder, trace: Trace): Event {
  const n = order.attempts.length;
  return buildEvent(
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
  );
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
