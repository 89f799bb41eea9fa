// Steps 3 and 5 of the plan around the candidates: every candidate judged by every constraint,
// then written into the status with what it carried before (first_seen, each state's since), so
// an unchanged judgement is an unchanged status; events only for a first reason that changed and
// a constraint that newly failed; the constraints' `until` is when to look again.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import {
  type Candidate,
  CandidateSchema,
  ConstraintKind,
  ConstraintPhase,
  type ConstraintState,
  type EnvironmentStatus,
  type Release,
} from "../../gen/skipper/v1/delivery_pb.js";
import { evaluateConstraints, firstBlocking } from "./constraints/constraint-table.js";
import type { ConstraintContext } from "./constraints/context.js";
import type { PlanOut } from "./plan-out.js";
import { sameCandidateAs } from "./status-copy.js";
import { MAX_CANDIDATES, MAX_DECISIONS } from "./status-records.js";

export interface EvaluatedCandidate {
  release: Release;
  constraints: ConstraintState[];
}

/** Every candidate with every constraint's state. */
export function evaluateCandidates(releases: readonly Release[], ctx: ConstraintContext): EvaluatedCandidate[] {
  return releases.slice(0, MAX_CANDIDATES).map((release) => ({ release, constraints: evaluateConstraints(release, ctx) }));
}

const sameState = (a: ConstraintState, b: ConstraintState) => a.kind === b.kind && a.subject === b.subject && a.phase === b.phase;

function carried(c: EvaluatedCandidate, before: Candidate | undefined, now: number): Candidate {
  for (const s of c.constraints) {
    const was = before?.constraints.find((x) => sameState(x, s));
    s.since = was?.since ?? timestampFromMs(now);
  }
  const fresh = create(CandidateSchema, {
    release: before?.release?.id === c.release.id ? before.release : c.release,
    constraints: c.constraints,
    firstSeen: before?.firstSeen ?? timestampFromMs(now),
  });
  return sameCandidateAs(fresh, before);
}

function eventsFor(cands: readonly Candidate[], stored: EnvironmentStatus, out: PlanOut): void {
  const first = cands[0] ? firstBlocking(cands[0].constraints) : undefined;
  const storedFirst = stored.candidates[0] ? firstBlocking(stored.candidates[0].constraints) : undefined;
  if (first && first.reason !== storedFirst?.reason) {
    out.event("delivery_candidate_waiting", { release_id: cands[0]!.release!.id, reason: first.reason });
  }
  for (const c of cands) {
    const before = stored.candidates.find((x) => x.release?.id === c.release?.id);
    for (const s of c.constraints) {
      if (s.phase !== ConstraintPhase.FAILED) continue;
      if (before?.constraints.some((x) => sameState(x, s))) continue;
      out.event("delivery_constraint_failed", {
        release_id: c.release!.id,
        constraint: ConstraintKind[s.kind],
        subject: s.subject,
        reason: s.reason,
      });
    }
  }
}

/** Step 5: candidates into the status (carrying first_seen and since), their events, caps, wake. */
export function finishStatus(st: EnvironmentStatus, stored: EnvironmentStatus, cands: EvaluatedCandidate[], out: PlanOut): void {
  st.candidates = cands.map((c) =>
    carried(
      c,
      stored.candidates.find((x) => x.release?.id === c.release.id),
      out.now,
    ),
  );
  eventsFor(st.candidates, stored, out);
  for (const c of st.candidates) for (const s of c.constraints) if (s.until) out.wake(timestampMs(s.until));
  if (st.decisions.length > MAX_DECISIONS) st.decisions.length = MAX_DECISIONS;
}
