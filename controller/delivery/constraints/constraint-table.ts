// Every constraint a candidate passes before it enters, in the order its states are listed: the
// candidate's own record first (bad, vetoed, failed here), then each upstream, then the operator's
// and the calendar's gates. A candidate may be promoted only when all of them passed.
import { ConstraintKind, type ConstraintState, ConstraintPhase, type Release } from "../../../gen/skipper/v1/delivery_pb.js";
import { allowedTimes } from "./allowed-times.js";
import { approval } from "./approval.js";
import type { ConstraintContext, Evaluator } from "./context.js";
import { freeze } from "./freeze.js";
import { hold } from "./hold.js";
import { notBad } from "./not-bad.js";
import { notFailedHere } from "./not-failed-here.js";
import { notVetoed } from "./not-vetoed.js";
import { oneInFlight } from "./one-in-flight.js";
import { pin } from "./pin.js";
import { upstream } from "./upstream.js";

const BEFORE: readonly Evaluator[] = [notBad, notVetoed, notFailedHere];
const AFTER: readonly Evaluator[] = [approval, allowedTimes, freeze, oneInFlight, pin, hold];

/** Every constraint's state for `candidate`, passed ones included. */
export function evaluateConstraints(candidate: Release, ctx: ConstraintContext): ConstraintState[] {
  const out: ConstraintState[] = [];
  for (const e of BEFORE) out.push(e(candidate, ctx));
  for (const dep of ctx.spec.dependsOn) out.push(upstream(dep)(candidate, ctx));
  for (const e of AFTER) out.push(e(candidate, ctx));
  return out;
}

/** True when every state passed. */
export function allPassed(states: readonly ConstraintState[]): boolean {
  return states.every((s) => s.phase === ConstraintPhase.PASSED);
}

/**
 * What to say a candidate waits for: a failure first (it will not pass by waiting), then an
 * operator's pin or hold (nothing else matters until it is lifted), then the first pending state.
 */
export function firstBlocking(states: readonly ConstraintState[]): ConstraintState | undefined {
  return (
    states.find((s) => s.phase === ConstraintPhase.FAILED) ??
    states.find((s) => s.phase === ConstraintPhase.PENDING && (s.kind === ConstraintKind.PIN || s.kind === ConstraintKind.HOLD)) ??
    states.find((s) => s.phase !== ConstraintPhase.PASSED)
  );
}
