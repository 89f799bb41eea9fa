// The one owner of a tenant's per-node target records (TenantStatus.targets): the reconciler's
// durable memory of what each node was last sent, what it runs and when to retry. Every reader
// that must see them current and every writer goes through here, under one per-tenant lock:
//   - a reconcile pass (reconciler.ts) reads them, plans, and writes the records it computed;
//   - an order's end (order-end.ts, the owner of every end) is recorded on its target;
//   - an ad-hoc rollback (dispatch/queue-order.ts) points its target at the new order.
// How an outcome changes a record is the pure recordOutcome (target-outcome.ts).
import { create, equals } from "@bufbuild/protobuf";
import { copyMessage } from "../../common/message-copy.js";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  ConvergenceSchema,
  ResourceSpecSchema,
  TargetStatusSchema,
  TenantReleaseSchema,
  type TenantRelease,
  TenantStatusSchema,
  type Convergence,
  type Resource,
  type TargetStatus,
  type TenantStatus,
} from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { isSkipperError } from "../base/errors.js";
import { KeyedLock } from "../base/keyed-lock.js";
import type { Store } from "../store/store.js";
import { eachScannedResource } from "../store/each-page.js";
import { tenantOf } from "../../common/resource-kinds.js";
import { recordOutcome } from "./target-outcome.js";

/** The tenant's status as stored, or an empty one. */
export function tenantStatusOf(tenant: Resource | undefined): TenantStatus {
  return tenant?.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value : create(TenantStatusSchema);
}

/** Reads and writes the per-node target records of tenants, one writer per tenant at a time. */
export class TargetRecords {
  // Per tenant, the finished orders waiting for its lock to be recorded (recordFinished).
  private readonly waiting = new Map<string, WaitingOutcome[]>();

  /** `locks` must hold across every controller that shares the store (store/coordination.ts sharedLock). */
  constructor(
    private readonly store: Store,
    private readonly locks: { run<T>(key: string, fn: () => Promise<T>): Promise<T> } = new KeyedLock(),
  ) {}

  /** Runs `fn` while no other pass, outcome or rollback of this tenant touches its records. */
  exclusive<T>(tenantId: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.run(`targets:${tenantId}`, fn);
  }

  /** The records of `tenant` as stored (call under exclusive() to act on them). */
  of(tenant: Resource | undefined): TargetStatus[] {
    return tenantStatusOf(tenant).targets;
  }

  /** The id of the tenant's latest rollout ("" when it has had none). */
  rolloutIdOf(tenant: Resource | undefined): string {
    return tenantStatusOf(tenant).rolloutId;
  }

  /**
   * Writes the records, the tenant's convergence and its latest rollout a pass computed; returns
   * the updated tenant, or undefined when all were already stored as they are. Call under exclusive().
   */
  async writePass(
    tenant: Resource,
    targets: TargetStatus[],
    conv: Convergence,
    rolloutId: string,
    release?: TenantRelease,
  ): Promise<Resource | undefined> {
    const stored = this.of(tenant);
    const sameTargets = stored.length === targets.length && targets.every((t, i) => equals(TargetStatusSchema, t, stored[i]!));
    const sameRollout = this.rolloutIdOf(tenant) === rolloutId;
    const was = tenantStatusOf(tenant).release;
    const sameRelease = was === undefined || release === undefined ? was === release : equals(TenantReleaseSchema, was, release);
    if (sameTargets && sameRollout && sameRelease && tenant.convergence && equals(ConvergenceSchema, tenant.convergence, conv))
      return undefined;
    return this.store.updateResource("tenant", tenant.id, (cur) => {
      const s = tenantStatusOf(cur);
      s.targets = targets;
      s.rolloutId = rolloutId;
      s.release = keptSince(s.release, release);
      cur.currentState = { $typeName: "skipper.v1.ResourceStatus", kind: { case: "tenant", value: s } };
      cur.convergence = conv;
      return cur;
    });
  }

  /** Points `nodeId`'s record at an order issued outside a pass (its outcome is pending). Call under exclusive(). */
  async pointAt(tenantId: string, nodeId: string, workOrderId: string): Promise<void> {
    await this.store.updateResource("tenant", tenantId, (t) => {
      const status = tenantStatusOf(t);
      let target = status.targets.find((x) => x.nodeId === nodeId);
      if (!target) status.targets.push((target = create(TargetStatusSchema, { nodeId })));
      target.lastWorkOrderId = workOrderId;
      target.lastResultCode = "";
      t.currentState = { $typeName: "skipper.v1.ResourceStatus", kind: { case: "tenant", value: status } };
      return t;
    });
  }

  /**
   * Records a finished order on its tenant, under the tenant's lock: the target's record
   * (recordOutcome) and, for a deploy, what the node now runs. A late result of an order the
   * target no longer waits for changes nothing. `before` runs first under the same lock.
   *
   * A tenant's records are one stored record, as large as its fleet: writing it once per outcome
   * would make a rollout over n nodes cost n². So outcomes that arrive while the lock is held
   * wait together in one batch, which takes the lock once and records them all with one write;
   * each call returns once its outcome is stored.
   */
  recordFinished(order: WorkOrder, at: Date, before?: () => Promise<void>): Promise<void> {
    const tenantId = order.target?.tenantId ?? "";
    if (tenantId === "") return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const outcome: WaitingOutcome = { order, at, before, resolve, reject };
      const waiting = this.waiting.get(tenantId);
      // A batch in the map has not started (recordWaiting takes it before its first await): join it.
      if (waiting) waiting.push(outcome);
      else {
        this.waiting.set(tenantId, [outcome]);
        void this.exclusive(tenantId, () => this.recordWaiting(tenantId));
      }
    });
  }

  // Records every outcome waiting for the tenant (none when an earlier holder took them).
  private async recordWaiting(tenantId: string): Promise<void> {
    const batch = this.waiting.get(tenantId) ?? [];
    this.waiting.delete(tenantId);
    const ready: WaitingOutcome[] = [];
    for (const o of batch) {
      try {
        await o.before?.();
        ready.push(o);
      } catch (e) {
        o.reject(e);
      }
    }
    if (ready.length === 0) return;
    try {
      await this.store.updateResource("tenant", tenantId, (t) => {
        for (const o of ready) recordOne(t, o.order, o.at);
        t.updatedAt = timestampFromDate(new Date());
        return t;
      });
    } catch (e) {
      if (!(isSkipperError(e) && e.code === "RESOURCE_NOT_FOUND")) {
        for (const o of ready) o.reject(e);
        return;
      }
    }
    for (const o of ready) o.resolve();
  }

  /** The nodes whose targets carry service or volume `r` (a volume: every target of its tenant), sorted. */
  async nodesRunning(r: Resource): Promise<string[]> {
    const tenantId = tenantOf(r);
    const t = tenantId ? await this.store.getResource("tenant", tenantId, { includeDeleted: true }) : undefined;
    return this.of(t)
      .filter((x) => r.resourceType === "volume" || x.serviceIds.includes(r.id))
      .map((x) => x.nodeId)
      .sort();
  }

  /** The orders target records point at without their outcome yet (start-up recovery looks at these). */
  async awaitingOutcome(): Promise<string[]> {
    const ids: string[] = [];
    for await (const t of eachScannedResource(this.store, { resourceType: "tenant", includeDeleted: true })) {
      for (const r of this.of(t)) if (r.lastWorkOrderId !== "" && r.finishedAt === undefined) ids.push(r.lastWorkOrderId);
    }
    return ids;
  }

  /** True when the target's record still points at this finished order without its outcome (a crash cut it short). */
  async outcomeMissing(order: WorkOrder): Promise<boolean> {
    const t = await this.store.getResource("tenant", order.target?.tenantId ?? "", { includeDeleted: true });
    const rec = this.of(t).find((r) => r.nodeId === order.target?.nodeId);
    return rec !== undefined && rec.lastWorkOrderId === order.id && rec.finishedAt === undefined;
  }
}

interface WaitingOutcome {
  order: WorkOrder;
  at: Date;
  before: (() => Promise<void>) | undefined;
  resolve: () => void;
  reject: (e: unknown) => void;
}

// One finished order's outcome, applied to the tenant `t` (a draft inside updateResource).
function recordOne(t: Resource, order: WorkOrder, at: Date): void {
  const ok = order.status === WorkOrderStatus.SUCCESS;
  const removal = order.type === WorkOrderType.REMOVE_SERVICE;
  const result = order.result;
  const prev = tenantStatusOf(t);
  // A newer order owns the target: this result says nothing about what runs now.
  const owner = prev.targets.find((x) => x.nodeId === order.target?.nodeId)?.lastWorkOrderId ?? "";
  if (owner !== "" && owner !== order.id) return;
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
        rolloutId: prev.rolloutId,
        release: prev.release,
      });
  t.currentState = { $typeName: "skipper.v1.ResourceStatus", kind: { case: "tenant", value: status } };
  // The desired state the order carried is now what the node runs.
  if (ok && order.type === WorkOrderType.DEPLOY_SERVICE && !t.deletion && t.desiredState?.kind.case === "tenant") {
    t.lastAppliedState = copyMessage(ResourceSpecSchema, t.desiredState);
  }
}

// The release record to store: `next`, keeping the stored converged_since while the same release
// stays converged (a pass that read the tenant before another pass stamped it must not restart
// the bake the promotion loop counts from it).
function keptSince(stored: TenantRelease | undefined, next: TenantRelease | undefined): TenantRelease | undefined {
  if (!next?.convergedSince || !stored?.convergedSince) return next;
  if (stored.environmentId !== next.environmentId || stored.releaseId !== next.releaseId) return next;
  return create(TenantReleaseSchema, { ...next, convergedSince: stored.convergedSince });
}
