// What happens around a work order's transitions besides the order itself: the deployment's
// phase, the tenant's observed state, events and snapshots. Each function is idempotent (events
// have deterministic ids, updates set absolute values), so start-up recovery can replay them for
// orders whose side effects a crash interrupted.
import { clone, create } from "@bufbuild/protobuf";
import { timestampFromDate, timestampDate } from "@bufbuild/protobuf/wkt";
import { DeploymentPhase, DeploymentStatusSchema, ResourceSpecSchema, TenantStatusSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { KeyedLock } from "../keyed-lock.js";
import { changesTarget, recordOutcome } from "../reconcile/target-record.js";
import type { Store } from "../store/store.js";
import { eachResource } from "../store/each-page.js";
import { recordEvents, transitionEventId, type EventInput, type EventType } from "../events/event-recorder.js";
import type { SnapshotWriter } from "../snapshots/snapshot-writer.js";
import { isSkipperError } from "../errors.js";

/** Ids recorded with side effects: the call that triggered them, or the order's own. */
export interface Trace {
  requestId: string;
  correlationId: string;
}

/** The event of one order transition, with the stable id that makes a replay write it once. */
function orderEvent(order: WorkOrder, type: EventType, trace: Trace, extra: Partial<EventInput> = {}): EventInput {
  return {
    id: transitionEventId(order.id, type),
    type,
    ...trace,
    resourceType: "work_order",
    resourceId: order.id,
    tenantId: order.target?.tenantId,
    nodeId: order.target?.nodeId,
    workOrderId: order.id,
    deploymentId: order.desiredState?.deploymentId ?? "",
    ...extra,
  };
}

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

/** What recording an outcome needs: the store, snapshots, and the per-tenant reconcile lock. */
export interface OutcomeDeps {
  store: Store;
  snapshots: SnapshotWriter;
  locks: KeyedLock;
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
    orderEvent(order, ok ? "work_order_succeeded" : order.status === WorkOrderStatus.CANCELLED ? "work_order_cancelled" : "work_order_failed", trace, { data, at }),
    ...(deploymentId === ""
      ? []
      : [orderEvent(order, ok ? "deployment_succeeded" : "deployment_failed", trace, { data, at, resourceType: "deployment", resourceId: deploymentId })]),
  ]);
  await updateDeployment(store, deploymentId, (d, dep) => {
    d.phase = ok ? DeploymentPhase.SUCCEEDED : DeploymentPhase.FAILED;
    d.resultCode = result?.code ?? "";
    d.message = result?.message ?? "";
    d.finishedAt = timestampFromDate(at);
    if (ok) dep.lastAppliedState = dep.desiredState;
  });
  // Under the tenant's reconcile lock: a pass reads the tenant's records and writes them back.
  if (changesTarget(order)) {
    await deps.locks.run(`reconcile:${tenantId}`, async () => {
      if (ok && (order.type === WorkOrderType.DEPLOY_SERVICE || removal)) await dataRemoved(store, order, trace);
      await updateTenant(store, order, at, ok, removal);
    });
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
    for await (const r of eachResource(store, { resourceType: type, tenantId, includeDeleted: true, pageSize: 500 })) {
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
    await recordEvents(store, [orderEvent(order, "data_delete_incomplete", trace, { data: { volumes: kept, message: order.result?.message ?? "" } })]);
  }
}

/** Records that the claim of `before` lapsed and the order (`after`) is pending again. */
export async function onLeaseExpired(store: Store, before: WorkOrder, after: WorkOrder): Promise<void> {
  const claim = before.claim;
  await recordEvents(store, [
    orderEvent(before, "work_order_lease_expired", { requestId: before.requestId, correlationId: before.correlationId }, {
      id: undefined, // recorded once, by the monitor that made the transition: no replay to dedupe
      nodeId: claim?.nodeId,
      data: {
        fencing_token: (claim?.fencingToken ?? 0n).toString(),
        lease_expired_at: claim?.leaseExpiresAt ? timestampDate(claim.leaseExpiresAt).toISOString() : "",
        attempts: after.attempts.length,
      },
    }),
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
 * Records a superseded order (a newer desired state replaced it before any node claimed it): the
 * failure event and its deployment's phase. The target's record is not a failure: nothing ran.
 */
export async function onOrderSuperseded(store: Store, order: WorkOrder, trace: Trace): Promise<void> {
  const deploymentId = order.desiredState?.deploymentId ?? "";
  const data = { code: order.result?.code ?? "", message: order.result?.message ?? "" };
  await recordEvents(store, [orderEvent(order, "work_order_failed", trace, { data })]);
  await updateDeployment(store, deploymentId, (d) => {
    d.phase = DeploymentPhase.FAILED;
    d.resultCode = data.code;
    d.message = data.message;
    d.finishedAt = order.finishedAt;
  });
}

/** Re-runs outcome side effects for finished orders whose deployment is not yet terminal. */
export async function recoverOrderOutcomes(deps: OutcomeDeps): Promise<number> {
  const { store } = deps;
  let repaired = 0;
  for (const status of [WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED, WorkOrderStatus.RUNNING]) {
    let pageToken = "";
    do {
      const page = await store.listWorkOrders({ status, pageSize: 1000, pageToken });
      for (const order of page.items) {
        const deploymentId = order.desiredState?.deploymentId ?? "";
        const dep = deploymentId === "" ? undefined : await store.getResource("deployment", deploymentId);
        const phase = dep?.currentState?.kind.case === "deployment" ? dep.currentState.kind.value.phase : undefined;
        const trace = { requestId: order.requestId, correlationId: order.correlationId };
        if (status === WorkOrderStatus.RUNNING && phase === DeploymentPhase.PENDING) {
          await onOrderStarted(store, order, trace);
          repaired++;
        } else if (status !== WorkOrderStatus.RUNNING && (phase === DeploymentPhase.PENDING || phase === DeploymentPhase.RUNNING || (await outcomeMissing(store, order)))) {
          await onOrderFinished(deps, order, trace);
          repaired++;
        }
      }
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }
  return repaired;
}

// The tenant's record still points at this finished order without its outcome.
async function outcomeMissing(store: Store, order: WorkOrder): Promise<boolean> {
  const t = await store.getResource("tenant", order.target?.tenantId ?? "", { includeDeleted: true });
  const rec = t?.currentState?.kind.case === "tenant" ? t.currentState.kind.value.targets.find((r) => r.nodeId === order.target?.nodeId) : undefined;
  return rec !== undefined && rec.lastWorkOrderId === order.id && rec.finishedAt === undefined;
}

type DeploymentStatusValue = Extract<NonNullable<Resource["currentState"]>["kind"], { case: "deployment" }>["value"];

async function updateDeployment(
  store: Store,
  id: string,
  mutate: (status: DeploymentStatusValue, dep: Resource) => void,
): Promise<void> {
  if (id === "") return;
  try {
    await store.updateResource("deployment", id, (dep) => {
      if (dep.currentState?.kind.case !== "deployment") {
        dep.currentState = { $typeName: "skipper.v1.ResourceStatus", kind: { case: "deployment", value: create(DeploymentStatusSchema) } };
      }
      const kind = dep.currentState!.kind;
      if (kind.case === "deployment") mutate(kind.value, dep);
      dep.updatedAt = timestampFromDate(new Date());
      return dep;
    });
  } catch (e) {
    if (isSkipperError(e) && e.code === "RESOURCE_NOT_FOUND") return;
    throw e;
  }
}

async function updateTenant(store: Store, order: WorkOrder, at: Date, ok: boolean, removal: boolean): Promise<void> {
  const tenantId = order.target?.tenantId ?? "";
  if (tenantId === "") return;
  const result = order.result;
  try {
    await store.updateResource("tenant", tenantId, (t) => {
      const prev = t.currentState?.kind.case === "tenant" ? t.currentState.kind.value : create(TenantStatusSchema);
      // A late result of an order the target no longer waits for (a newer one owns it) says
      // nothing about what runs now: the tenant's status stays as the newer order left it.
      const owner = prev.targets.find((x) => x.nodeId === order.target?.nodeId)?.lastWorkOrderId ?? "";
      if (owner !== "" && owner !== order.id) return t;
      const targets = recordOutcome(prev.targets, order, at);
      const status = removal
        ? create(TenantStatusSchema, { ...prev, targets })
        : create(TenantStatusSchema, {
            nodeId: order.target?.nodeId ?? "",
            deploymentId: order.desiredState?.deploymentId ?? "",
            workOrderId: order.id,
            resultCode: result?.code ?? "",
            composePath: result?.details?.composePath ?? "",
            services: result?.details?.services ?? [],
            observedAt: timestampFromDate(at),
            targets,
          });
      t.currentState = { $typeName: "skipper.v1.ResourceStatus", kind: { case: "tenant", value: status } };
      // The desired state the order carried is now what the node runs.
      if (ok && order.type === WorkOrderType.DEPLOY_SERVICE && !t.deletion && t.desiredState?.kind.case === "tenant") t.lastAppliedState = clone(ResourceSpecSchema, t.desiredState);
      t.updatedAt = timestampFromDate(new Date());
      return t;
    });
  } catch (e) {
    if (isSkipperError(e) && e.code === "RESOURCE_NOT_FOUND") return;
    throw e;
  }
}
