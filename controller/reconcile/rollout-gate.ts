// The rollout's part in a tenant's reconcile pass (tenant-pass.ts), under the tenant's lock:
//   before planning  decide whether the change starts a rollout (rollouts/rollout-start.ts):
//                    supersede the one under way, store the new one, and tell the planner which
//                    nodes it holds on their spec and which it returns to their old one;
//   after planning   observe each of its nodes from the pass's verdicts and records, step the
//                    rollout (rollouts/rollout-step.ts, rollout-holds.ts), store what changed with
//                    its events, and say when to look again: at once when nodes were started (the
//                    next pass sends them their spec), else when a bake or a deadline ends.
// Without a rollout policy a rollout is one wave of every node and nothing waits: as before.
import { clone, create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ConvergenceStatus, NodeLiveness, type Resource, type TargetStatus } from "../../gen/skipper/v1/resource_pb.js";
import { type Rollout, RolloutActorSchema, RolloutNodeState as S, RolloutSchema, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import type { Trace } from "../base/context.js";
import { applyActions, ENDED, nodesOf } from "../rollouts/rollout-actions.js";
import { holdOf, rollbackProgress, rollbackTo, type RollbackObservation } from "../rollouts/rollout-holds.js";
import type { RolloutRecords } from "../rollouts/rollout-records.js";
import { decideRollout, type FleetNode } from "../rollouts/rollout-start.js";
import { type Freeze, NO_STOPS, type RolloutStops, stopsFor } from "../rollouts/rollout-stops.js";
import { type NodeObservation, type RolloutAction, rolloutStep } from "../rollouts/rollout-step.js";
import type { TenantDesire } from "./desired-targets.js";
import type { TargetOrder } from "./order-issuer.js";
import { REMOVAL_HASH, type TargetVerdict } from "./plan-target.js";
import type { World } from "./world.js";
import { planOfRollout } from "./plan-rollout.js";
import type { Store } from "../store/store.js";

/** The rollout a pass follows, and what it asks of each node. */
export interface RolloutGate {
  /** The tenant's current rollout (new, or the latest while it covers the fleet); undefined when none. */
  rollout?: Rollout;
  /** Why the node keeps the spec it runs, or undefined. */
  hold(nodeId: string): string | undefined;
  /** The spec hash the node must return to, or undefined. */
  rollbackTo(nodeId: string): string | undefined;
  /** What holds the rollout back from outside its record: windows, a pin, freezes. */
  stops: RolloutStops;
}

/** What the pass knows after planning, for advance(). */
export interface PassOutcome {
  verdicts: ReadonlyMap<string, TargetVerdict>;
  records: ReadonlyMap<string, TargetStatus>;
  orders: readonly TargetOrder[];
  /** Nodes whose rollback could not be issued, and why. */
  rollbackErrors: ReadonlyMap<string, string>;
}

const NONE: RolloutGate = { hold: () => undefined, rollbackTo: () => undefined, stops: NO_STOPS };

/** Before planning: the tenant's rollout, started or superseded as its fleet requires. */
export async function openGate(
  store: Store,
  rollouts: RolloutRecords,
  tenant: Resource,
  latestId: string,
  desire: TenantDesire,
  records: ReadonlyMap<string, TargetStatus>,
  world: World,
  now: Date,
  trace: Trace,
): Promise<RolloutGate> {
  if (tenant.deletion) return NONE;
  const latest = latestId === "" ? undefined : await rollouts.get(latestId);
  const fleet: FleetNode[] = [];
  for (const [nodeId, rendered] of desire.targets) {
    const node = world.node(nodeId);
    if (!node || node.disabled) continue;
    const applied = records.get(nodeId)?.appliedHash ?? "";
    fleet.push({
      nodeId,
      labels: world.labelsOf(nodeId),
      desiredHash: rendered.specHash,
      appliedHash: applied === REMOVAL_HASH ? "" : applied,
    });
  }
  const spec = tenant.desiredState?.kind.case === "tenant" ? tenant.desiredState.kind.value : undefined;
  const policy = spec?.rollout;
  const started = create(RolloutActorSchema, {
    actor: "controller",
    at: timestampFromDate(now),
    reason: "the tenant's rendered spec changed",
    requestId: trace.requestId,
    correlationId: trace.correlationId,
  });
  const decision = decideRollout({
    tenantId: tenant.id,
    tenantIncarnation: tenant.createdAt ? String(tenant.createdAt.seconds) : "",
    latest,
    fleet,
    policy,
    started,
    now: now.getTime(),
  });
  if (decision.start && policy?.requireApproval) {
    // Nothing deploys until an operator approves this plan by its hash.
    decision.start.plan = await planOfRollout(store, decision.start, desire);
    decision.start.status = RolloutStatus.PENDING_APPROVAL;
    decision.start.message = `waits for approval of plan ${decision.start.plan.planHash}`;
  }
  if (decision.supersede && latest) await rollouts.supersede(latest, decision.start?.id ?? "", trace, now);
  const current = decision.start ? await rollouts.create(decision.start, trace) : decision.current;
  if (!current) return NONE;
  // Stops hold back starts, which only a PROGRESSING rollout makes: the others (most tenants, whose
  // latest rollout has ended) need no freezes read and no node labels gathered.
  const stops =
    current.status !== RolloutStatus.PROGRESSING
      ? NO_STOPS
      : stopsFor({
          tenantId: tenant.id,
          spec,
          freezes: await freezesOf(rollouts),
          nodes: new Map(nodesOf(current).map((n) => [n.nodeId, world.labelsOf(n.nodeId)])),
          now: now.getTime(),
        });
  return { rollout: current, stops, hold: (n) => holdOf(current, n, stops), rollbackTo: (n) => rollbackTo(current, n) };
}

async function freezesOf(rollouts: RolloutRecords): Promise<Freeze[]> {
  return (await rollouts.freezes()).flatMap((r) =>
    r.desiredState?.kind.case === "freeze" ? [{ id: r.id, spec: r.desiredState.kind.value }] : [],
  );
}

/** What stepping the rollout asks of the pass. */
export interface GateAdvance {
  /** Plan again now: the rollout started nodes (they get their spec) or began a rollback. */
  again: boolean;
  /** When time alone moves the rollout on (a bake or a deadline ends), epoch ms. */
  recheckAt?: number;
  /** Why each node the rollout still holds is held, as the rollout stands after the step. */
  holdNow(nodeId: string): string | undefined;
}

/** After planning: steps the gate's rollout with what the pass saw, and stores what changed. */
export async function advanceGate(
  rollouts: RolloutRecords,
  gate: RolloutGate,
  pass: PassOutcome,
  world: World,
  tenantId: string,
  now: Date,
  trace: Trace,
): Promise<GateAdvance> {
  const before = gate.rollout;
  if (!before || ENDED.has(before.status)) return { again: false, holdNow: gate.hold };
  const at = now.getTime();
  const actions: RolloutAction[] = ordersOf(before, pass.orders);
  for (const [nodeId, reason] of pass.rollbackErrors) actions.push({ type: "node-rollback-failed", nodeId, reason });
  const working = clone(RolloutSchema, before);
  applyActions(working, actions, at);
  let recheckAt: number | undefined;
  let again = false;
  if (working.status === RolloutStatus.PROGRESSING || working.status === RolloutStatus.PAUSED) {
    const step = rolloutStep(working, observe(working, pass, world), at, gate.stops);
    actions.push(...step.actions);
    recheckAt = step.recheckAt;
    again = step.actions.some((a) => a.type === "node-started" || (a.type === "budget-exhausted" && a.outcome === "rollback"));
  } else if (working.status === RolloutStatus.ROLLING_BACK) {
    actions.push(...rollbackProgress(working, rollbackSeen(working, pass, world, tenantId)));
  }
  if (actions.length === 0) return { again, recheckAt, holdNow: gate.hold };
  const after = clone(RolloutSchema, before);
  const events = applyActions(after, actions, at);
  await rollouts.save(after, events, trace);
  return { again, recheckAt, holdNow: (n) => holdOf(after, n, gate.stops) };
}

// Orders in flight for the rollout's nodes that its record does not name yet: the spec it brings
// them, or their rollback (issued by this pass, or by one that died before recording them).
function ordersOf(r: Rollout, orders: readonly TargetOrder[]): RolloutAction[] {
  const out: RolloutAction[] = [];
  const byNode = new Map(nodesOf(r).map((n) => [n.nodeId, n]));
  for (const o of orders) {
    const node = byNode.get(o.nodeId);
    const id = o.workOrder.id;
    if (!node) continue;
    if (o.workOrder.type === WorkOrderType.ROLLBACK) {
      if (r.status === RolloutStatus.ROLLING_BACK && node.rollbackWorkOrderId !== id)
        out.push({ type: "node-rollback-issued", nodeId: o.nodeId, workOrderId: id });
    } else if (o.workOrder.desiredState?.specHash === node.toSpecHash && node.state !== S.WAITING && node.workOrderId !== id) {
      out.push({ type: "node-order", nodeId: o.nodeId, workOrderId: id });
    }
  }
  return out;
}

/** Each node of the rollout against the spec it brings the node, from the pass's verdicts. */
function observe(r: Rollout, pass: PassOutcome, world: World): Map<string, NodeObservation> {
  const out = new Map<string, NodeObservation>();
  for (const n of nodesOf(r)) {
    const verdict = pass.verdicts.get(n.nodeId);
    const rec = pass.records.get(n.nodeId);
    const offline = world.node(n.nodeId)?.liveness === NodeLiveness.OFFLINE;
    if (!verdict || !rec) {
      // The tenant no longer runs on the node: nothing of this rollout is left to do there.
      out.set(n.nodeId, { converged: true });
      continue;
    }
    const onTarget = rec.appliedHash === n.toSpecHash;
    let failure: string | undefined;
    if (verdict.status === ConvergenceStatus.ORDER_FAILED) failure = verdict.message;
    else if (verdict.status === ConvergenceStatus.ROLLED_BACK && rec.rolledBackHash === n.toSpecHash) failure = verdict.message;
    // A tag that moved away from the spec's lock: the next nodes would refuse it too. Its reason
    // is the node's whole line (both digests), not the headline's first 200 characters.
    const halts = failure !== undefined && rec.lastResultCode === "DIGEST_MISMATCH";
    if (halts) failure = `${rec.lastFailureCause?.line || failure} (DIGEST_MISMATCH)`;
    out.set(n.nodeId, { converged: onTarget && verdict.status === ConvergenceStatus.CONVERGED, failure, offline, halts });
  }
  return out;
}

function rollbackSeen(r: Rollout, pass: PassOutcome, world: World, tenantId: string): Map<string, RollbackObservation> {
  const out = new Map<string, RollbackObservation>();
  for (const n of nodesOf(r)) {
    const rec = pass.records.get(n.nodeId);
    if (!rec) continue;
    out.set(n.nodeId, {
      appliedHash: rec.appliedHash,
      lastWorkOrderId: rec.lastWorkOrderId,
      lastResultCode: rec.lastResultCode,
      inFlight: world.inFlight(tenantId, n.nodeId) !== undefined,
    });
  }
  return out;
}
