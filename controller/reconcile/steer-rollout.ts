// An operator's command on a rollout (pause, resume, promote, abort), carried out under the
// tenant's reconcile lock so it never interleaves with a pass that steps the same rollout: read
// the record, apply the pure command (rollouts/rollout-commands.ts), store it with its event,
// and queue the tenant so the change takes effect at once (a promote starts the wave, an abort
// issues the rollbacks).
import type { Rollout, RolloutActor } from "../../gen/skipper/v1/rollout_pb.js";
import type { Trace } from "../context.js";
import { notFound } from "../errors.js";
import { type RolloutCommand, runCommand } from "../rollouts/rollout-commands.js";
import type { RolloutRecords } from "../rollouts/rollout-records.js";
import type { TargetRecords } from "./target-records.js";

export interface SteerDeps {
  records: TargetRecords;
  rollouts: RolloutRecords;
  /** Queues a pass of the tenant (the reconcile triggers). */
  wake: (tenantId: string, trace: Trace) => void;
}

/** Runs `cmd` on rollout `id` by `actor`; returns the rollout as it stands after it. */
export async function steerRollout(deps: SteerDeps, id: string, cmd: RolloutCommand, actor: RolloutActor, trace: Trace): Promise<Rollout> {
  const first = await deps.rollouts.get(id);
  if (!first) throw notFound("rollout", id);
  const after = await deps.records.exclusive(first.tenantId, async () => {
    const current = (await deps.rollouts.get(id)) ?? first;
    const result = runCommand(current, cmd, actor);
    if (!result.event) return current;
    return deps.rollouts.save(result.rollout, [result.event], trace);
  });
  deps.wake(first.tenantId, trace);
  return after;
}
