// What operators decide about an environment (DeliveryService): approve or reject a release, veto
// a version, pin, unpin. Pure: each command is a function of the stored status that returns the
// next status and the event to tell, or nothing when it would change nothing (a repeat), or throws
// CONFLICT when it does not fit (approving a release that is no candidate). The promotion loop
// reads these decisions; no spec can carry them.
import { clone, create } from "@bufbuild/protobuf";
import {
  DecisionKind,
  EnvironmentPinSchema,
  EnvironmentStatusSchema,
  ReleaseDecisionSchema,
  ReleaseSchema,
  type EnvironmentStatus,
  type Release,
} from "../../gen/skipper/v1/delivery_pb.js";
import { RolloutActorSchema, type RolloutActor } from "../../gen/skipper/v1/rollout_pb.js";
import type { DeliveryEventType } from "../events/event-recorder.js";
import { conflict } from "../base/errors.js";

/** Decisions kept per environment, newest first. */
export const MAX_DECISIONS = 50;

/** An operator's command on one environment. */
export type EnvironmentCommand =
  | { kind: "approve"; releaseId: string }
  | { kind: "reject"; releaseId: string }
  | { kind: "veto"; versionId: string }
  | { kind: "pin"; releaseId: string }
  | { kind: "unpin" };

/** The command's outcome: the next status and its event, or undefined when nothing changes. */
export interface CommandOutcome {
  status: EnvironmentStatus;
  event: { type: DeliveryEventType; data: Record<string, string> };
}

/** Every release the environment knows: current, in flight, candidates, history (first found wins). */
export function knownReleases(s: EnvironmentStatus): Release[] {
  const all = [s.current, s.inFlight?.release, ...s.candidates.map((c) => c.release), ...s.history.map((h) => h.release), s.pin?.release];
  const seen = new Map<string, Release>();
  for (const r of all) if (r && !seen.has(r.id)) seen.set(r.id, r);
  return [...seen.values()];
}

/** Applies `cmd` by `by` to `status` (not changed in place). */
export function applyCommand(status: EnvironmentStatus, cmd: EnvironmentCommand, by: RolloutActor): CommandOutcome | undefined {
  switch (cmd.kind) {
    case "approve":
    case "reject":
      return decide(status, cmd.releaseId, cmd.kind === "approve" ? DecisionKind.APPROVED : DecisionKind.REJECTED, by);
    case "veto":
      return veto(status, cmd.versionId, by);
    case "pin":
      return pin(status, cmd.releaseId, by);
    case "unpin":
      return unpin(status, by);
  }
}

function decide(status: EnvironmentStatus, releaseId: string, kind: DecisionKind, by: RolloutActor): CommandOutcome | undefined {
  const candidates = status.candidates.map((c) => c.release?.id ?? "");
  if (!candidates.includes(releaseId))
    throw conflict(`release ${releaseId} is not a candidate of this environment: only a waiting release can be approved or rejected`, {
      candidates,
    });
  const last = status.decisions.find((d) => d.releaseId === releaseId && d.kind !== DecisionKind.VETOED);
  if (last?.kind === kind) return undefined;
  const next = withDecision(status, create(ReleaseDecisionSchema, { releaseId, kind, by: clone(RolloutActorSchema, by) }));
  const type: DeliveryEventType = kind === DecisionKind.APPROVED ? "delivery_release_approved" : "delivery_release_rejected";
  return { status: next, event: { type, data: { release_id: releaseId, reason: by.reason, by: by.actor } } };
}

function veto(status: EnvironmentStatus, versionId: string, by: RolloutActor): CommandOutcome | undefined {
  if (status.decisions.some((d) => d.kind === DecisionKind.VETOED && d.versionId === versionId)) return undefined;
  const next = withDecision(
    status,
    create(ReleaseDecisionSchema, { versionId, kind: DecisionKind.VETOED, by: clone(RolloutActorSchema, by) }),
  );
  return { status: next, event: { type: "delivery_version_vetoed", data: { version_id: versionId, reason: by.reason, by: by.actor } } };
}

function pin(status: EnvironmentStatus, releaseId: string, by: RolloutActor): CommandOutcome | undefined {
  if (status.pin?.release?.id === releaseId) return undefined;
  const release = knownReleases(status).find((r) => r.id === releaseId);
  if (!release)
    throw conflict(`release ${releaseId} is not known to this environment: pin its current release, a candidate or one of its history`, {
      releases: knownReleases(status).map((r) => r.id),
    });
  const next = clone(EnvironmentStatusSchema, status);
  next.pin = create(EnvironmentPinSchema, { release: clone(ReleaseSchema, release), pinned: clone(RolloutActorSchema, by) });
  return { status: next, event: { type: "delivery_environment_pinned", data: { release_id: releaseId, reason: by.reason, by: by.actor } } };
}

function unpin(status: EnvironmentStatus, by: RolloutActor): CommandOutcome | undefined {
  if (!status.pin && !status.hold) return undefined;
  const next = clone(EnvironmentStatusSchema, status);
  const was = status.pin?.release?.id ?? "";
  next.pin = undefined;
  next.hold = undefined;
  return {
    status: next,
    event: {
      type: "delivery_environment_unpinned",
      data: { release_id: was, held: status.hold ? "true" : "false", reason: by.reason, by: by.actor },
    },
  };
}

// The newest decision first; the oldest dropped past MAX_DECISIONS.
function withDecision(status: EnvironmentStatus, d: EnvironmentStatus["decisions"][number]): EnvironmentStatus {
  const next = clone(EnvironmentStatusSchema, status);
  next.decisions = [d, ...next.decisions].slice(0, MAX_DECISIONS);
  return next;
}
