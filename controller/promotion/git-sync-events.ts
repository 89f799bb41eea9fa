// What a sync of a Git source tells, decided from the status before it and the status after it,
// and whether the status is worth a write at all. Pure: git-sync.ts writes the status and these
// events in one store write. A source synced every 10 s that finds nothing new writes nothing and
// tells nothing (only next_sync_at and synced_at would differ); a failure is told once, not at
// every retry; drift is told when the set of drifted resources changes to a non-empty one.
import { create, equals, type JsonObject } from "@bufbuild/protobuf";
import { type GitSourceStatus, GitSourceStatusSchema } from "../../gen/skipper/v1/delivery_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { DeliveryEventType } from "../events/event-recorder.js";
import type { GitSyncTarget } from "./git-sync-plan.js";

/** An event a sync's status write tells. */
export interface GitSyncEvent {
  type: DeliveryEventType;
  data: JsonObject;
}

/** What a sync did, beyond the status it leaves. */
export interface GitSyncWork {
  created: number;
  updated: number;
  pruned: GitSyncTarget[];
}

/** The status of a stored git_source (empty when it was never synced). */
export function gitSourceStatusOf(r: Resource | undefined): GitSourceStatus {
  return r?.currentState?.kind.case === "gitSource" ? r.currentState.kind.value : create(GitSourceStatusSchema);
}

/** Whether `next` differs from `previous` in more than when the next sync is due (and, without work, when it ran). */
export function statusWorthWriting(previous: GitSourceStatus, next: GitSourceStatus, work: GitSyncWork): boolean {
  const idle = work.created === 0 && work.updated === 0 && work.pruned.length === 0;
  const strip = (s: GitSourceStatus) =>
    create(GitSourceStatusSchema, { ...s, nextSyncAt: undefined, syncedAt: idle ? undefined : s.syncedAt });
  return !equals(GitSourceStatusSchema, strip(previous), strip(next));
}

/** The events of a sync that left `next` after `previous`. */
export function gitSyncEvents(previous: GitSourceStatus, next: GitSourceStatus, work: GitSyncWork): GitSyncEvent[] {
  const events: GitSyncEvent[] = [];
  const counts = { created: work.created, updated: work.updated, pruned: work.pruned.length };
  if (next.syncError === "") {
    if (next.syncedCommit !== previous.syncedCommit || counts.created + counts.updated + counts.pruned > 0) {
      const orphaned = next.resources.filter((r) => r.orphaned).length;
      const drift = next.resources.filter((r) => r.drift).length;
      events.push({ type: "git_sync_applied", data: { commit: next.syncedCommit, ...counts, drift, orphaned } });
    }
  } else if (next.syncError !== previous.syncError || next.fetchedCommit !== previous.fetchedCommit) {
    events.push({
      type: "git_sync_failed",
      data: { error: next.syncError, commit: next.fetchedCommit, synced_commit: next.syncedCommit, ...counts },
    });
  }
  if (work.pruned.length > 0) {
    events.push({ type: "git_sync_pruned", data: { commit: next.fetchedCommit, resources: work.pruned.map((p) => `${p.type}/${p.id}`) } });
  }
  const drifted = driftOf(next);
  if (drifted.length > 0 && drifted.join(",") !== driftOf(previous).join(",")) {
    events.push({ type: "git_sync_drift_detected", data: { commit: next.fetchedCommit, resources: drifted } });
  }
  return events;
}

// The drifted resources of a status, as "type/id", sorted.
function driftOf(s: GitSourceStatus): string[] {
  return s.resources
    .filter((r) => r.drift)
    .map((r) => `${r.resourceType}/${r.id}`)
    .sort();
}
