// One reconcile pass for one tenant: computes each (tenant, node) target's desired project from
// the world (desired-targets.ts), asks the pure planner (plan-target.ts) what to do, and carries
// the actions out (order-issuer.ts: deployments and work orders with their events). Then it
// writes each target's record (through target-records.ts, which owns them) and every affected
// resource's convergence. Which tenant to pass, and when, is the loop's business (reconciler.ts).
import { create, equals } from "@bufbuild/protobuf";
import { copyMessage } from "../../common/message-copy.js";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { v4 as uuidv4 } from "uuid";
import {
  ConvergenceSchema,
  ConvergenceStatus,
  ResourceSpecSchema,
  ResourceStatusSchema,
  TargetStatusSchema,
  TenantReleaseSchema,
  type TenantRelease,
  type Convergence,
  type Resource,
  type TargetStatus,
} from "../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { DeploySafetySchema } from "../../gen/skipper/v1/safety_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import { fingerprint } from "../base/canonical-json.js";
import type { Trace } from "../base/context.js";
import { recordEvents } from "../events/event-recorder.js";
import type { Store } from "../store/store.js";
import { tenantOf } from "../../common/resource-kinds.js";
import { isFinished } from "../domain/work-order-transitions.js";
import { isSkipperError } from "../base/errors.js";
import { mapLimit } from "../../common/map-limit.js";
import { BusyTime } from "../../common/busy-time.js";
import { convergence, worst } from "./convergence.js";
import { desiredForTenant, type TenantDesire } from "./desired-targets.js";
import { dependencyStates } from "./dependency-status.js";
import { imageLocks } from "./image-locks.js";
import { issueOrder, issueRollback, supersedeStale, type TargetOrder } from "./order-issuer.js";
import { advanceGate, openGate, type RolloutGate } from "./rollout-gate.js";
import type { RolloutRecords } from "../rollouts/rollout-records.js";
import { planTarget, type TargetAction, type TargetPlan, type TargetVerdict } from "./plan-target.js";
import { recordOutcome } from "./target-outcome.js";
import type { TargetRecords } from "./target-records.js";
import type { World } from "./world.js";

export interface PassDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  records: TargetRecords;
  /** The owner of stored rollouts: a change of a tenant's spec reaches its nodes through one. */
  rollouts: RolloutRecords;
  /** Told of every order a pass creates (push to connected agents). */
  onOrderCreated?: (order: WorkOrder) => void;
  /** Told when a pass recorded services' desired states as applied (fresh tenant snapshot). */
  onServicesApplied?: (tenantId: string, trace: Trace) => Promise<void>;
  /** Told when a tenant's release record changed (another release rendered, converged since, no longer), or the tenant gave up on its spec or recovered. */
  onTenantRelease?: (tenantId: string, environmentIds: string[]) => void;
}

export interface PassOptions {
  /** Apply: deploy now even if converged or backing off (not while an order is in flight). */
  force?: boolean;
  /** Limit to this node. */
  nodeId?: string;
  /** Trace ids for what the pass creates (default: those of the last change to the tenant). */
  trace?: Trace;
}

export interface PassResult {
  desire: TenantDesire;
  orders: TargetOrder[];
  verdicts: Map<string, TargetVerdict>;
  /** When the tenant's rollout wants another pass (epoch ms): nodes it started, a bake or deadline ending. */
  rolloutAt?: number;
  /**
   * Wall time the pass spent issuing orders (their durable writes), overlaps counted once: work
   * done, which a pass with nothing to issue would not do (the queue paces passes by the rest).
   */
  issuingMs: number;
}

/** The earliest retry a pass's verdicts or its rollout ask for (epoch ms), or undefined. */
export function retryAtOf(result: PassResult): number | undefined {
  const at = Math.min(result.rolloutAt ?? Infinity, ...[...result.verdicts.values()].map((v) => v.retryAt?.getTime() ?? Infinity));
  return Number.isFinite(at) ? at : undefined;
}

/** Nodes of one pass planned (and their orders issued) at once. */
const NODES_AT_ONCE = 16;

/** Plans of one pass after its rollout started nodes: as many as there can be wave steps in one go. */
const MAX_REPLANS = 8;

/** What every node of one pass shares. */
interface NodePass {
  tenant: Resource;
  tenantId: string;
  /** The tenant unless it is being deleted. */
  live: Resource | undefined;
  desire: TenantDesire;
  records: Map<string, TargetStatus>;
  world: World;
  now: Date;
  trace: Trace;
  opts: PassOptions;
  issuing: BusyTime;
  orderTerms: Parameters<typeof issueOrder>[2];
  safetyHash: string;
  quarantineAfter: number | undefined;
  gate: RolloutGate;
  /** Why a rollout's return of a node could not be issued, by node. */
  rollbackErrors: Map<string, string>;
}

/** Runs passes; holds no state between them. */
export class TenantPass {
  constructor(private readonly deps: PassDeps) {}

  /**
   * Nodes whose observations of the tenant's project count: those it is placed on, has a target
   * record on (it was sent an order) or has an order in flight to. Any other node reporting the
   * tenant's project is ignored and logged: a node cannot make itself a target, nor have orders
   * (or records) made for a tenant, by claiming to run its project.
   */
  private trustedObservers(world: World, tenantId: string, known: string[]): string[] {
    const ids = new Set(known);
    const [trusted, ignored] = [[] as string[], [] as string[]];
    for (const n of world.nodesObserving(tenantId)) (ids.has(n) || world.inFlight(tenantId, n) ? trusted : ignored).push(n);
    for (const nodeId of ignored)
      this.deps.logger.warn(
        { action: "observation", result: "ignored", tenant_id: tenantId, node_id: nodeId },
        `node ${nodeId} reports a project of tenant ${tenantId}, which is not placed there and sent it no order: ignored`,
      );
    return trusted;
  }

  /**
   * One pass over `world` for one tenant; call under the tenant's TargetRecords.exclusive(). When
   * the tenant's rollout starts nodes (or a rollback), the pass plans again at once, so they get
   * their orders now; each node starts once, so this ends.
   */
  async run(tenantId: string, opts: PassOptions, world: World): Promise<PassResult> {
    const issuing = new BusyTime();
    let result = await this.runOnce(tenantId, opts, world, issuing);
    for (let i = 0; result.again && i < MAX_REPLANS; i++) {
      const next = await this.runOnce(tenantId, opts, world, issuing);
      const created = result.orders.filter((o) => o.created);
      const seen = new Set(created.map((o) => o.workOrder.id));
      next.orders = [...created, ...next.orders.filter((o) => !seen.has(o.workOrder.id))];
      result = next;
    }
    // Still starting nodes after as many plans: the queue brings the tenant back at once.
    if (result.again) result.rolloutAt = this.deps.now().getTime();
    return { ...result, issuingMs: issuing.ms };
  }

  private async runOnce(
    tenantId: string,
    opts: PassOptions,
    world: World,
    issuing: BusyTime,
  ): Promise<Omit<PassResult, "issuingMs"> & { again?: boolean }> {
    const { store } = this.deps;
    const now = this.deps.now();
    const tenant = await store.getResource("tenant", tenantId, { includeDeleted: true });
    if (!tenant) return { desire: { targets: new Map(), services: new Map(), removalVolumes: () => [] }, orders: [], verdicts: new Map() };
    const live = tenant.deletion ? undefined : tenant;
    const desire = desiredForTenant(world.tenantWorld(live, tenantId));
    const records = new Map((await this.outcomesOf(this.deps.records.of(tenant), world, tenantId, now)).map((t) => [t.nodeId, t]));
    const observedNodes = this.trustedObservers(world, tenantId, [...desire.targets.keys(), ...records.keys()]);
    const nodeIds = [...new Set([...desire.targets.keys(), ...records.keys(), ...observedNodes])]
      .sort()
      .filter((n) => !opts.nodeId || n === opts.nodeId);
    const tenantSpec = tenant.desiredState?.kind.case === "tenant" ? tenant.desiredState.kind.value : undefined;
    const orderTerms = {
      priority: tenantSpec?.priority ?? 0,
      safety: tenantSpec?.safety,
      composePolicy: tenantSpec?.policy?.compose,
      imageLock: imageLocks(records.values()),
    };
    const safetyHash = fingerprint(DeploySafetySchema, tenantSpec?.safety);
    const trace = opts.trace ?? {
      requestId: tenant.metadata?.requestId || uuidv4(),
      correlationId: tenant.metadata?.correlationId || tenant.metadata?.requestId || uuidv4(),
    };
    const orders: TargetOrder[] = [];
    const verdicts = new Map<string, TargetVerdict>();
    const nextRecords: TargetStatus[] = [];
    const rollbackErrors = new Map<string, string>();
    const latestRollout = this.deps.records.rolloutIdOf(tenant);
    const gate = await openGate(this.deps.store, this.deps.rollouts, tenant, latestRollout, desire, records, world, now, trace);
    const quarantineAfter = tenantSpec?.safety?.quarantineAfter;
    const pass: NodePass = {
      tenant,
      tenantId,
      live,
      desire,
      records,
      world,
      now,
      trace,
      opts,
      issuing,
      orderTerms,
      safetyHash,
      quarantineAfter,
      gate,
      rollbackErrors,
    };
    // Nodes are planned and their orders issued a few at a time: each order is durable writes
    // (deployment, order, events) that would otherwise wait for one another's fsyncs, and a
    // thousand-node change would hold the tenant's lock (and every report of its nodes) for
    // seconds. Results are gathered in node order.
    const perNode = await mapLimit(nodeIds, NODES_AT_ONCE, (nodeId) => this.passNode(pass, nodeId));
    for (const n of perNode) {
      orders.push(...n.orders);
      verdicts.set(n.nodeId, n.verdict);
      if (n.record) nextRecords.push(n.record);
    }
    // Records of nodes outside this pass (opts.nodeId) stay as they were.
    for (const [nodeId, r] of records) if (!nodeIds.includes(nodeId)) nextRecords.push(r);
    const passed = { verdicts, records: new Map(nextRecords.map((r) => [r.nodeId, r])), orders, rollbackErrors };
    const advance = await advanceGate(this.deps.rollouts, gate, passed, world, tenantId, now, trace);
    // A held node's reason as the rollout stands now (its wave may have moved on in this step).
    for (const r of nextRecords) {
      const why = r.convergence?.status === ConvergenceStatus.ROLLOUT_WAITING ? advance.holdNow(r.nodeId) : undefined;
      if (!why || !r.convergence) continue;
      r.convergence.message = why;
      verdicts.get(r.nodeId)!.message = why;
    }
    await this.writeTenant(tenant, nextRecords, desire, verdicts, now, trace, gate.rollout?.id ?? latestRollout);
    await this.writeServices(world, tenantId, desire, verdicts, now, trace);
    if (live) await this.writeDependencies(world, tenantId, desire, verdicts);
    return { desire, orders, verdicts, rolloutAt: advance.recheckAt, again: advance.again };
  }

  // Plans one node of the pass and issues the orders its plan asks for; returns its orders, its
  // verdict and its next record (none when the target is forgotten).
  private async passNode(pass: NodePass, nodeId: string) {
    const { world, tenantId, desire, records, now, trace, gate, opts } = pass;
    const mine: TargetOrder[] = [];
    const inFlight = await supersedeStale(
      this.deps,
      world.inFlight(tenantId, nodeId),
      desire.targets.get(nodeId)?.specHash ?? "",
      now,
      trace,
    );
    const node = world.node(nodeId);
    const facts = {
      nodeId,
      desired: desire.targets.get(nodeId),
      record: records.get(nodeId),
      inFlight,
      node: node && {
        liveness: node.liveness,
        disabled: node.disabled,
        lastHeartbeatAt: node.lastHeartbeatAt,
        projectsObservedAt: node.projectsObservedAt,
      },
      observed: world.observed(nodeId, tenantId),
      safetyHash: pass.safetyHash,
      hold: gate.hold(nodeId),
      rollbackTo: gate.rollbackTo(nodeId),
      quarantineAfter: pass.quarantineAfter,
      now,
    };
    let plan: TargetPlan = planTarget(facts);
    const held = plan.verdict.status === ConvergenceStatus.ROLLOUT_WAITING;
    if (opts.force && !inFlight && facts.desired && node && !node.disabled && !held && plan.actions.length === 0) {
      plan = { ...plan, actions: [{ kind: "deploy", nodeId, rendered: facts.desired, reason: "apply" }] };
    }
    if (inFlight) mine.push({ nodeId, workOrder: inFlight, created: false });
    const prior = records.get(nodeId);
    const record = prior ? copyMessage(TargetStatusSchema, prior) : create(TargetStatusSchema, { nodeId });
    record.desiredHash = facts.desired?.specHash ?? "";
    record.serviceIds = facts.desired?.serviceIds ?? [];
    if (facts.desired) record.projectName = facts.desired.project.projectName;
    // An order in flight is the target's last order, even when the pass that issued it died
    // before writing the record: its outcome must count when it comes.
    if (inFlight && record.lastWorkOrderId !== inFlight.id) {
      record.lastWorkOrderId = inFlight.id;
      record.lastResultCode = "";
    }
    for (const action of plan.actions) {
      const issued = await this.issue(pass, nodeId, action, plan, record);
      if (!issued) continue;
      mine.push(issued);
      world.addInFlight(issued.workOrder);
      record.lastWorkOrderId = issued.workOrder.id;
      record.lastResultCode = ""; // the outcome is pending
      plan.verdict.workOrderId = issued.workOrder.id;
    }
    record.convergence = convergence(plan.verdict, nodeId, now, record.convergence);
    return { nodeId, orders: mine, verdict: plan.verdict, record: plan.forget ? undefined : record };
  }

  // Issues the order one action asks for. A rollback with nothing kept to return to issues none
  // (undefined): a quarantine gives the spec up without it, a rollout's return is noted in
  // `pass.rollbackErrors`.
  private async issue(
    pass: NodePass,
    nodeId: string,
    action: TargetAction,
    plan: TargetPlan,
    record: TargetStatus,
  ): Promise<TargetOrder | undefined> {
    const { tenant, tenantId, live, desire, orderTerms, trace, now, issuing } = pass;
    const removal = {
      removeVolumes: live === undefined ? tenant.deletion?.deleteData === true : false,
      deleteVolumes: desire.removalVolumes(nodeId),
    };
    if (action.kind !== "rollback") {
      return issuing.time(() => issueOrder(this.deps, tenantId, orderTerms, action, trace, now, removal, plan.drift));
    }
    try {
      return await issuing.time(() => issueRollback(this.deps, tenant, orderTerms, action, trace, now, plan.drift));
    } catch (e) {
      if (!isSkipperError(e) || e.code !== "CONFLICT") throw e;
      if (action.quarantine) {
        // Nothing kept to return to: give the spec up here without it.
        record.quarantineReason = `${action.quarantine}; ${e.message}`;
        plan.verdict = {
          status: ConvergenceStatus.ORDER_FAILED,
          message: `${record.quarantineReason}; change the desired state or Apply`,
        };
      } else pass.rollbackErrors.set(nodeId, e.message);
      return undefined;
    }
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

  // Writes the tenant's target records and convergence when they changed.
  private async writeTenant(
    tenant: Resource,
    targets: TargetStatus[],
    desire: TenantDesire,
    verdicts: Map<string, TargetVerdict>,
    now: Date,
    trace: Trace,
    rolloutId: string,
  ): Promise<void> {
    const verdict = tenant.deletion
      ? (worst([...verdicts.values()]) ?? { status: ConvergenceStatus.CONVERGED, message: "deleted; nothing runs" })
      : desire.blocker && desire.targets.size === 0
        ? { status: desire.blocker.status, message: desire.blocker.message }
        : (worst([...verdicts.values()]) ?? { status: ConvergenceStatus.CONVERGED, message: "nothing to run" });
    const conv = convergence(verdict, "", now, tenant.convergence);
    const release = releaseOf(tenant, desire, conv, now);
    const updated = await this.deps.records.writePass(tenant, targets, conv, rolloutId, release);
    if (!updated) return;
    const was = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value.release : undefined;
    // Its environment also hears when the tenant gives up on (or recovers from) the release's
    // spec: a promotion without a rollout ends FAILED on that (delivery/in-flight.ts).
    if (!sameRelease(was, release) || (release && gaveUp(tenant.convergence?.status) !== gaveUp(conv.status)))
      this.deps.onTenantRelease?.(
        tenant.id,
        [...new Set([was?.environmentId ?? "", release?.environmentId ?? ""])].filter((e) => e !== ""),
      );
    if (tenant.convergence?.status !== conv.status) await this.convergenceEvent(updated, conv, trace);
  }

  private async writeServices(
    world: World,
    tenantId: string,
    desire: TenantDesire,
    verdicts: Map<string, TargetVerdict>,
    now: Date,
    trace: Trace,
  ): Promise<void> {
    // Different records: written in parallel, so their fsyncs share the store's group commit.
    let applied = false;
    await Promise.all(
      world.servicesOf(tenantId).map(async (svc) => {
        const placed = desire.services.get(svc.id);
        const verdict = placed?.blocker
          ? { status: placed.blocker.status, message: placed.blocker.message }
          : (worst((placed?.nodeIds ?? []).map((n) => verdicts.get(n)).filter((v): v is TargetVerdict => v !== undefined)) ?? {
              status: ConvergenceStatus.PENDING,
              message: "not reconciled yet",
            });
        const conv = convergence(verdict, placed?.nodeIds.length === 1 ? placed.nodeIds[0]! : "", now, svc.convergence);
        // Converged means every node it is placed on runs the spec rendered from this desired
        // state: that is now its last applied state.
        const nowApplied =
          conv.status === ConvergenceStatus.CONVERGED &&
          svc.desiredState !== undefined &&
          !(svc.lastAppliedState && equals(ResourceSpecSchema, svc.lastAppliedState, svc.desiredState));
        if (!nowApplied && svc.convergence && equals(ConvergenceSchema, svc.convergence, conv)) return;
        const updated = await this.deps.store.updateResource("service", svc.id, (cur) => {
          if (cur.deletion) return cur;
          cur.convergence = conv;
          // Only the desired state this pass rendered: one changed since is not applied yet.
          if (nowApplied && cur.metadata?.resourceVersion === svc.metadata?.resourceVersion && cur.desiredState) {
            cur.lastAppliedState = copyMessage(ResourceSpecSchema, cur.desiredState);
            applied = true;
          }
          return cur;
        });
        if (svc.convergence?.status !== conv.status) await this.convergenceEvent(updated, conv, trace);
      }),
    );
    if (applied) await this.deps.onServicesApplied?.(tenantId, trace);
  }

  // The networks, volumes and resource limits the tenant's services use: where they run as
  // desired (current_state) and, once every service using one is converged, its last applied
  // state (dependency-status.ts). Written only when that changed.
  private async writeDependencies(
    world: World,
    tenantId: string,
    desire: TenantDesire,
    verdicts: Map<string, TargetVerdict>,
  ): Promise<void> {
    const tw = world.tenantWorld(undefined, tenantId);
    const states = dependencyStates({ ...tw, tenantId, placed: desire.services, verdicts });
    await Promise.all(
      states.map(async ({ resource: r, status, statusOf, applied }) => {
        const nowApplied =
          applied &&
          r.desiredState !== undefined &&
          !(r.lastAppliedState && equals(ResourceSpecSchema, r.lastAppliedState, r.desiredState));
        if (!nowApplied && r.currentState && equals(ResourceStatusSchema, r.currentState, status)) return;
        await this.deps.store.updateResource(r.resourceType as "network" | "volume" | "resource_limits", r.id, (cur) => {
          if (cur.deletion) return cur;
          // As stored now: another tenant's pass may have written a shared limit meanwhile.
          cur.currentState = statusOf(cur);
          // Only the desired state this pass rendered: one changed since is not applied yet.
          if (nowApplied && cur.metadata?.resourceVersion === r.metadata?.resourceVersion && cur.desiredState)
            cur.lastAppliedState = copyMessage(ResourceSpecSchema, cur.desiredState);
          return cur;
        });
      }),
    );
  }

  private async convergenceEvent(r: Resource, c: Convergence, trace: Trace): Promise<void> {
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

// The release the tenant's spec carries, and since when every target runs it converged (kept from
// the stored record while it stays so): the promotion loop reads it back.
function releaseOf(tenant: Resource, desire: TenantDesire, conv: Convergence, now: Date): TenantRelease | undefined {
  if (!desire.release || tenant.deletion) return undefined;
  const was = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value.release : undefined;
  const converged = conv.status === ConvergenceStatus.CONVERGED;
  const same = was?.environmentId === desire.release.environmentId && was.releaseId === desire.release.releaseId;
  return create(TenantReleaseSchema, {
    ...desire.release,
    convergedSince: converged ? (same && was.convergedSince ? was.convergedSince : timestampFromDate(now)) : undefined,
  });
}

function sameRelease(a: TenantRelease | undefined, b: TenantRelease | undefined): boolean {
  return a === undefined || b === undefined ? a === b : equals(TenantReleaseSchema, a, b);
}

function gaveUp(s: ConvergenceStatus | undefined): boolean {
  return s === ConvergenceStatus.ORDER_FAILED || s === ConvergenceStatus.ROLLED_BACK;
}
