// An operator's command on a rollout (pause, resume, promote, abort), carried out under the
// tenant's reconcile lock so it never interleaves with a pass that steps the same rollout: read
// the record, apply the pure command (rollouts/rollout-commands.ts), store it with its event,
// and queue the tenant so the change takes effect at once (a promote starts the wave, an abort
// issues the rollbacks).
import type { Rollout, RolloutActor } from "../../gen/skipper/v1/rollout_pb.js";
import type { Trace } from "../base/context.js";
import { notFound } from "../base/errors.js";
import { type RolloutCommand, runCommand } from "../rollouts/rollout-commands.js";
import type { RolloutRecords } from "../rollouts/rollout-records.js";
import type { TargetRecords } from "./target-records.js";
import { planHash } from "../rollouts/rollout-plan.js";
import type { Store } from "../store/store.js";

export interface SteerDeps {
  store: Store;
  records: TargetRecords;
  rollouts: RolloutRecords;
  /** Queues a pass of the tenant (the reconcile triggers). */
  wake: (tenantId: string, trace: Trace) => void;
}

/** The plan hash of the rollout's nodes as they are now: each node's applied spec to the rollout's. */
async function fleetPlanHash(deps: SteerDeps, r: Rollout): Promise<string> {
  const tenant = await deps.store.getResource("tenant", r.tenantId);
  const applied = new Map(deps.records.of(tenant).map((t) => [t.nodeId, t.appliedHash]));
  const nodes = r.waves.flatMap((w) => w.nodes);
  return planHash(
    r.tenantId,
    nodes.map((n) => ({ nodeId: n.nodeId, fromSpecHash: applied.get(n.nodeId) ?? "", toSpecHash: n.toSpecHash })),
  );
}

/** Runs `cmd` on rollout `id` by `actor`; returns the rollout as it stands after it. */
export async function steerRollout(
  deps: SteerDeps,
  id: string,
  cmd: RolloutCommand | { kind: "approve"; planHash: string },
  actor: RolloutActor,
  trace: Trace,
): Promise<Rollout> {
  const first = await deps.rollouts.get(id);
  if (!first) throw notFound("rollout", id);
  const after = await deps.records.exclusive(first.tenantId, async () => {
    const current = (await deps.rollouts.get(id)) ?? first;
    const result = runCommand(current, cmd.kind === "approve" ? { ...cmd, current: await fleetPlanHash(deps, current) } : cmd, actor);
    if (!result.event) return current;
    return deps.rollouts.save(result.rollout, [result.event], trace);
  });
  deps.wake(first.tenantId, trace);
  return after;
}
