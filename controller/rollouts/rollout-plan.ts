// A rollout's plan: per node, the compose file it runs against the one it would get (a unified
// diff, secret-shaped values blanked on both sides) and the environment keys added or removed;
// and the plan hash that pins it. The hash covers the tenant and each node's from and to spec
// hashes: when anything of that changes, it changes, and an approval naming the old hash fails.
// Pure: the caller (reconcile/plan-rollout.ts) finds the compose files.
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { createTwoFilesPatch } from "diff";
import { type RolloutPlan, RolloutPlanSchema } from "../../gen/skipper/v1/rollout_pb.js";
import { redactCompose } from "../../common/logging/redact.js";

/** One node's change, with the two projects when known. */
export interface PlanInput {
  nodeId: string;
  wave: string;
  fromSpecHash: string;
  toSpecHash: string;
  /** The compose file and env the node runs; undefined when no kept order has it. */
  from?: { composeFile: string; env: Record<string, string> };
  to: { composeFile: string; env: Record<string, string> };
}

/** The plan hash of `tenantId` changing these nodes (only ids and hashes count). */
export function planHash(tenantId: string, nodes: readonly Pick<PlanInput, "nodeId" | "fromSpecHash" | "toSpecHash">[]): string {
  const pairs = nodes.map((n) => [n.nodeId, n.fromSpecHash, n.toSpecHash]).sort((a, b) => (a[0]! < b[0]! ? -1 : 1));
  return createHash("sha256")
    .update(JSON.stringify([tenantId, pairs]))
    .digest("hex");
}

/** The plan for `nodes`; the same (from, to) pair is diffed once. */
export function buildPlan(tenantId: string, nodes: readonly PlanInput[]): RolloutPlan {
  const diffs = new Map<string, string>();
  const diffOf = (n: PlanInput): string => {
    const key = `${n.fromSpecHash}>${n.toSpecHash}`;
    let d = diffs.get(key);
    if (d === undefined) {
      const before = n.from ? redactCompose(n.from.composeFile) : "";
      const after = redactCompose(n.to.composeFile);
      const name = "compose.yaml";
      d = n.from
        ? createTwoFilesPatch(`${name}@${n.fromSpecHash.slice(0, 12)}`, `${name}@${n.toSpecHash.slice(0, 12)}`, before, after)
        : `(the compose file of spec ${n.fromSpecHash.slice(0, 12)} is no longer kept; the new one follows)\n${after}`;
      diffs.set(key, d);
    }
    return d;
  };
  return create(RolloutPlanSchema, {
    planHash: planHash(tenantId, nodes),
    nodes: nodes.map((n) => ({
      nodeId: n.nodeId,
      wave: n.wave,
      fromSpecHash: n.fromSpecHash,
      toSpecHash: n.toSpecHash,
      composeDiff: diffOf(n),
      envChanged: n.from ? envKeysChanged(n.from.env, n.to.env) : [],
    })),
  });
}

function envKeysChanged(before: Record<string, string>, after: Record<string, string>): string[] {
  const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
  return [...keys].filter((k) => Object.hasOwn(before, k) !== Object.hasOwn(after, k)).sort();
}
