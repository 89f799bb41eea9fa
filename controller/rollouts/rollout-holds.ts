// What a rollout asks of each of its nodes in a reconcile pass, as pure functions of the record:
//   hold        a WAITING node keeps the spec it runs (the message says why: its wave, a promote,
//               a pause, or a rollout that ended before reaching it);
//   rollbackTo  during ROLLING_BACK, a node the rollout updated goes back to its from_spec_hash;
//   progress    during ROLLING_BACK, which nodes are back (or could not be) and when it is over.
import { type Rollout, type RolloutNode, RolloutNodeState as S, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { locate, nodeOf, nodesOf } from "./rollout-actions.js";
import type { RolloutAction } from "./rollout-step.js";
import { NO_STOPS, type RolloutStops } from "./rollout-stops.js";

/** Why the rollout keeps `nodeId` on the spec it runs, or undefined when it does not. */
export function holdOf(rollout: Rollout, nodeId: string, stops: RolloutStops = NO_STOPS): string | undefined {
  const at = locate(rollout, nodeId);
  if (!at || at.node.state !== S.WAITING) return undefined;
  const { node, wave: k } = at;
  const wave = rollout.waves[k]!;
  const of = `rollout ${rollout.id}`;
  switch (rollout.status) {
    case RolloutStatus.PAUSED: {
      const by = rollout.paused ? ` by ${rollout.paused.actor}${rollout.paused.reason ? ` (${rollout.paused.reason})` : ""}` : "";
      return `${of} is paused${by}; resume or abort it`;
    }
    case RolloutStatus.PENDING_APPROVAL:
      return `${of} waits for approval`;
    case RolloutStatus.ROLLING_BACK:
      return `${of} is rolling back; it had not reached this node, which keeps spec ${node.fromSpecHash.slice(0, 12)}`;
    case RolloutStatus.PROGRESSING: {
      const stop = stops.nodes ?? stops.frozenNodes.get(nodeId) ?? (wave.startedAt ? undefined : stops.waves);
      if (stop !== undefined) return `${of} waits: ${stop}`;
      const open = rollout.waves.findIndex((w) => !w.completedAt);
      if (!wave.startedAt && wave.requirePromote && !wave.promoted && open === k) return `${of} waits for a promote of wave "${wave.name}"`;
      if (open >= 0 && open < k) {
        return `${of}: waiting for wave "${wave.name}" (${k + 1} of ${rollout.waves.length}); wave "${rollout.waves[open]!.name}" is under way`;
      }
      return `${of}: waiting for a free slot in wave "${wave.name}" (max_parallel ${rollout.policy?.maxParallel ?? 0})`;
    }
    default: {
      const status = (RolloutStatus[rollout.status] ?? "").toLowerCase();
      return `${of} ended ${status} before reaching this node, which keeps spec ${node.fromSpecHash.slice(0, 12)}; change the desired state to roll out again`;
    }
  }
}

/** States of a node the rollout may have changed: a rollback returns them. */
const TOUCHED = new Set([S.DEPLOYING, S.BAKING, S.DONE, S.FAILED]);

function returning(n: RolloutNode): boolean {
  return TOUCHED.has(n.state) && !n.rollbackFailed;
}

/** The spec hash `nodeId` must be returned to now, or undefined. */
export function rollbackTo(rollout: Rollout, nodeId: string): string | undefined {
  if (rollout.status !== RolloutStatus.ROLLING_BACK) return undefined;
  const node = nodeOf(rollout, nodeId);
  return node && returning(node) ? node.fromSpecHash : undefined;
}

/** What is known of a node while its rollout rolls back. */
export interface RollbackObservation {
  appliedHash: string;
  lastWorkOrderId: string;
  lastResultCode: string;
  inFlight: boolean;
}

/** The actions that record a rollback's progress: nodes back, nodes that could not be, the end. */
export function rollbackProgress(rollout: Rollout, seen: ReadonlyMap<string, RollbackObservation>): RolloutAction[] {
  if (rollout.status !== RolloutStatus.ROLLING_BACK) return [];
  const actions: RolloutAction[] = [];
  let pending = 0;
  let failed = nodesOf(rollout).some((n) => n.rollbackFailed);
  for (const n of nodesOf(rollout)) {
    if (!returning(n)) continue;
    const s = seen.get(n.nodeId);
    if (!s) {
      actions.push({ type: "node-rolled-back", nodeId: n.nodeId, reason: "the tenant no longer runs on this node" });
    } else if (s.appliedHash === n.fromSpecHash && !s.inFlight) {
      const how = n.rollbackWorkOrderId ? `rollback order ${n.rollbackWorkOrderId} succeeded` : "it already ran its previous spec";
      actions.push({ type: "node-rolled-back", nodeId: n.nodeId, reason: how });
    } else if (n.rollbackWorkOrderId !== "" && s.lastWorkOrderId === n.rollbackWorkOrderId && s.lastResultCode !== "" && !s.inFlight) {
      actions.push({
        type: "node-rollback-failed",
        nodeId: n.nodeId,
        reason: `rollback order ${n.rollbackWorkOrderId} failed (${s.lastResultCode})`,
      });
      failed = true;
    } else {
      pending++;
    }
  }
  if (pending === 0) actions.push({ type: "rollback-finished", ok: !failed });
  return actions;
}
