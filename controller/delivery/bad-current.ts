// Step 2 of the plan: the environment runs a version marked bad. Unpinned (held or not: a hold
// stops entries, not returns), it goes back to the newest release verified here with no bad
// version, skipping approval and allowed times (a return, not an entry) but through the tenants'
// rollouts. Pinned, it stays and says so. No good release to go back to: it says to pin one.
import type { EnvironmentStatus, Release } from "../../gen/skipper/v1/delivery_pb.js";
import { ReleaseOutcome } from "../../gen/skipper/v1/delivery_pb.js";
import { byWhom, type ConstraintContext, versionText } from "./constraints/context.js";
import type { PlanOut } from "./plan-out.js";
import type { EnvDesired } from "./plan-types.js";
import { demote } from "./status-records.js";

/** The first version of `r` marked bad, as "web 1.1.0, marked bad by …". */
export function badVersionOf(r: Release | undefined, ctx: ConstraintContext): string | undefined {
  for (const v of r?.versions ?? []) {
    const bad = ctx.versionOf(v.artifactId, v.digest)?.markedBad;
    if (bad) return `${versionText(v)}, marked bad by ${byWhom(bad)}`;
  }
  return undefined;
}

/** The newest release verified here, other than `except`, with no version marked bad. */
export function newestGoodRelease(st: EnvironmentStatus, ctx: ConstraintContext, except: string): Release | undefined {
  for (const h of st.history) {
    if (h.outcome !== ReleaseOutcome.VERIFIED || !h.release || h.release.id === except) continue;
    if (badVersionOf(h.release, ctx) === undefined) return h.release;
  }
  return undefined;
}

/** Step 2: demotes a bad current; returns the status message when it runs a bad version and stays. */
export function leaveBadCurrent(st: EnvironmentStatus, d: EnvDesired, ctx: ConstraintContext, out: PlanOut): string | undefined {
  const bad = badVersionOf(st.current, ctx);
  if (!bad) return undefined;
  const cur = st.current!.id;
  if (st.pin) return `runs ${bad}, while pinned to ${st.pin.release?.id ?? cur}: pin a good release`;
  const to = newestGoodRelease(st, ctx, cur);
  if (!to) return `runs ${bad}, and has no earlier good release: pin one`;
  demote(st, d.env.spec, to, `${cur} runs ${bad}`, out);
  return undefined;
}
