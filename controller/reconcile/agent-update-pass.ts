// One pass of the agent updater's reconciler over every agent_update resource, the leader's alone
// (agent-update-loop wiring in server/wiring/leader-loops.ts): read the updates, the versions, the
// nodes and the orders the rollouts name; plan with plan-agent-update.ts and the rollout machinery
// (rollouts/: decideRollout, rolloutStep, rollbackProgress, all pure); then act: store a new
// rollout (superseding the one under way), queue update_agent orders under fixed ids (a repeated
// pass gets its own order back), store the rollout's record with its events, and the update's
// status when it changed. Each update runs under the lock of tenant "" (agent rollouts have no
// tenant), which RolloutService's commands on its rollout take too, so the two never interleave.
import { clone, create, equals } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { createHash } from "node:crypto";
import { v4 as uuidv4 } from "uuid";
import type { Logger } from "../../common/logging/logger.js";
import { isFinishedStatus } from "../../common/order-status.js";
import { AgentUpdateStatusSchema, type AgentUpdateSpec, type AgentUpdateStatus } from "../../gen/skipper/v1/agent_update_pb.js";
import { NodeLiveness, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { type Rollout, RolloutActorSchema, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { CreateWorkOrderRequestSchema, type CreateWorkOrderRequest } from "../../gen/skipper/v1/work_order_service_pb.js";
import type { Trace } from "../base/context.js";
import { conflict, isSkipperError } from "../base/errors.js";
import { buildEvent } from "../events/event-recorder.js";
import { agentVersionOf, agentVersionPath, type AgentVersions } from "../nodes/agent-versions.js";
import { updateDeadlineMs } from "../resources/agent-update-rules.js";
import { writeStatus } from "../resources/status-write.js";
import { applyActions, ENDED, nodesOf } from "../rollouts/rollout-actions.js";
import { rollbackProgress, rollbackTo } from "../rollouts/rollout-holds.js";
import type { RolloutRecords } from "../rollouts/rollout-records.js";
import { decideRollout } from "../rollouts/rollout-start.js";
import { type RolloutAction, rolloutStep } from "../rollouts/rollout-step.js";
import { NO_STOPS } from "../rollouts/rollout-stops.js";
import { scannedResources } from "../store/each-page.js";
import type { Store } from "../store/store.js";
import { nodeLabels } from "./placement.js";
import {
  agentHash,
  assignNodes,
  fleetOf,
  lagging,
  notUpdatable,
  observeNodes,
  rollbackObservations,
  runningHash,
  versionOfHash,
  type AgentNodeView,
  type UpdateOrderView,
} from "./plan-agent-update.js";

export interface AgentUpdatePassDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  rollouts: RolloutRecords;
  versions: Pick<AgentVersions, "has">;
  /** Runs `fn` under the lock RolloutService's commands take for agent rollouts (tenant ""). */
  exclusive: <T>(fn: () => Promise<T>) => Promise<T>;
  /** Queues a controller's order under `id` (dispatch/queue-order.ts queueControllerOrder). */
  queueOrder: (req: CreateWorkOrderRequest, trace: Trace, id: string) => Promise<WorkOrder>;
}

/** Plans and acts on every agent update; answers when time alone changes something (a bake, a deadline). */
export async function runAgentUpdatePass(deps: AgentUpdatePassDeps): Promise<number | undefined> {
  const all = (await scannedResources(deps.store, { resourceType: "agent_update", includeDeleted: true })).filter(
    (r) => r.desiredState?.kind.case === "agentUpdate",
  );
  for (const r of all.filter((x) => x.deletion)) await deps.exclusive(() => endRolloutOfDeleted(deps, r));
  const updates = all.filter((r) => !r.deletion);
  if (updates.length === 0) return undefined;
  const nodes = (await scannedResources(deps.store, { resourceType: "node" })).filter((n) => !n.deletion).map(nodeView);
  const specs = updates.map((r) => ({ id: r.id, spec: specOf(r) }));
  const assigned = assignNodes(specs, nodes);
  let wakeAt: number | undefined;
  for (const r of updates) {
    try {
      const at = await deps.exclusive(() => passOne(deps, r, assigned.get(r.id)!, new Map(nodes.map((n) => [n.id, n]))));
      if (at !== undefined) wakeAt = Math.min(wakeAt ?? at, at);
    } catch (e) {
      deps.logger.warn(
        { action: "agent_update", result: "error", err: e, metadata: { agent_update: r.id } },
        `agent_update ${r.id}: pass failed`,
      );
    }
  }
  return wakeAt;
}

async function passOne(
  deps: AgentUpdatePassDeps,
  r: Resource,
  assigned: ReturnType<typeof assignNodes> extends Map<string, infer V> ? V : never,
  byId: ReadonlyMap<string, AgentNodeView>,
): Promise<number | undefined> {
  const spec = specOf(r);
  const now = deps.now();
  const trace: Trace = { requestId: uuidv4(), correlationId: r.metadata?.correlationId || uuidv4() };
  const versionRes = await deps.store.getResource("agent_version", spec.version);
  const version = agentVersionOf(versionRes);
  const before = statusOf(r);
  const status = create(AgentUpdateStatusSchema, {
    rolloutId: before.rolloutId,
    nodesSelected: assigned.taken.length + assigned.contested.length,
  });
  if (!version || versionRes?.deletion) {
    status.message = `agent_version ${spec.version} is not held: upload it (skipper agent-version add FILE)`;
    return save(deps, r, before, status, trace);
  }
  if (!(await deps.versions.has(version.sha256))) {
    status.message = `this controller lacks the bytes of agent version ${spec.version}: upload the bundle to it again`;
    return save(deps, r, before, status, trace);
  }
  const target = agentHash(version.version, version.sha256);
  const updatable = assigned.taken.filter((n) => notUpdatable(n) === undefined);
  let rollout = before.rolloutId ? await deps.rollouts.get(before.rolloutId) : undefined;
  let written = before;
  const fleet = fleetOf(updatable, target);
  // A node that joined (or came back) behind the version after the last rollout ended is not in it:
  // a new rollout takes it (a tenant's new node gets its spec at once; an agent's must be updated).
  // After a rollback (abort, budget) or a failed one, nothing starts again until the spec changes.
  const newcomers =
    rollout !== undefined &&
    rollout.status === RolloutStatus.SUCCEEDED &&
    fleet.some((f) => f.appliedHash !== "" && f.appliedHash !== f.desiredHash && !nodesOf(rollout!).some((n) => n.nodeId === f.nodeId));
  const decision = decideRollout({
    tenantId: "",
    tenantIncarnation: `agent_update/${r.id}/${r.createdAt ? r.createdAt.seconds : 0}${newcomers ? `/after/${rollout!.id}` : ""}`,
    latest: newcomers ? undefined : rollout,
    fleet,
    policy: spec.policy,
    started: create(RolloutActorSchema, {
      actor: "controller",
      at: timestampFromDate(now),
      reason: `agent_update ${r.id}: version ${spec.version}`,
    }),
    now: now.getTime(),
  });
  if (decision.supersede && rollout) {
    await cancelForward(deps, rollout, `rollout ${rollout.id} was superseded: agent_update ${r.id} changed`, trace);
    await deps.rollouts.supersede(rollout, decision.start?.id ?? "", trace, now);
  }
  if (decision.start) {
    decision.start.agentUpdateId = r.id;
    // The status names the new rollout before it exists: a crash in between leaves a link to
    // nothing (the next pass decides again), never a rollout that nothing steps.
    const linked = clone(AgentUpdateStatusSchema, before);
    linked.rolloutId = decision.start.id;
    await save(deps, r, before, linked, trace);
    written = linked;
    rollout = await deps.rollouts.create(decision.start, trace);
  } else rollout = decision.current;
  let recheck: number | undefined;
  if (rollout && !ENDED.has(rollout.status)) recheck = await stepRollout(deps, rollout, spec, byId, trace, now);
  status.rolloutId = rollout?.id ?? "";
  status.nodesCurrent = assigned.taken.filter((n) => runningHash(n) === target).length;
  status.nodes = lagging(assigned.taken, assigned.contested, target, rollout && (await deps.rollouts.get(rollout.id)));
  await save(deps, r, written, status, trace);
  return recheck;
}

// Steps the rollout (or its rollback), queues the orders its actions ask for, stores the record.
async function stepRollout(
  deps: AgentUpdatePassDeps,
  rollout: Rollout,
  spec: AgentUpdateSpec,
  byId: ReadonlyMap<string, AgentNodeView>,
  trace: Trace,
  now: Date,
): Promise<number | undefined> {
  const orders = await ordersOf(deps.store, rollout);
  const actions: RolloutAction[] = [];
  let recheck: number | undefined;
  if (rollout.status === RolloutStatus.ROLLING_BACK) {
    await cancelForward(deps, rollout, `rollout ${rollout.id} is rolling back`, trace);
    actions.push(...(await issueRollbacks(deps, rollout, spec, byId, trace)));
    actions.push(...rollbackProgress(rollout, rollbackObservations(rollout, byId, orders)));
  } else {
    const stops = spec.paused ? { ...NO_STOPS, nodes: "its agent_update is paused" } : NO_STOPS;
    const step = rolloutStep(rollout, observeNodes(rollout, byId, orders), now.getTime(), stops);
    recheck = step.recheckAt;
    actions.push(...step.actions);
    for (const a of step.actions) {
      if (a.type !== "node-started") continue;
      const id = orderId("agu", rollout.id, a.nodeId);
      const node = byId.get(a.nodeId);
      const why = node ? notUpdatable(node) : "the node is gone";
      try {
        if (why) throw conflict(why);
        const version = await versionFor(deps, rollout.toSpecHash);
        await deps.queueOrder(updateRequest(a.nodeId, rollout, spec, rollout.toSpecHash, version), trace, id);
        actions.push({ type: "node-order", nodeId: a.nodeId, workOrderId: id });
      } catch (e) {
        // A node that cannot take the order (disabled, gone, no longer able) fails alone; the
        // rollout goes on (or stops on its budget). A store that does not answer fails the pass.
        if (!isSkipperError(e) || e.code === "UNAVAILABLE" || e.code === "INTERNAL_ERROR") throw e;
        actions.push({ type: "node-failed", nodeId: a.nodeId, reason: `update_agent could not be queued: ${e.code}: ${e.message}` });
      }
    }
  }
  if (actions.length === 0) return recheck;
  const after = await deps.rollouts.get(rollout.id);
  if (!after) return recheck;
  const events = applyActions(after, actions, now.getTime());
  await deps.rollouts.save(after, events, trace);
  return recheck;
}

// During ROLLING_BACK: an update_agent back to its previous version for each node the rollout
// moved that runs another one and has no such order yet.
async function issueRollbacks(
  deps: AgentUpdatePassDeps,
  rollout: Rollout,
  spec: AgentUpdateSpec,
  byId: ReadonlyMap<string, AgentNodeView>,
  trace: Trace,
): Promise<RolloutAction[]> {
  const out: RolloutAction[] = [];
  for (const rn of nodesOf(rollout)) {
    const back = rollbackTo(rollout, rn.nodeId);
    const n = byId.get(rn.nodeId);
    if (!back || !n || rn.rollbackWorkOrderId !== "" || runningHash(n) === back) continue;
    const version = await versionFor(deps, back);
    if (!version) {
      out.push({ type: "node-rollback-failed", nodeId: rn.nodeId, reason: `the previous version (${back}) is no longer held` });
      continue;
    }
    const id = orderId("agr", rollout.id, rn.nodeId);
    try {
      await deps.queueOrder(updateRequest(rn.nodeId, rollout, spec, back, version), trace, id);
      out.push({ type: "node-rollback-issued", nodeId: rn.nodeId, workOrderId: id });
    } catch (e) {
      if (!isSkipperError(e) || e.code === "UNAVAILABLE" || e.code === "INTERNAL_ERROR") throw e;
      out.push({ type: "node-rollback-failed", nodeId: rn.nodeId, reason: `${e.code}: ${e.message}` });
    }
  }
  return out;
}

// A deleted agent_update: its rollout under way ends SUPERSEDED (nothing steps it any more) and
// its untaken orders are cancelled; nodes keep what they run.
async function endRolloutOfDeleted(deps: AgentUpdatePassDeps, r: Resource): Promise<void> {
  const id = statusOf(r).rolloutId;
  const rollout = id ? await deps.rollouts.get(id) : undefined;
  if (!rollout || ENDED.has(rollout.status)) return;
  const trace: Trace = { requestId: uuidv4(), correlationId: r.metadata?.correlationId || uuidv4() };
  await cancelForward(deps, rollout, `agent_update ${r.id} was deleted`, trace);
  await deps.rollouts.supersede(rollout, "", trace, deps.now());
}

// Cancels the rollout's update_agent orders to its new version that no node took yet (or asks the
// taker to stop): a rollback or a newer rollout must not be followed by an older order.
async function cancelForward(deps: AgentUpdatePassDeps, rollout: Rollout, reason: string, trace: Trace): Promise<void> {
  for (const n of nodesOf(rollout)) {
    if (!n.workOrderId) continue;
    const o = await deps.store.getWorkOrder(n.workOrderId);
    if (!o || isFinishedStatus(o.status) || o.cancelRequest) continue;
    try {
      await deps.store.cancelWorkOrder(o.id, reason, trace.requestId, deps.now());
    } catch (e) {
      if (!isSkipperError(e) || e.code !== "WORK_ORDER_NOT_CLAIMABLE") throw e;
    }
  }
}

// The held version a hash names (its sha256 must begin as the hash says).
async function versionFor(deps: AgentUpdatePassDeps, hash: string) {
  const named = versionOfHash(hash);
  if (!named) return undefined;
  const v = agentVersionOf(await deps.store.getResource("agent_version", named.version));
  return v?.sha256.startsWith(named.sha12) ? v : undefined;
}

function updateRequest(
  nodeId: string,
  rollout: Rollout,
  spec: AgentUpdateSpec,
  hash: string,
  v: ReturnType<typeof agentVersionOf>,
): CreateWorkOrderRequest {
  if (!v) throw new Error(`no held agent version for ${hash}`);
  return create(CreateWorkOrderRequestSchema, {
    type: WorkOrderType.UPDATE_AGENT,
    target: { nodeId, requiredCapabilities: ["agent.update"] },
    action: {
      kind: {
        case: "updateAgent",
        value: {
          version: v.version,
          sha256: v.sha256,
          size: v.size,
          signature: v.signature,
          downloadPath: agentVersionPath(v.version),
          deadline: durationFromMs(updateDeadlineMs(spec)),
          rolloutId: rollout.id,
        },
      },
    },
  });
}

// An order id derived from the rollout and the node: a repeated pass finds its own order.
function orderId(prefix: string, rolloutId: string, nodeId: string): string {
  return `${prefix}-${createHash("sha256").update(`${rolloutId}\n${nodeId}`).digest("hex").slice(0, 24)}`;
}

async function ordersOf(store: Store, rollout: Rollout): Promise<Map<string, UpdateOrderView>> {
  const out = new Map<string, UpdateOrderView>();
  for (const n of nodesOf(rollout)) {
    for (const id of [n.workOrderId, n.rollbackWorkOrderId]) {
      if (!id || out.has(id)) continue;
      const o = await store.getWorkOrder(id);
      if (!o) continue;
      out.set(id, {
        id,
        open: !isFinishedStatus(o.status),
        failed: o.status === WorkOrderStatus.FAILED || o.status === WorkOrderStatus.CANCELLED,
        code: o.result?.code ?? WorkOrderStatus[o.status] ?? "",
        message: o.result?.message ?? "",
      });
    }
  }
  return out;
}

// The status, with an agent_update_status_changed event, when it changed (observed_at aside).
async function save(deps: AgentUpdatePassDeps, r: Resource, before: AgentUpdateStatus, after: AgentUpdateStatus, trace: Trace) {
  after.observedAt = before.observedAt;
  if (equals(AgentUpdateStatusSchema, before, after)) return undefined;
  after.observedAt = timestampFromDate(deps.now());
  await deps.store.updateResource(
    "agent_update",
    r.id,
    (cur) => writeStatus(cur, { case: "agentUpdate", value: after }, trace, timestampFromDate(deps.now())),
    undefined,
    (written) => [
      buildEvent({
        type: "agent_update_status_changed",
        ...trace,
        resourceType: "agent_update",
        resourceId: r.id,
        revision: written.metadata?.resourceVersion,
        data: {
          rollout_id: after.rolloutId,
          nodes_selected: after.nodesSelected,
          nodes_current: after.nodesCurrent,
          message: after.message,
        },
      }),
    ],
  );
  return undefined;
}

function specOf(r: Resource): AgentUpdateSpec {
  return r.desiredState!.kind.value as AgentUpdateSpec;
}

function statusOf(r: Resource): AgentUpdateStatus {
  return r.currentState?.kind.case === "agentUpdate" ? r.currentState.kind.value : create(AgentUpdateStatusSchema);
}

function nodeView(n: Resource): AgentNodeView {
  const spec = n.desiredState?.kind.case === "node" ? n.desiredState.kind.value : undefined;
  const st = n.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
  return {
    id: n.id,
    labels: nodeLabels(n),
    disabled: spec?.disabled ?? false,
    ssh: spec?.ssh !== undefined,
    online: st?.liveness === NodeLiveness.ONLINE || st?.liveness === NodeLiveness.DEGRADED,
    version: st?.agentVersion ?? "",
    report: st?.agentUpdate,
  };
}
