// The plan's working copy of a stored status, and the comparison that tells whether a pass
// changed it. The copy is shallow: releases and history records are shared with the stored status
// (a step that changes one replaces it), so a pass that changes nothing compares by identity and
// costs little; only the promotion in flight, which the steps edit in place, is copied.
import { equals } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import {
  type Candidate,
  type ConstraintState,
  EnvironmentPinSchema,
  type EnvironmentStatus,
  type Promotion,
  PromotionSchema,
  type Release,
  ReleaseDecisionSchema,
  ReleaseRecordSchema,
} from "../../gen/skipper/v1/delivery_pb.js";
import { RolloutActorSchema } from "../../gen/skipper/v1/rollout_pb.js";

/** A copy of `s` the plan may change without touching `s`. */
export function workingCopy(s: EnvironmentStatus): EnvironmentStatus {
  const f = s.inFlight;
  return {
    ...s,
    candidates: [...s.candidates],
    history: [...s.history],
    decisions: [...s.decisions],
    inFlight: f && { ...f, verifications: f.verifications.map((v) => ({ ...v })) },
  };
}

type Same<T> = (a: T, b: T) => boolean;
const opt =
  <T>(f: Same<T>): Same<T | undefined> =>
  (a, b) =>
    a === b || (a !== undefined && b !== undefined && f(a, b));
const list =
  <T>(f: Same<T>): Same<T[]> =>
  (a, b) =>
    a === b || (a.length === b.length && a.every((x, i) => x === b[i] || f(x, b[i]!)));

/** Releases are the same when their ids are (the id is a hash of their versions' digests). */
const sameRelease = opt<Release>((a, b) => a.id === b.id && a.versions.length === b.versions.length);
const sameTime = opt<Timestamp>((a, b) => a.seconds === b.seconds && a.nanos === b.nanos);
const sameState: Same<ConstraintState> = (a, b) =>
  a.kind === b.kind &&
  a.subject === b.subject &&
  a.phase === b.phase &&
  a.reason === b.reason &&
  sameTime(a.since, b.since) &&
  sameTime(a.until, b.until);
const sameCandidate: Same<Candidate> = (a, b) =>
  sameRelease(a.release, b.release) && sameTime(a.firstSeen, b.firstSeen) && list(sameState)(a.constraints, b.constraints);
const samePromotion = opt<Promotion>(
  (a, b) =>
    sameRelease(a.release, b.release) &&
    sameRelease(a.from, b.from) &&
    equals(PromotionSchema, { ...a, release: undefined, from: undefined }, { ...b, release: undefined, from: undefined }),
);

/** One comparison per field of the status: the compiler checks that none is missing. */
const FIELDS: { [K in Exclude<keyof EnvironmentStatus, "$typeName" | "$unknown">]-?: Same<EnvironmentStatus[K]> } = {
  current: sameRelease,
  inFlight: samePromotion,
  candidates: list(sameCandidate),
  history: list((a, b) => equals(ReleaseRecordSchema, a, b)),
  pin: opt((a, b) => equals(EnvironmentPinSchema, a, b)),
  hold: opt((a, b) => equals(RolloutActorSchema, a, b)),
  decisions: list((a, b) => equals(ReleaseDecisionSchema, a, b)),
  message: (a, b) => a === b,
  evaluatedAt: sameTime,
  nextEvaluationAt: sameTime,
};

/** True when a pass left the status as stored. */
export function sameStatus(a: EnvironmentStatus, b: EnvironmentStatus): boolean {
  for (const k of Object.keys(FIELDS) as (keyof typeof FIELDS)[]) {
    if (!(FIELDS[k] as Same<unknown>)(a[k], b[k])) return false;
  }
  return true;
}

/** The stored candidate itself when the new judgement equals it (so an unchanged pass shares it). */
export function sameCandidateAs(fresh: Candidate, stored: Candidate | undefined): Candidate {
  return stored && sameCandidate(fresh, stored) ? stored : fresh;
}
