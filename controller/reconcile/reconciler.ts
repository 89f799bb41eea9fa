// The reconcile loop: level-based, per tenant. A pass reads the world (resources, in-flight
// orders, node observations), computes each (tenant, node) target's desired project, asks the
// pure planner (plan-target.ts) what to do, and carries the actions out: it stores deployments
// and work orders with their events, records drift, and writes each target's record and every
// affected resource's convergence status. Passes run on every change (coalesced: a burst of
// changes to one tenant becomes one pass) and as a periodic sweep; passes for one tenant never
// overlap, and a target never gets a second order while one is in flight.
import { clone, create, equals } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { v4 as uuidv4 } from "uuid";
import {
  ConvergenceSchema,
  ConvergenceStatus,
  ResourceSpecSchema,
  TargetStatusSchema,
  TenantStatusSchema,
  type Convergence,
  type Resource,
  type TargetStatus,
} from "../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Store } from "../store/store.js";
import type { Logger } from "../../common/logging/logger.js";
import type { KeyedLock } from "../keyed-lock.js";
import { recordEvents } from "../events/event-recorder.js";
import { tenantOf } from "../store/tenant-of.js";
import { desiredForTenant, type TenantDesire } from "./desired-targets.js";
import { planTarget, type TargetPlan, type TargetVerdict } from "./plan-target.js";
import { recordOutcome } from "./target-record.js";
import { isFinished } from "../store/work-order-transitions.js";
import { loadTenantWorld, loadWorld, type World } from "./world.js";
import { NodeCache } from "./node-cache.js";
import { issueOrder, supersedeStale } from "./order-issuer.js";
import { convergence, worst } from "./convergence.js";
import { fingerprint } from "../canonical-json.js";
import { DeploySafetySchema } from "../../gen/skipper/v1/safety_pb.js";

type Trace = { requestId: string; correlationId: string };

export interface ReconcilerDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  locks: KeyedLock;
  /** Periodic sweep interval (default 30 s); 0 disables the timer. */
  sweepIntervalMs?: number;
  /** Told of every order a pass creates (push to connected agents). */
  onOrderCreated?: (order: WorkOrder) => void;
  /** Told when a pass recorded services' desired states as applied (fresh tenant snapshot). */
  onServicesApplied?: (tenantId: string, trace: { requestId: string; correlationId: string }) => Promise<void>;
}

/** One order a pass issued or found in flight for a target. */
export interface TargetOrder {
  nodeId: string;
  workOrder: WorkOrder;
  deployment?: Resource;
  /** True when this pass created it. */
  created: boolean;
}

export interface PassOptions {
  /** Apply: deploy now even if converged or backing off (not while an order is in flight). */
  force?: boolean;
  /** Limit to this node. */
  nodeId?: string;
  /** Trace ids for what the pass creates (default: those of the last change to the tenant). */
  trace?: { requestId: string; correlationId: string };
}

export interface PassResult {
  desire: TenantDesire;
  orders: TargetOrder[];
  verdicts: Map<string, TargetVerdict>;
}

export class Reconciler {
  // tenant id -> the trace of the change that asked for the pass (undefined for sweeps).
  private readonly queue = new Map<string, Trace | undefined>();
  private all = false;
  private draining: Promise<void> | undefined;
  private scheduled = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  // Per tenant: a wake-up for the earliest retry a pass scheduled (the result says when to look again).
  private readonly wakeups = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  // Every node, kept current by revision, for single-tenant passes (see node-cache.ts).
  private readonly nodeCache = new NodeCache();

  constructor(private readonly deps: ReconcilerDeps) {}

  /** Starts the periodic sweep (and runs one now). */
  start(): void {
    const every = this.deps.sweepIntervalMs ?? 30_000;
    if (every > 0) this.timer = setInterval(() => this.enqueueAll(), every);
    this.timer?.unref();
    this.enqueueAll();
  }

  /** Stops the sweep and waits for the pass under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    for (const w of this.wakeups.values()) clearTimeout(w.timer);
    this.wakeups.clear();
    await this.draining;
  }

  /** A resource changed: reconcile what depends on it; orders it causes carry the change's ids. */
  notifyResource(r: Resource): void {
    const trace = r.metadata?.requestId ? { requestId: r.metadata.requestId, correlationId: r.metadata.correlationId || r.metadata.requestId } : undefined;
    if (r.resourceType === "tenant") this.enqueue(r.id, trace);
    else if (r.resourceType === "service" || r.resourceType === "network" || r.resourceType === "volume") {
      const t = tenantOf(r);
      if (t) this.enqueue(t, trace);
    } else if (r.resourceType === "resource_limits" || r.resourceType === "node") this.enqueueAll();
  }

  /** Reconcile one tenant soon (with the trace of the change that asked, when there is one). */
  enqueue(tenantId: string, trace?: Trace): void {
    this.queue.set(tenantId, trace ?? this.queue.get(tenantId));
    this.schedule();
  }

  /** Reconcile every tenant soon (the sweep). */
  enqueueAll(): void {
    this.all = true;
    this.schedule();
  }

  /** Resolves when the queue is empty (tests and benchmarks). */
  async idle(): Promise<void> {
    while (this.draining || this.scheduled) await (this.draining ?? new Promise((r) => setImmediate(r)));
  }

  private schedule(): void {
    if (this.scheduled || this.stopped) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (this.draining) {
        // The running drain picks the queue up when it loops.
        return;
      }
      this.draining = this.drain().finally(() => {
        this.draining = undefined;
        if (this.queue.size > 0 || this.all) this.schedule();
      });
    });
  }

  private async drain(): Promise<void> {
    while (!this.stopped && (this.all || this.queue.size > 0)) {
      const sweep = this.all;
      const queued = new Map(this.queue);
      this.all = false;
      this.queue.clear();
      try {
        // A sweep reads the world once; a change reads only what its tenant's pass needs.
        const world = sweep ? await loadWorld(this.deps.store) : undefined;
        const tenants = world ? [...new Set([...world.tenantIds(), ...queued.keys()])] : [...queued.keys()];
        // During a sweep, changes that arrive go first, between two tenants of the sweep, so a
        // thousand-tenant sweep does not hold them up; a tenant passed that way (with what it
        // reads fresh) is not passed again with the sweep's older world.
        const fresh = new Set<string>();
        for (const id of tenants) {
          if (world) await this.changesFirst(fresh);
          if (fresh.has(id)) continue;
          await this.passLogged(id, queued.get(id), world);
        }
      } catch (e) {
        this.deps.logger.error({ action: "reconcile", result: "error", err: e }, "could not read the world for a reconcile pass");
      }
    }
  }

  // Lets requests in (the sweep's reads may all be answered from memory, never yielding), then
  // passes the tenants queued meanwhile.
  private async changesFirst(fresh: Set<string>): Promise<void> {
    await new Promise((r) => setImmediate(r));
    while (this.queue.size > 0 && !this.stopped) {
      const [id, trace] = this.queue.entries().next().value!;
      this.queue.delete(id);
      fresh.add(id);
      await this.passLogged(id, trace);
    }
  }

  private async passLogged(id: string, trace: Trace | undefined, world?: World): Promise<void> {
    try {
      await this.reconcileTenant(id, { trace }, world);
    } catch (e) {
      this.deps.logger.error({ action: "reconcile", result: "error", tenant_id: id, err: e }, "reconcile pass failed");
    }
  }

  /** One pass for one tenant (serialised per tenant); `world` is re-read when not given. */
  async reconcileTenant(tenantId: string, opts: PassOptions = {}, given?: World): Promise<PassResult> {
    return this.deps.locks.run(`reconcile:${tenantId}`, async () => {
      const world = given ?? (await loadTenantWorld(this.deps.store, tenantId, this.nodeCache));
      if (given) await world.refreshInFlight(this.deps.store, tenantId);
      return this.pass(tenantId, opts, world);
    });
  }

  private async pass(tenantId: string, opts: PassOptions, world: World): Promise<PassResult> {
    const { store } = this.deps;
    const now = this.deps.now();
    const tenant = await store.getResource("tenant", tenantId, { includeDeleted: true });
    if (!tenant) return { desire: { targets: new Map(), services: new Map(), removalVolumes: () => [] }, orders: [], verdicts: new Map() };
    const live = tenant.deletion ? undefined : tenant;
    const desire = desiredForTenant(world.tenantWorld(live, tenantId));
    const status = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value : create(TenantStatusSchema);
    const records = new Map((await this.outcomesOf(status.targets, world, tenantId, now)).map((t) => [t.nodeId, t]));
    const observedNodes = world.nodesObserving(tenantId);
    const nodeIds = [...new Set([...desire.targets.keys(), ...records.keys(), ...observedNodes])].sort().filter((n) => !opts.nodeId || n === opts.nodeId);
    const tenantSpec = tenant.desiredState?.kind.case === "tenant" ? tenant.desiredState.kind.value : undefined;
    const orderTerms = { priority: tenantSpec?.priority ?? 0, safety: tenantSpec?.safety };
    const safetyHash = fingerprint(DeploySafetySchema, tenantSpec?.safety);
    const trace = opts.trace ?? { requestId: tenant.metadata?.requestId || uuidv4(), correlationId: tenant.metadata?.correlationId || tenant.metadata?.requestId || uuidv4() };
    const orders: TargetOrder[] = [];
    const verdicts = new Map<string, TargetVerdict>();
    const nextRecords: TargetStatus[] = [];
    for (const nodeId of nodeIds) {
      const inFlight = await supersedeStale(this.deps, world.inFlight(tenantId, nodeId), desire.targets.get(nodeId)?.specHash ?? "", now, trace);
      const node = world.node(nodeId);
      const facts = {
        nodeId,
        desired: desire.targets.get(nodeId),
        record: records.get(nodeId),
        inFlight,
        node: node && { liveness: node.liveness, disabled: node.disabled, lastHeartbeatAt: node.lastHeartbeatAt },
        observed: world.observed(nodeId, tenantId),
        safetyHash,
        now,
      };
      let plan: TargetPlan = planTarget(facts);
      if (opts.force && !inFlight && facts.desired && node && !node.disabled && plan.actions.length === 0) {
        plan = { ...plan, actions: [{ kind: "deploy", nodeId, rendered: facts.desired, reason: "apply" }] };
      }
      if (inFlight) orders.push({ nodeId, workOrder: inFlight, created: false });
      const prior = records.get(nodeId);
      const record = prior ? clone(TargetStatusSchema, prior) : create(TargetStatusSchema, { nodeId });
      record.desiredHash = facts.desired?.specHash ?? "";
      record.serviceIds = facts.desired?.serviceIds ?? [];
      if (facts.desired) record.projectName = facts.desired.project.projectName;
      for (const action of plan.actions) {
        const removal = { removeVolumes: live === undefined ? tenant.deletion?.deleteData === true : false, deleteVolumes: desire.removalVolumes(nodeId) };
        const issued = await issueOrder(this.deps, tenantId, orderTerms, action, trace, now, removal, plan.drift);
        orders.push(issued);
        world.addInFlight(issued.workOrder);
        record.lastWorkOrderId = issued.workOrder.id;
        record.lastResultCode = ""; // the outcome is pending
        plan.verdict.workOrderId = issued.workOrder.id;
      }
      record.convergence = convergence(plan.verdict, nodeId, now, record.convergence);
      verdicts.set(nodeId, plan.verdict);
      if (!plan.forget) nextRecords.push(record);
    }
    // Records of nodes outside this pass (opts.nodeId) stay as they were.
    for (const [nodeId, r] of records) if (!nodeIds.includes(nodeId)) nextRecords.push(r);
    const retryAt = Math.min(...[...verdicts.values()].map((v) => v.retryAt?.getTime() ?? Infinity));
    if (Number.isFinite(retryAt)) this.wakeAt(tenantId, retryAt, now);
    await this.writeTenant(tenant, nextRecords, desire, verdicts, now, trace);
    await this.writeServices(world, tenantId, desire, verdicts, now, trace);
    return { desire, orders, verdicts };
  }

  // Records the outcome of a target's last order when the order has finished but its result
  // has not reached the record yet (the report is being recorded, or a crash cut it short), so
  // a finished order is never mistaken for one that was never sent.
  private async outcomesOf(targets: TargetStatus[], world: World, tenantId: string, now: Date): Promise<TargetStatus[]> {
    let out = targets;
    for (const t of targets) {
      if (t.lastWorkOrderId === "" || t.lastResultCode !== "" || world.inFlight(tenantId, t.nodeId)?.id === t.lastWorkOrderId) continue;
      const order = await this.deps.store.getWorkOrder(t.lastWorkOrderId);
      if (order && isFinished(order)) {
        out = recordOutcome(out, order, order.finishedAt ? timestampDate(order.finishedAt) : now);
      }
    }
    return out;
  }

  private wakeAt(tenantId: string, at: number, now: Date): void {
    const prev = this.wakeups.get(tenantId);
    if (this.stopped || (prev && prev.at <= at)) return;
    if (prev) clearTimeout(prev.timer);
    const timer = setTimeout(() => {
      this.wakeups.delete(tenantId);
      this.enqueue(tenantId);
    }, Math.max(0, at - now.getTime()) + 5);
    timer.unref();
    this.wakeups.set(tenantId, { at, timer });
  }

  // Writes the tenant's target records and convergence when they changed.
  private async writeTenant(tenant: Resource, targets: TargetStatus[], desire: TenantDesire, verdicts: Map<string, TargetVerdict>, now: Date, trace: { requestId: string; correlationId: string }): Promise<void> {
    const verdict = tenant.deletion
      ? worst([...verdicts.values()]) ?? { status: ConvergenceStatus.CONVERGED, message: "deleted; nothing runs" }
      : desire.blocker && desire.targets.size === 0
        ? { status: desire.blocker.status, message: desire.blocker.message }
        : worst([...verdicts.values()]) ?? { status: ConvergenceStatus.CONVERGED, message: "nothing to run" };
    const conv = convergence(verdict, "", now, tenant.convergence);
    const status = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value : undefined;
    const sameTargets = (status?.targets.length ?? 0) === targets.length && targets.every((t, i) => equals(TargetStatusSchema, t, status!.targets[i]!));
    if (sameTargets && tenant.convergence && equals(ConvergenceSchema, tenant.convergence, conv)) return;
    // Order outcomes write records under the same per-tenant lock, so `tenant` is current.
    const updated = await this.deps.store.updateResource("tenant", tenant.id, (cur) => {
      const s = cur.currentState?.kind.case === "tenant" ? cur.currentState.kind.value : create(TenantStatusSchema);
      s.targets = targets;
      cur.currentState = { $typeName: "skipper.v1.ResourceStatus", kind: { case: "tenant", value: s } };
      cur.convergence = conv;
      return cur;
    });
    if (tenant.convergence?.status !== conv.status) await this.convergenceEvent(updated, conv, trace);
  }

  private async writeServices(world: World, tenantId: string, desire: TenantDesire, verdicts: Map<string, TargetVerdict>, now: Date, trace: { requestId: string; correlationId: string }): Promise<void> {
    // Different records: written in parallel, so their fsyncs share the store's group commit.
    let applied = false;
    await Promise.all(world.servicesOf(tenantId).map(async (svc) => {
      const placed = desire.services.get(svc.id);
      const verdict = placed?.blocker
        ? { status: placed.blocker.status, message: placed.blocker.message }
        : worst((placed?.nodeIds ?? []).map((n) => verdicts.get(n)).filter((v): v is TargetVerdict => v !== undefined)) ?? { status: ConvergenceStatus.PENDING, message: "not reconciled yet" };
      const conv = convergence(verdict, placed?.nodeIds.length === 1 ? placed.nodeIds[0]! : "", now, svc.convergence);
      // Converged means every node it is placed on runs the spec rendered from this desired
      // state: that is now its last applied state.
      const nowApplied = conv.status === ConvergenceStatus.CONVERGED && svc.desiredState !== undefined && !(svc.lastAppliedState && equals(ResourceSpecSchema, svc.lastAppliedState, svc.desiredState));
      if (!nowApplied && svc.convergence && equals(ConvergenceSchema, svc.convergence, conv)) return;
      const updated = await this.deps.store.updateResource("service", svc.id, (cur) => {
        if (cur.deletion) return cur;
        cur.convergence = conv;
        // Only the desired state this pass rendered: one changed since is not applied yet.
        if (nowApplied && cur.metadata?.resourceVersion === svc.metadata?.resourceVersion && cur.desiredState) {
          cur.lastAppliedState = clone(ResourceSpecSchema, cur.desiredState);
          applied = true;
        }
        return cur;
      });
      if (svc.convergence?.status !== conv.status) await this.convergenceEvent(updated, conv, trace);
    }));
    if (applied) await this.deps.onServicesApplied?.(tenantId, trace);
  }

  private async convergenceEvent(r: Resource, c: Convergence, trace: { requestId: string; correlationId: string }): Promise<void> {
    await recordEvents(this.deps.store, [
      {
        type: "convergence_changed",
        ...trace,
        resourceType: r.resourceType,
        resourceId: r.id,
        tenantId: tenantOf(r),
        nodeId: c.nodeId || undefined,
        workOrderId: c.workOrderId || undefined,
        data: { status: ConvergenceStatus[c.status] ?? String(c.status), message: c.message },
      },
    ]);
  }
}
