// UPSTREAM (one per dependency): the upstream environment ran the candidate verified for the bake
// time. Read from the upstream's status as it is now, so a re-verification failing there, or a
// version marked bad, stops the candidate here at once (kargo#5144). The newest upstream record of
// the release decides: in flight there -> pending; VERIFIED -> baking until running_since +
// bake_time, then passed; FAILED or DEMOTED -> failed. A record matches when its versions, over
// this environment's artifacts, are the candidate's (an upstream may promote more artifacts).
import {
  type EnvironmentDependency,
  ConstraintKind as K,
  PromotionPhase,
  type Release,
  ReleaseOutcome,
} from "../../../gen/skipper/v1/delivery_pb.js";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { durationMs } from "../verification-spec.js";
import { byWhom, type ConstraintContext, type Evaluator, failed, passed, pending, span, when } from "./context.js";

/** True when `release`, restricted to `artifacts`, has exactly the candidate's versions. */
export function sameOver(candidate: Release, release: Release | undefined, artifacts: readonly string[]): boolean {
  if (!release) return false;
  if (release.id === candidate.id) return true;
  let n = 0;
  for (const v of release.versions) {
    if (!artifacts.includes(v.artifactId)) continue;
    n++;
    if (!candidate.versions.some((c) => c.artifactId === v.artifactId && c.digest === v.digest)) return false;
  }
  return n === candidate.versions.length;
}

function badVersion(candidate: Release, ctx: ConstraintContext): string | undefined {
  for (const v of candidate.versions) {
    const bad = ctx.versionOf(v.artifactId, v.digest)?.markedBad;
    if (bad) return `${v.artifactId} ${v.version} was marked bad by ${byWhom(bad)}`;
  }
  return undefined;
}

/** The UPSTREAM evaluator for one dependency. */
export function upstream(dep: EnvironmentDependency): Evaluator {
  const up = dep.environmentId;
  return (candidate, ctx) => {
    const u = ctx.observed.upstream.get(up);
    if (!u) return pending(K.UPSTREAM, up, `upstream ${up} has no status yet`);
    const bad = badVersion(candidate, ctx);
    if (bad) return failed(K.UPSTREAM, up, bad);
    const arts = ctx.spec.artifactIds;
    const f = u.inFlight;
    if (f && sameOver(candidate, f.release, arts)) {
      if (f.phase !== PromotionPhase.VERIFYING) return pending(K.UPSTREAM, up, `${up} runs it, deploying`);
      const p = f.verifications.map((v) => `${v.name}: ${v.passes} passed`).join(", ");
      return pending(K.UPSTREAM, up, `${up} runs it, verifying${p ? ` (${p})` : ""}`);
    }
    const r = u.history.find((h) => h.outcome !== ReleaseOutcome.REPLACED && sameOver(candidate, h.release, arts));
    if (!r) return pending(K.UPSTREAM, up, `${up} has not run it verified`);
    if (r.outcome === ReleaseOutcome.FAILED)
      return failed(K.UPSTREAM, up, `failed in ${up} at ${when(r.endedAt)}${r.reason ? ` (${r.reason})` : ""}`);
    if (r.outcome !== ReleaseOutcome.VERIFIED)
      return failed(K.UPSTREAM, up, `left ${up} at ${when(r.endedAt)}${r.reason ? ` (${r.reason})` : ""}`);
    const bake = durationMs(dep.bakeTime, 0);
    const start = r.runningSince ?? r.endedAt;
    const ends = (start ? timestampMs(start) : ctx.now) + bake;
    if (ends > ctx.now) return pending(K.UPSTREAM, up, `bake ${span(bake)} in ${up}: ends at ${when(ends)}`, ends);
    return passed(K.UPSTREAM, up);
  };
}
