// Rollout step: one pass of a rollout, as a pure function of its record (the waves planned with
// wave-plan.ts, each node's state), what is observed of its nodes, and the time. It returns the
// actions that move the rollout on, and executes nothing.
//
// Per node: WAITING -start-> DEPLOYING -converged-> BAKING -min_healthy_time-> DONE; DEPLOYING or
// BAKING -failure-> FAILED; -past progress_deadline-> FAILED or SKIPPED_OFFLINE (on_overdue); a
// BAKING node that stops being converged and healthy goes back to DEPLOYING (its bake restarts).
// Per rollout: waves run in order; a wave starts once every earlier wave is complete (each node
// done, failed or skipped) and, with require_promote, once promoted; inside it WAITING nodes
// start in order while fewer than max_parallel nodes deploy or bake. More failures than the
// budget allows (counted since the last resume) exhaust it: start nothing, pause or roll back.
// A failure that halts (a tag moved away from the spec's image lock) pauses it at once.
// PAUSED: nodes under way are still followed, nothing starts. Every wave complete: SUCCEEDED.
// Stops from outside the record (rollout-stops.ts) hold back starts too: outside the maintenance
// windows or pinned, no node starts; a freeze of the tenant starts no new wave; a frozen node
// does not start (its wave waits for it).
//
// The wiring (reconcile/rollout-gate.ts) builds the observations from each reconcile pass and
// applies the actions (rollout-actions.ts) to the stored record (rollout-records.ts).
import type { Rollout, RolloutNode, RolloutPolicy } from "../../gen/skipper/v1/rollout_pb.js";
import { OverdueNodeAction, RolloutFailureAction, RolloutNodeState as S, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { durationMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { NO_STOPS, type RolloutStops } from "./rollout-stops.js";

/** What is observed of one node against the rollout's target spec. */
export interface NodeObservation {
  /** The node runs the target spec, converged and healthy. */
  converged: boolean;
  /** Why the target spec failed on the node for good (order failed, health gate rolled back). */
  failure?: string;
  /** The node has stopped heartbeating: only the reason given for an overdue node says so. */
  offline?: boolean;
  /**
   * The failure says the change itself is not what the rollout started with (an image's tag moved
   * away from the spec's digest lock): the rollout pauses with it, whatever its failure budget.
   */
  halts?: boolean;
}

/** One change the step asks for; waves are indexes into the record's waves. */
export type RolloutAction =
  | { type: "node-started"; nodeId: string; wave: number }
  | { type: "node-baking"; nodeId: string }
  | { type: "node-bake-broken"; nodeId: string }
  | { type: "node-done"; nodeId: string }
  | { type: "node-failed"; nodeId: string; reason: string }
  | { type: "node-skipped"; nodeId: string; reason: string }
  | { type: "wave-started"; wave: number }
  | { type: "wave-completed"; wave: number }
  | { type: "budget-exhausted"; failed: number; allowed: number; outcome: "pause" | "rollback" }
  | { type: "halted"; nodeId: string; reason: string }
  | { type: "succeeded" }
  // Bookkeeping of the wiring (reconcile/rollout-gate.ts) and of a rollback (rollout-holds.ts
  // rollbackProgress), not of the step:
  | { type: "node-order"; nodeId: string; workOrderId: string }
  | { type: "node-rollback-issued"; nodeId: string; workOrderId: string }
  | { type: "node-rolled-back"; nodeId: string; reason: string }
  | { type: "node-rollback-failed"; nodeId: string; reason: string }
  | { type: "rollback-finished"; ok: boolean };

/** Why a rollout that is not finished starts nothing more now. */
export type RolloutBlocker =
  | { kind: "paused" }
  | { kind: "promote"; wave: number }
  | { kind: "max-parallel"; wave: number }
  | { kind: "nodes"; wave: number }
  | { kind: "budget" }
  | { kind: "stopped"; reason: string };

/** The step's result: the actions, what blocks it, and when time alone will change something. */
export interface RolloutStepResult {
  actions: RolloutAction[];
  blocker?: RolloutBlocker;
  /** Earliest future time (ms) a bake ends or a deadline passes; undefined when none. */
  recheckAt?: number;
}

const TERMINAL = new Set([S.DONE, S.FAILED, S.SKIPPED_OFFLINE, S.ROLLED_BACK]);
const IN_FLIGHT = new Set([S.DEPLOYING, S.BAKING]);

/** The actions that move `rollout` on at `now` (ms), given what is observed of its nodes. */
export function rolloutStep(
  rollout: Rollout,
  observed: ReadonlyMap<string, NodeObservation>,
  now: number,
  stops: RolloutStops = NO_STOPS,
): RolloutStepResult {
  const status = rollout.status;
  if (status !== RolloutStatus.PROGRESSING && status !== RolloutStatus.PAUSED) return { actions: [] };
  const policy = rollout.policy;
  const states = new Map<string, S>();
  const actions: RolloutAction[] = [];
  let recheckAt: number | undefined;
  const later = (t: number) => {
    if (t > now) recheckAt = recheckAt === undefined ? t : Math.min(recheckAt, t);
  };
  for (const wave of rollout.waves) {
    for (const node of wave.nodes) {
      const next = advanceNode(node, observed.get(node.nodeId), policy, now, later);
      if (next) actions.push(next.action);
      states.set(node.nodeId, next ? next.state : node.state);
    }
  }
  const result = (blocker?: RolloutBlocker): RolloutStepResult => ({ actions, blocker, recheckAt });
  if (status === RolloutStatus.PAUSED) return result({ kind: "paused" });
  const halt = actions.find((a) => a.type === "node-failed" && observed.get(a.nodeId)?.halts);
  if (halt?.type === "node-failed") {
    actions.push({ type: "halted", nodeId: halt.nodeId, reason: halt.reason });
    return result({ kind: "paused" });
  }
  if (stops.until !== undefined) later(stops.until);
  const failed = failuresSinceResume(rollout, states, now);
  const allowed = allowedFailures(policy, states.size);
  if (failed > allowed) {
    const outcome = policy?.onFailure === RolloutFailureAction.ROLLBACK ? "rollback" : "pause";
    actions.push({ type: "budget-exhausted", failed, allowed, outcome });
    return result({ kind: "budget" });
  }
  let inFlight = [...states.values()].filter((s) => IN_FLIGHT.has(s)).length;
  const limit = policy?.maxParallel || Number.POSITIVE_INFINITY;
  for (const [k, wave] of rollout.waves.entries()) {
    if (!wave.startedAt) {
      if (wave.requirePromote && !wave.promoted) return result({ kind: "promote", wave: k });
      const stop = stops.nodes ?? stops.waves;
      if (stop !== undefined) return result({ kind: "stopped", reason: stop });
      actions.push({ type: "wave-started", wave: k });
    }
    let blocked = false;
    let stopped: string | undefined;
    for (const node of wave.nodes) {
      if (states.get(node.nodeId) !== S.WAITING) continue;
      const stop = stops.nodes ?? stops.frozenNodes.get(node.nodeId);
      if (stop !== undefined) {
        stopped = stop;
        if (stops.nodes !== undefined) break;
        continue;
      }
      if (inFlight >= limit) {
        blocked = true;
        break;
      }
      actions.push({ type: "node-started", nodeId: node.nodeId, wave: k });
      states.set(node.nodeId, S.DEPLOYING);
      inFlight++;
      if (policy?.progressDeadline) later(now + durationMs(policy.progressDeadline));
    }
    if (!wave.nodes.every((n) => TERMINAL.has(states.get(n.nodeId)!))) {
      if (blocked) return result({ kind: "max-parallel", wave: k });
      return result(stopped !== undefined ? { kind: "stopped", reason: stopped } : { kind: "nodes", wave: k });
    }
    if (!wave.completedAt) actions.push({ type: "wave-completed", wave: k });
  }
  actions.push({ type: "succeeded" });
  return { actions };
}

/** A DEPLOYING or BAKING node's next state and the action saying so, or undefined when it stays. */
function advanceNode(
  node: RolloutNode,
  seen: NodeObservation | undefined,
  policy: RolloutPolicy | undefined,
  now: number,
  later: (t: number) => void,
): { state: S; action: RolloutAction } | undefined {
  if (!IN_FLIGHT.has(node.state)) return undefined;
  const nodeId = node.nodeId;
  if (seen?.failure) return { state: S.FAILED, action: { type: "node-failed", nodeId, reason: seen.failure } };
  const bake = policy?.minHealthyTime ? durationMs(policy.minHealthyTime) : 0;
  const since = node.state === S.BAKING && node.healthySince ? timestampMs(node.healthySince) : now;
  if (seen?.converged && now - since >= bake) return { state: S.DONE, action: { type: "node-done", nodeId } };
  if (policy?.progressDeadline && node.startedAt) {
    const deadline = timestampMs(node.startedAt) + durationMs(policy.progressDeadline);
    if (now >= deadline) return overdue(nodeId, seen, policy);
    later(deadline);
  }
  if (seen?.converged) {
    later(since + bake);
    return node.state === S.BAKING ? undefined : { state: S.BAKING, action: { type: "node-baking", nodeId } };
  }
  return node.state === S.BAKING ? { state: S.DEPLOYING, action: { type: "node-bake-broken", nodeId } } : undefined;
}

/** A node past its progress deadline: failed or skipped, as the policy says. */
function overdue(nodeId: string, seen: NodeObservation | undefined, policy: RolloutPolicy): { state: S; action: RolloutAction } {
  const reason = `not done within progress_deadline${seen?.offline ? " (node offline)" : ""}`;
  return policy.onOverdue === OverdueNodeAction.SKIP
    ? { state: S.SKIPPED_OFFLINE, action: { type: "node-skipped", nodeId, reason } }
    : { state: S.FAILED, action: { type: "node-failed", nodeId, reason } };
}

/** How many nodes may fail before the budget is exhausted: unlimited without a budget. */
export function allowedFailures(policy: RolloutPolicy | undefined, total: number): number {
  const limit = policy?.failureBudget?.limit;
  if (limit?.case === "count") return limit.value;
  if (limit?.case === "percent") return Math.floor((Math.min(limit.value, 100) * total) / 100);
  return Number.POSITIVE_INFINITY;
}

/** FAILED nodes that count against the budget: since the last resume (a resume accepts those before). */
function failuresSinceResume(rollout: Rollout, states: ReadonlyMap<string, S>, now: number): number {
  const resumedAt = rollout.resumed?.at ? timestampMs(rollout.resumed.at) : Number.NEGATIVE_INFINITY;
  let failed = 0;
  for (const wave of rollout.waves) {
    for (const node of wave.nodes) {
      if (states.get(node.nodeId) !== S.FAILED) continue;
      const at = node.state === S.FAILED && node.finishedAt ? timestampMs(node.finishedAt) : now;
      if (at > resumedAt) failed++;
    }
  }
  return failed;
}
