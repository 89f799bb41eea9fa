// When a tenant's change becomes a rollout: a pure decision from the tenant's latest rollout and
// its fleet (each node the tenant should run on, with the spec it should run and the one it runs).
//
// The latest rollout "covers" the fleet while every node of it that the tenant still runs on
// should run the spec the rollout brings it: the desired state has not changed since it started.
// Otherwise a new rollout starts over the nodes that run another spec than the one they should
// (nodes with nothing yet are not held back: there is nothing to break there), and an older one
// still under way is superseded. The new rollout starts from the fleet as it is, so a node the
// superseded one had already updated is simply one more node to update (or none, when it
// already runs the new spec).
import { createHash } from "node:crypto";
import { clone, create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  type Rollout,
  type RolloutActor,
  RolloutNodeState as S,
  type RolloutPolicy,
  RolloutPolicySchema,
  RolloutSchema,
  RolloutStatus,
} from "../../gen/skipper/v1/rollout_pb.js";
import { ENDED, nodesOf } from "./rollout-actions.js";
import { planWaves } from "./wave-plan.js";

/** One node a tenant should run on, as the rollout decision sees it. */
export interface FleetNode {
  nodeId: string;
  labels: Record<string, string>;
  /** The spec hash the node should run now. */
  desiredHash: string;
  /** The spec hash it last applied; "" when it runs nothing of the tenant. */
  appliedHash: string;
}

export interface RolloutDecision {
  /** The latest rollout is under way and no longer covers the fleet: it ends SUPERSEDED. */
  supersede: boolean;
  /** A new rollout to store (id derived from the tenant and the latest rollout: a retry gets the same). */
  start?: Rollout;
  /** The rollout the tenant's nodes follow now: the new one, the latest when it covers, or none. */
  current?: Rollout;
}

/** True when every node of `rollout` still in `fleet` should run the spec the rollout brings it. */
export function covers(rollout: Rollout, fleet: ReadonlyMap<string, FleetNode>): boolean {
  return nodesOf(rollout).every((n) => {
    const f = fleet.get(n.nodeId);
    return f === undefined || f.desiredHash === n.toSpecHash;
  });
}

/** What to do about rollouts for a tenant whose fleet is `fleet`. */
export function decideRollout(input: {
  tenantId: string;
  /** Distinguishes a tenant from an earlier one of the same id (its creation time, say). */
  tenantIncarnation: string;
  latest?: Rollout;
  fleet: readonly FleetNode[];
  policy?: RolloutPolicy;
  started: RolloutActor;
  now: number;
}): RolloutDecision {
  const { latest } = input;
  const fleet = new Map(input.fleet.map((f) => [f.nodeId, f]));
  if (latest && covers(latest, fleet)) return { supersede: false, current: latest };
  const supersede = latest !== undefined && !ENDED.has(latest.status);
  const behind = input.fleet.filter((f) => f.appliedHash !== "" && f.appliedHash !== f.desiredHash);
  if (behind.length === 0) return { supersede };
  const id = rolloutId(input.tenantId, input.tenantIncarnation, latest?.id ?? "", behind);
  const at = timestampFromMs(input.now);
  const policy = input.policy ? clone(RolloutPolicySchema, input.policy) : undefined;
  const byId = new Map(behind.map((f) => [f.nodeId, f]));
  const start = create(RolloutSchema, {
    id,
    tenantId: input.tenantId,
    fromSpecHash: mostCommon(behind.map((f) => f.appliedHash)),
    toSpecHash: mostCommon(behind.map((f) => f.desiredHash)),
    status: RolloutStatus.PROGRESSING,
    message: `${behind.length} node(s) to update`,
    policy,
    waves: planWaves(
      policy,
      behind.map((f) => ({ id: f.nodeId, labels: f.labels })),
    ).map((w) => ({
      name: w.name,
      requirePromote: w.requirePromote,
      nodes: w.nodeIds.map((nodeId) => ({
        nodeId,
        state: S.WAITING,
        fromSpecHash: byId.get(nodeId)!.appliedHash,
        toSpecHash: byId.get(nodeId)!.desiredHash,
      })),
    })),
    createdAt: at,
    updatedAt: at,
    started: input.started,
  });
  return { supersede, start, current: start };
}

/** A rollout's id: the same tenant, predecessor and change give the same id, so a retried start finds it. */
function rolloutId(tenantId: string, incarnation: string, previous: string, behind: readonly FleetNode[]): string {
  const h = createHash("sha256").update(JSON.stringify([tenantId, incarnation, previous, behind.map((f) => [f.nodeId, f.desiredHash])]));
  return `rollout-${h.digest("hex").slice(0, 24)}`;
}

/** The value most entries have (the first of them on a tie). */
function mostCommon(values: readonly string[]): string {
  const counts = new Map<string, number>();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  let best = "";
  for (const [v, c] of counts) if (best === "" || c > counts.get(best)!) best = v;
  return best;
}
