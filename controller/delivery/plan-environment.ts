// The promotion planner: what one environment should do now. Pure; the only clock is `now`.
//
//   0. Pin.       A pin whose release is not current is promoted at once, by the operator who
//                 pinned (only NOT_BAD applies), ending a promotion in flight as REPLACED.
//   1. In flight. DEPLOYING -> VERIFYING once every tenant runs it converged; verifications run,
//                 one order at a time each, each result counted once; all passed -> VERIFIED; one
//                 failed -> FAILED and HOLD or ROLLBACK; a tenant's rollout failed -> FAILED; one
//                 an operator aborted -> FAILED and held by that operator.
//   2. Bad.       Current has a version marked bad: back to the newest good release verified here
//                 (not while pinned; a held environment does go back).
//   3. Candidates. Newer releases (from versions, or only what the upstream verified), at most 5,
//                 each judged by every constraint (constraints/constraint-table.ts).
//   4. Promote    the newest candidate whose constraints all passed.
//   5. Status.    Candidates, message (never empty), when to look again; events only for what
//                 changed, so a pass that changes nothing returns the stored status unchanged.
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { EnvironmentStatus, Promotion } from "../../gen/skipper/v1/delivery_pb.js";
import { badVersionOf, leaveBadCurrent } from "./bad-current.js";
import { type EvaluatedCandidate, evaluateCandidates, finishStatus } from "./candidate-status.js";
import { formCandidates } from "./candidates.js";
import { allPassed, firstBlocking } from "./constraints/constraint-table.js";
import { type ConstraintContext, makeContext } from "./constraints/context.js";
import { advanceInFlight } from "./in-flight.js";
import { PlanOut } from "./plan-out.js";
import type { EnvDesired, EnvObserved, EnvPlan } from "./plan-types.js";
import { sameStatus, workingCopy } from "./status-copy.js";
import { controllerActor, startPromotion } from "./status-records.js";

/** Step 0: promotes the pinned release when it is not current; returns why not when it is bad. */
function followPin(st: EnvironmentStatus, d: EnvDesired, ctx: ConstraintContext, out: PlanOut): string | undefined {
  const p = st.pin;
  if (!p?.release || p.release.id === st.current?.id) return undefined;
  const bad = badVersionOf(p.release, ctx);
  if (bad) return `pinned to ${p.release.id}, which has ${bad}: pin another release`;
  startPromotion(st, d.env.spec, p.release, p.pinned ?? controllerActor(out.now, "pinned"), out);
  return undefined;
}

/** What the environment waits for now: a bad current or pin first, then the promotion in flight, then the newest candidate. */
function messageOf(st: EnvironmentStatus, stuck: string | undefined, cands: EvaluatedCandidate[]): string {
  if (stuck) return stuck;
  if (st.inFlight) return st.inFlight.message || `${st.inFlight.release?.id ?? "a release"} is in flight`;
  const c = cands[0];
  const blocking = c ? firstBlocking(c.constraints) : undefined;
  if (c && blocking) return `${c.release.id}: ${blocking.reason}`;
  return st.current ? "up to date" : "nothing to promote yet: no version recorded";
}

/** What environment `d` should do now, given what is observed (design 2.2). */
export function planEnvironment(d: EnvDesired, o: EnvObserved, now: number): EnvPlan {
  const st = workingCopy(o.status);
  const out = new PlanOut(d.env.id, now);
  const ctx = makeContext(d, o, st, now);
  let settled: Promotion | undefined;
  const settle = () => {
    for (let i = 0; i < 3 && st.inFlight && st.inFlight !== settled; i++) {
      settled = st.inFlight;
      advanceInFlight(st, d, ctx, out);
    }
  };
  let stuck = followPin(st, d, ctx, out); // 0
  settle(); // 1
  stuck = leaveBadCurrent(st, d, ctx, out) ?? stuck; // 2
  settle();
  let cands = evaluateCandidates(formCandidates(d, o, st), ctx); // 3
  const pick = cands.find((c) => allPassed(c.constraints));
  if (pick) {
    // 4
    startPromotion(st, d.env.spec, pick.release, controllerActor(now, `newest candidate, every constraint passed`), out);
    settle();
    cands = evaluateCandidates(formCandidates(d, o, st), ctx);
  }
  finishStatus(st, o.status, cands, out); // 5
  st.message = messageOf(st, stuck, cands);
  st.nextEvaluationAt = out.wakeAt === undefined ? undefined : timestampFromMs(out.wakeAt);
  st.evaluatedAt = o.status.evaluatedAt;
  if (!sameStatus(st, o.status)) st.evaluatedAt = timestampFromMs(now);
  return { actions: out.actions, status: st, wakeAt: out.wakeAt };
}
