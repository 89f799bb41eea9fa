// Wave plan: which nodes each wave of a rollout takes, from the tenant's rollout policy and the
// nodes its placement selects. Pure and deterministic: the same policy and nodes give the same
// waves, whatever order the nodes come in (they are taken in node id order).
import type { RolloutPolicy, RolloutWave } from "../../gen/skipper/v1/rollout_pb.js";
import { matchesSelector } from "../domain/label-selector.js";

/** A node the rollout covers, with its placement labels (see reconcile/placement.ts nodeLabels). */
export interface PlanNode {
  id: string;
  labels: Record<string, string>;
}

/** One planned wave: its nodes in the order they are started. */
export interface PlannedWave {
  name: string;
  nodeIds: string[];
  requirePromote: boolean;
}

/**
 * The waves of a rollout over `nodes`: each policy wave takes what it selects of the nodes no
 * earlier wave took; the nodes left over form a last wave; waves that take nothing are left out.
 * No policy (or no waves): one wave of every node, today's behaviour.
 */
export function planWaves(policy: RolloutPolicy | undefined, nodes: readonly PlanNode[]): PlannedWave[] {
  let remaining = [...nodes].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const waves: PlannedWave[] = [];
  const policyWaves = policy?.waves ?? [];
  policyWaves.forEach((wave, i) => {
    const taken = takeWave(wave, remaining);
    if (taken.size === 0) return;
    waves.push({
      name: wave.name || `wave-${i + 1}`,
      nodeIds: remaining.filter((n) => taken.has(n.id)).map((n) => n.id),
      requirePromote: wave.requirePromote,
    });
    remaining = remaining.filter((n) => !taken.has(n.id));
  });
  if (remaining.length > 0) {
    waves.push({ name: policyWaves.length > 0 ? "rest" : "all", nodeIds: remaining.map((n) => n.id), requirePromote: false });
  }
  return waves;
}

/** Ids of the nodes one wave takes of `remaining` (sorted by id): its selector's, then its share of those. */
function takeWave(wave: RolloutWave, remaining: readonly PlanNode[]): Set<string> {
  const pool = remaining.filter((n) => matchesSelector(n.labels, wave.nodeSelector));
  return new Set(pool.slice(0, shareOf(wave.size, pool.length)).map((n) => n.id));
}

/** How many of `pool` nodes a wave's size takes: all without a size; else rounded up, at least one. */
export function shareOf(size: RolloutWave["size"], pool: number): number {
  if (pool === 0) return 0;
  const wanted = size.case === "count" ? size.value : size.case === "percent" ? Math.ceil((Math.min(size.value, 100) * pool) / 100) : pool;
  return Math.min(pool, Math.max(1, wanted));
}
