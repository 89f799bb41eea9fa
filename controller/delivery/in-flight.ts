// Step 1 of the plan: the promotion in flight. DEPLOYING until every tenant runs the release
// converged (running_since = the latest of their converged_since; a tenant leaving convergence
// sends it back to DEPLOYING and the bake starts again); VERIFYING runs the verifications; all
// passed -> VERIFIED, one failed -> FAILED and HOLD or ROLLBACK. A tenant's rollout of the
// release failing or rolled back ends it FAILED, and so does a node of a tenant giving up on its
// spec (ORDER_FAILED, or ROLLED_BACK by a quarantine: a tenant without a rollout); a rollout an
// operator aborted also holds the environment, by that operator.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import {
  ConstraintPhase,
  type EnvironmentStatus,
  type Promotion,
  PromotionPhase,
  ReleaseOutcome,
  VerificationFailureAction,
} from "../../gen/skipper/v1/delivery_pb.js";
import { RolloutActorSchema, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { newestGoodRelease } from "./bad-current.js";
import type { ConstraintContext } from "./constraints/context.js";
import type { PlanOut } from "./plan-out.js";
import type { EnvDesired, EnvObserved } from "./plan-types.js";
import { controllerActor, demote, endPromotion, holdBy } from "./status-records.js";
import { advanceVerifications } from "./verification-runs.js";

/** Ends the promotion FAILED when one of its tenants' rollouts failed; true if it did. */
function rolloutEnded(st: EnvironmentStatus, o: EnvObserved, out: PlanOut): boolean {
  const f = st.inFlight!;
  const id = f.release!.id;
  const started = f.started?.at ? timestampMs(f.started.at) : 0;
  for (const t of o.tenants) {
    const r = t.rollout;
    if (!r || t.release?.releaseId !== id || (r.createdAtMs !== undefined && r.createdAtMs < started)) continue;
    if (r.aborted) {
      const why = `rollout ${r.id} of ${t.id} aborted${r.aborted.reason ? ` (${r.aborted.reason})` : ""}`;
      endPromotion(st, ReleaseOutcome.FAILED, `${why} by ${r.aborted.actor}`, out);
      holdBy(st, create(RolloutActorSchema, { ...r.aborted, reason: why }), out);
      return true;
    }
    if (r.status === RolloutStatus.FAILED || r.status === RolloutStatus.ROLLED_BACK) {
      const how = r.status === RolloutStatus.FAILED ? "failed" : "was rolled back";
      endPromotion(st, ReleaseOutcome.FAILED, `rollout ${r.id} of ${t.id} ${how}${r.message ? `: ${r.message}` : ""}`, out);
      return true;
    }
  }
  // A node that gave up on the release's spec ends it. (Even under a rollout whose failure budget
  // would let it go on: a rollout without a budget never stops on failures, and the environment
  // must not wait on it for good. Reading the budget here is the better rule, not built yet.)
  for (const t of o.tenants) {
    if (t.release?.releaseId !== id || !t.failed) continue;
    endPromotion(st, ReleaseOutcome.FAILED, `${t.id} could not deploy it: ${t.failed}`, out);
    return true;
  }
  return false;
}

/** The latest converged_since of the tenants when all run `releaseId` converged; else who does not. */
function convergence(releaseId: string, f: Promotion, o: EnvObserved, now: number): { since?: number; waiting: string[] } {
  let since = f.started?.at ? timestampMs(f.started.at) : now;
  const waiting: string[] = [];
  for (const t of o.tenants) {
    const r = t.release;
    if (r?.releaseId !== releaseId || !r.convergedSince) waiting.push(t.id);
    else since = Math.max(since, timestampMs(r.convergedSince));
  }
  return waiting.length > 0 ? { waiting } : { since, waiting };
}

/** After a failed verification: ROLLBACK to the newest good release verified here, else hold. */
function onVerificationFailed(st: EnvironmentStatus, d: EnvDesired, ctx: ConstraintContext, reason: string, out: PlanOut): void {
  const failedId = st.current?.id ?? "";
  endPromotion(st, ReleaseOutcome.FAILED, reason, out);
  if (d.env.spec.onVerificationFailure === VerificationFailureAction.ROLLBACK) {
    const to = newestGoodRelease(st, ctx, failedId);
    if (to) {
      demote(st, d.env.spec, to, `${failedId} failed verification (${reason}): rolled back`, out);
      return;
    }
    reason = `${reason}; no earlier good release to roll back to`;
  }
  holdBy(st, controllerActor(out.now, `${failedId} failed verification (${reason})`), out);
}

/** Step 1: moves the promotion in flight on by what its tenants and orders report. */
export function advanceInFlight(st: EnvironmentStatus, d: EnvDesired, ctx: ConstraintContext, out: PlanOut): void {
  const f = st.inFlight;
  if (!f?.release) return;
  const o = ctx.observed;
  const id = f.release.id;
  if (rolloutEnded(st, o, out)) return;
  const c = convergence(id, f, o, out.now);
  if (c.since === undefined) {
    f.phase = PromotionPhase.DEPLOYING;
    f.runningSince = undefined;
    const n = o.tenants.length;
    f.message = `${id} deploying: waits for ${c.waiting[0]} to run it converged (${n - c.waiting.length} of ${n} tenants do)`;
    return;
  }
  f.phase = PromotionPhase.VERIFYING;
  f.runningSince = timestampFromMs(c.since);
  const waits = advanceVerifications(f, d, o, out);
  const failed = f.verifications.find((v) => v.phase === ConstraintPhase.FAILED);
  if (failed) {
    const why = `verification ${failed.name}: ${failed.failures} failure${failed.failures === 1 ? "" : "s"}, last ${failed.lastResult}`;
    onVerificationFailed(st, d, ctx, why, out);
    return;
  }
  if (waits === "") {
    const n = f.verifications.length;
    endPromotion(st, ReleaseOutcome.VERIFIED, n === 0 ? "running on every tenant" : `${n} verification${n === 1 ? "" : "s"} passed`, out);
    return;
  }
  f.message = `${id} verifying: ${waits}`;
}
