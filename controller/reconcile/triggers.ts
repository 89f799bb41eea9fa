// What wakes the reconciler, in one place (controller-runtime's EnqueueRequestsFromMapFunc): each
// method names something that happened (a resource changed, an order ended or went back to
// pending, a node's liveness or report changed) and maps it to the tenants whose passes may now
// decide differently. Nothing else adds to the reconcile queue, apart from the loop's own sweep
// and retries.
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Trace } from "../base/context.js";
import type { HeartbeatOutcome } from "../nodes/heartbeat.js";
import { tenantOf, type ResourceType } from "../../common/resource-kinds.js";
import { CONTROLLER_KINDS } from "../resources/kinds.js";
import type { TenantQueue } from "./tenant-queue.js";

/** Where triggers go: the reconciler's queue, or (on a controller that does not lead) the leader's. */
export type ReconcileQueue = Pick<TenantQueue, "add" | "addAll" | "addPaced">;

/** Another loop that hears of the same changes (the promotion loop), added at wiring: nothing here imports it. */
export interface TriggerWatcher {
  resourceChanged?(r: Resource): void;
  orderEnded?(order: WorkOrder): void;
  /** An operator steered a rollout of `tenantId` ("" for an agent version's rollout). */
  rolloutChanged?(tenantId: string): void;
  /** Nodes' liveness changed, or a node came online. */
  nodesChanged?(): void;
}

/** Maps store, order and node events to the tenants to reconcile. */
export class ReconcileTriggers {
  private readonly watchers: TriggerWatcher[] = [];

  constructor(private readonly queue: ReconcileQueue) {}

  /** Tells `w` of every resource change and order end from now on. */
  watch(w: TriggerWatcher): void {
    this.watchers.push(w);
  }

  /** An acknowledged change of a resource: its tenant, or every tenant, as its kind says; orders it causes carry the change's ids. */
  resourceChanged(r: Resource): void {
    const m = r.metadata;
    const trace: Trace | undefined = m?.requestId
      ? { requestId: m.requestId, correlationId: m.correlationId || m.requestId, traceparent: m.traceparent || undefined }
      : undefined;
    for (const w of this.watchers) w.resourceChanged?.(r);
    // What each kind wakes is its entry's (controller/resources/kinds.ts).
    switch (CONTROLLER_KINDS[r.resourceType as ResourceType]?.wakes) {
      case "its tenant":
        this.queue.add(tenantOf(r) ?? "", trace);
        break;
      case "every tenant":
        this.queue.addAll();
        break;
      default:
        break;
    }
  }

  /** An operator steered a tenant's rollout (pause, resume, promote, abort): its nodes may move now. */
  rolloutChanged(tenantId: string, trace: Trace): void {
    for (const w of this.watchers) w.rolloutChanged?.(tenantId);
    this.queue.add(tenantId, trace);
  }

  /** An environment's current release changed: its tenants resolve their artifacts anew. */
  environmentChanged(tenantIds: readonly string[], trace: Trace): void {
    for (const t of tenantIds) this.queue.add(t, trace);
  }

  /** An order finished (result, cancel before a claim, expiry): its target may move on. */
  orderEnded(order: WorkOrder): void {
    for (const w of this.watchers) w.orderEnded?.(order);
    // The pass it causes continues the order's trace (its verdicts' events say what it led to).
    const trace = order.requestId
      ? { requestId: order.requestId, correlationId: order.correlationId || order.requestId, traceparent: order.traceparent || undefined }
      : undefined;
    this.queue.addPaced(order.target?.tenantId ?? "", trace);
  }

  /** An order went back to pending (its lease lapsed): its tenant's verdict may change. */
  orderRequeued(order: WorkOrder): void {
    this.queue.add(order.target?.tenantId ?? "");
  }

  /** A node's liveness changed (the monitor noticed silence): work for it waits, or goes elsewhere. */
  nodesChanged(): void {
    for (const w of this.watchers) w.nodesChanged?.();
    this.queue.addAll();
  }

  /**
   * A heartbeat: a node that came online, or whose trusted labels changed, lets work that waited
   * for it (or placement on it) go now; a changed set of projects has their tenants compare
   * desired with observed again.
   */
  heartbeatRecorded(beat: HeartbeatOutcome): void {
    if (beat.cameOnline) for (const w of this.watchers) w.nodesChanged?.();
    if (beat.cameOnline || beat.trustedLabelsChanged) this.queue.addAll();
    else if (beat.projectsChanged) for (const t of beat.touchedTenants) this.queue.add(t);
  }
}
