// Applies a rollout step's actions (rollout-step.ts; a rollback's, rollout-holds.ts
// rollbackProgress) to the rollout record and says which event each one is. Pure apart from
// mutating the record it is given: the owner (rollout-records.ts) clones, applies, stores and
// records the events in one go.
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { type Rollout, type RolloutNode, RolloutNodeState as S, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import type { RolloutEventType } from "../events/event-recorder.js";
import type { JsonObject } from "@bufbuild/protobuf";
import type { RolloutAction } from "./rollout-step.js";

/** One event a change of a rollout calls for (the owner adds ids and trace). */
export interface RolloutEventDraft {
  type: RolloutEventType;
  nodeId?: string;
  workOrderId?: string;
  data: JsonObject;
}

// Where each node of a rollout sits, built once per record: a pass asks for every node, and a
// scan per question would make a pass grow with the square of the fleet. A record's waves and
// their nodes never move once planned (steps change the nodes in place), so the index stays
// right for the record it was built from; a clone gets its own.
const positions = new WeakMap<Rollout, Map<string, { node: RolloutNode; wave: number }>>();

/** The node of `rollout` with this id and the index of its wave, or undefined. */
export function locate(rollout: Rollout, nodeId: string): { node: RolloutNode; wave: number } | undefined {
  let index = positions.get(rollout);
  if (!index) {
    index = new Map();
    for (const [wave, w] of rollout.waves.entries()) for (const node of w.nodes) index.set(node.nodeId, { node, wave });
    positions.set(rollout, index);
  }
  return index.get(nodeId);
}

/** The node of `rollout` with this id, wherever its wave. */
export function nodeOf(rollout: Rollout, nodeId: string): RolloutNode | undefined {
  return locate(rollout, nodeId)?.node;
}

/** Every node of `rollout`, in wave order. */
export function nodesOf(rollout: Rollout): RolloutNode[] {
  return rollout.waves.flatMap((w) => w.nodes);
}

/** Statuses of a rollout that has ended: it changes no more, except its nodes' rollback bookkeeping. */
export const ENDED: ReadonlySet<RolloutStatus> = new Set([
  RolloutStatus.SUCCEEDED,
  RolloutStatus.FAILED,
  RolloutStatus.ROLLED_BACK,
  RolloutStatus.SUPERSEDED,
]);

/** Applies `actions` at `now` (ms) to `rollout` in place; returns the events they call for. */
export function applyActions(rollout: Rollout, actions: readonly RolloutAction[], now: number): RolloutEventDraft[] {
  const at = timestampFromMs(now);
  const events: RolloutEventDraft[] = [];
  const node = (id: string) => nodeOf(rollout, id)!;
  for (const a of actions) {
    switch (a.type) {
      case "node-started":
        Object.assign(node(a.nodeId), { state: S.DEPLOYING, startedAt: at, healthySince: undefined });
        events.push({ type: "rollout_node_started", nodeId: a.nodeId, data: { wave: rollout.waves[a.wave]!.name } });
        break;
      case "node-baking":
        Object.assign(node(a.nodeId), { state: S.BAKING, healthySince: at });
        break;
      case "node-bake-broken":
        Object.assign(node(a.nodeId), { state: S.DEPLOYING, healthySince: undefined });
        break;
      case "node-done":
        Object.assign(node(a.nodeId), { state: S.DONE, finishedAt: at, healthySince: node(a.nodeId).healthySince ?? at });
        events.push({ type: "rollout_node_done", nodeId: a.nodeId, data: {} });
        break;
      case "node-failed":
        Object.assign(node(a.nodeId), { state: S.FAILED, finishedAt: at, reason: a.reason });
        events.push({ type: "rollout_node_failed", nodeId: a.nodeId, data: { reason: a.reason } });
        break;
      case "node-skipped":
        Object.assign(node(a.nodeId), { state: S.SKIPPED_OFFLINE, finishedAt: at, reason: a.reason });
        events.push({ type: "rollout_node_skipped", nodeId: a.nodeId, data: { reason: a.reason } });
        break;
      case "node-rollback-issued":
        node(a.nodeId).rollbackWorkOrderId = a.workOrderId;
        break;
      case "node-rolled-back":
        Object.assign(node(a.nodeId), { state: S.ROLLED_BACK, finishedAt: at, reason: a.reason });
        events.push({ type: "rollout_node_rolled_back", nodeId: a.nodeId, data: { reason: a.reason } });
        break;
      case "node-rollback-failed":
        Object.assign(node(a.nodeId), { rollbackFailed: true, reason: a.reason });
        events.push({ type: "rollout_node_failed", nodeId: a.nodeId, data: { reason: a.reason, rollback: true } });
        break;
      case "node-order":
        node(a.nodeId).workOrderId = a.workOrderId;
        break;
      case "wave-started":
        rollout.waves[a.wave]!.startedAt = at;
        events.push({ type: "rollout_wave_started", data: { wave: rollout.waves[a.wave]!.name, index: a.wave } });
        break;
      case "wave-completed":
        rollout.waves[a.wave]!.completedAt = at;
        events.push({ type: "rollout_wave_completed", data: { wave: rollout.waves[a.wave]!.name, index: a.wave } });
        break;
      case "budget-exhausted": {
        const message = `failure budget exhausted: ${a.failed} node(s) failed, ${a.allowed} allowed`;
        rollout.message = message;
        rollout.paused = pausedByController(message, at);
        rollout.status = a.outcome === "rollback" ? RolloutStatus.ROLLING_BACK : RolloutStatus.PAUSED;
        events.push({ type: "rollout_budget_exhausted", data: { failed: a.failed, allowed: a.allowed, outcome: a.outcome } });
        break;
      }
      case "halted": {
        const message = `paused: node ${a.nodeId} refused the spec: ${a.reason}`;
        rollout.message = message;
        rollout.paused = pausedByController(message, at);
        rollout.status = RolloutStatus.PAUSED;
        events.push({ type: "rollout_paused", nodeId: a.nodeId, data: { reason: message } });
        break;
      }
      case "rollback-finished":
        rollout.status = a.ok ? RolloutStatus.ROLLED_BACK : RolloutStatus.FAILED;
        rollout.message = a.ok
          ? "every node the rollout updated runs its previous spec again"
          : "the rollback could not return every node to its previous spec; see the nodes' reasons";
        rollout.finishedAt = at;
        events.push({ type: a.ok ? "rollout_rolled_back" : "rollout_failed", data: {} });
        break;
      case "succeeded":
        rollout.status = RolloutStatus.SUCCEEDED;
        rollout.message = "every node is done, failed within the budget, or skipped";
        rollout.finishedAt = at;
        events.push({ type: "rollout_succeeded", data: { ...countStates(rollout) } });
        break;
    }
  }
  if (actions.length > 0) rollout.updatedAt = at;
  return events;
}

/** How many of the rollout's nodes are in each state, by lower-case state name. */
export function countStates(rollout: Rollout): Record<string, number> {
  const out: Record<string, number> = {};
  for (const n of nodesOf(rollout)) {
    const name = (S[n.state] ?? "unknown").toLowerCase();
    out[name] = (out[name] ?? 0) + 1;
  }
  return out;
}

// The controller's own pause (a spent failure budget, a node that refused the spec), with why.
function pausedByController(reason: string, at: Rollout["createdAt"]): Rollout["paused"] {
  return { $typeName: "skipper.v1.RolloutActor", actor: "controller", at, reason, requestId: "", correlationId: "" };
}
