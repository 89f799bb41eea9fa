// What every constraint evaluator reads, and the small helpers that build its judgement. An
// evaluator is `(candidate, ctx) => ConstraintState`: pure, with `ctx.now` its only clock. Every
// PENDING or FAILED state carries a sentence saying what it waits for or why, naming who and when
// where an operator acted.
import { create } from "@bufbuild/protobuf";
import { type Timestamp, timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import {
  type ConstraintKind,
  ConstraintPhase,
  type ConstraintState,
  ConstraintStateSchema,
  type EnvironmentSpec,
  type EnvironmentStatus,
  type Release,
  type ReleaseVersion,
} from "../../../gen/skipper/v1/delivery_pb.js";
import type { RolloutActor } from "../../../gen/skipper/v1/rollout_pb.js";
import type { EnvDesired, EnvObserved, VersionView } from "../plan-types.js";

export interface ConstraintContext {
  envId: string;
  spec: EnvironmentSpec;
  /** The environment's status as the plan has it so far (pin, hold, decisions, history, in flight). */
  status: EnvironmentStatus;
  observed: EnvObserved;
  now: number;
  /** The recorded version of an artifact with this digest, if any. */
  versionOf(artifactId: string, digest: string): VersionView | undefined;
}

/** The context of one plan: `st` is the status the plan is changing. */
export function makeContext(d: EnvDesired, o: EnvObserved, st: EnvironmentStatus, now: number): ConstraintContext {
  return {
    envId: d.env.id,
    spec: d.env.spec,
    status: st,
    observed: o,
    now,
    versionOf: (artifactId, digest) => o.versions.get(artifactId)?.find((v) => v.digest === digest),
  };
}

/** A constraint evaluator: one candidate release in, its judgement out. */
export type Evaluator = (candidate: Release, ctx: ConstraintContext) => ConstraintState;

export function passed(kind: ConstraintKind, subject = ""): ConstraintState {
  return create(ConstraintStateSchema, { kind, subject, phase: ConstraintPhase.PASSED });
}

export function pending(kind: ConstraintKind, subject: string, reason: string, until?: number): ConstraintState {
  const s = create(ConstraintStateSchema, { kind, subject, phase: ConstraintPhase.PENDING, reason });
  if (until !== undefined) s.until = timestampFromMs(until);
  return s;
}

export function failed(kind: ConstraintKind, subject: string, reason: string): ConstraintState {
  return create(ConstraintStateSchema, { kind, subject, phase: ConstraintPhase.FAILED, reason });
}

/** An instant as ISO text ("unknown time" for none). */
export function when(t: Timestamp | number | undefined): string {
  if (t === undefined) return "an unknown time";
  return new Date(typeof t === "number" ? t : timestampMs(t)).toISOString();
}

/** "api_key:ops at 2026-…Z (reason)". */
export function byWhom(a: RolloutActor | undefined): string {
  if (!a) return "an unknown actor";
  return `${a.actor || "an unknown actor"} at ${when(a.at)}${a.reason ? ` (${a.reason})` : ""}`;
}

/** "web 1.1.0". */
export function versionText(v: Pick<ReleaseVersion, "artifactId" | "version">): string {
  return `${v.artifactId} ${v.version}`;
}

/** "12m", "1h5m", "40s": a remaining time for reasons. */
export function span(ms: number): string {
  const s = Math.max(0, Math.ceil(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${s % 60 ? `${s % 60}s` : ""}`;
  return `${Math.floor(m / 60)}h${m % 60 ? `${m % 60}m` : ""}`;
}
