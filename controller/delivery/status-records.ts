// The changes a plan makes to the environment's status, each with its action and event: start a
// promotion, end one (a history record), demote, hold. The plan's steps call these; nothing else
// writes `current`, `in_flight`, `history` or `hold`.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  ConstraintPhase,
  type EnvironmentSpec,
  type EnvironmentStatus,
  PromotionPhase,
  PromotionSchema,
  type Release,
  ReleaseOutcome,
  ReleaseRecordSchema,
  VerificationStateSchema,
} from "../../gen/skipper/v1/delivery_pb.js";
import { type RolloutActor, RolloutActorSchema } from "../../gen/skipper/v1/rollout_pb.js";
import type { PlanOut } from "./plan-out.js";

export const MAX_HISTORY = 20;
export const MAX_DECISIONS = 50;
export const MAX_CANDIDATES = 5;

const OUTCOME_EVENT = {
  [ReleaseOutcome.VERIFIED]: "delivery_release_verified",
  [ReleaseOutcome.FAILED]: "delivery_release_failed",
} as const;

/** The controller as the actor of its own decisions. */
export function controllerActor(now: number, reason: string): RolloutActor {
  return create(RolloutActorSchema, { actor: "controller", at: timestampFromMs(now), reason });
}

/** current := release, in flight DEPLOYING; an unfinished promotion is ended REPLACED. */
export function startPromotion(st: EnvironmentStatus, spec: EnvironmentSpec, release: Release, by: RolloutActor, out: PlanOut): void {
  if (st.inFlight) endPromotion(st, ReleaseOutcome.REPLACED, `replaced by ${release.id}`, out, false);
  const from = st.current;
  st.current = release;
  st.inFlight = create(PromotionSchema, {
    release,
    phase: PromotionPhase.DEPLOYING,
    started: by,
    from,
    verifications: spec.verifications.map((v) => create(VerificationStateSchema, { name: v.name, phase: ConstraintPhase.PENDING })),
  });
  out.act({ type: "promote", release, by });
  out.event("delivery_promoted", {
    release_id: release.id,
    from_release_id: from?.id ?? "",
    actor: by.actor,
    reason: by.reason,
  });
}

/** Ends the promotion in flight with `outcome`: its record goes first in the history. */
export function endPromotion(st: EnvironmentStatus, outcome: ReleaseOutcome, reason: string, out: PlanOut, act = true): void {
  const f = st.inFlight;
  if (!f?.release) return;
  st.history.unshift(
    create(ReleaseRecordSchema, {
      release: f.release,
      outcome,
      reason,
      promotedAt: f.started?.at,
      endedAt: timestampFromMs(out.now),
      runningSince: f.runningSince,
    }),
  );
  st.history.length = Math.min(st.history.length, MAX_HISTORY);
  st.inFlight = undefined;
  if (!act) return;
  out.act({ type: "end-promotion", outcome, reason });
  const type = OUTCOME_EVENT[outcome as keyof typeof OUTCOME_EVENT];
  if (type) out.event(type, { release_id: f.release.id, reason });
}

/** current leaves for `to` (a version marked bad, or ROLLBACK): recorded DEMOTED unless it already ended. */
export function demote(st: EnvironmentStatus, spec: EnvironmentSpec, to: Release, because: string, out: PlanOut): void {
  const cur = st.current;
  if (st.inFlight) endPromotion(st, ReleaseOutcome.DEMOTED, because, out, false);
  else if (cur) {
    const top = st.history[0];
    // Records are shared with the stored status: replaced, never changed in place.
    if (top?.release?.id === cur.id && top.outcome === ReleaseOutcome.VERIFIED) {
      st.history[0] = { ...top, outcome: ReleaseOutcome.DEMOTED, reason: because, endedAt: timestampFromMs(out.now) };
    }
  }
  const by = controllerActor(out.now, because);
  out.act({ type: "demote", to, because });
  out.event("delivery_demoted", { release_id: cur?.id ?? "", to_release_id: to.id, reason: because });
  st.current = to;
  st.inFlight = create(PromotionSchema, {
    release: to,
    phase: PromotionPhase.DEPLOYING,
    started: by,
    from: cur,
    verifications: spec.verifications.map((v) => create(VerificationStateSchema, { name: v.name, phase: ConstraintPhase.PENDING })),
  });
}

/** Holds the environment: nothing is promoted until an operator unpins it. */
export function holdBy(st: EnvironmentStatus, by: RolloutActor, out: PlanOut): void {
  st.hold = by;
  out.act({ type: "hold", by });
  out.event("delivery_environment_held", { actor: by.actor, reason: by.reason });
}
