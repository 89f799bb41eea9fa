// What a sync tells and whether its status is written, as a table: the status before, the status
// after and the work done; the exact events out.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { type GitSourceStatus, GitSourceStatusSchema, GitSyncedResourceSchema } from "../../gen/skipper/v1/delivery_pb.js";
import { gitSyncEvents, type GitSyncWork, statusWorthWriting } from "./git-sync-events.js";

const A = "a".repeat(40);
const B = "b".repeat(40);
const at = (s: string) => timestampFromDate(new Date(`2026-11-29T06:00:${s}Z`));
interface StatusInit {
  syncedCommit?: string;
  fetchedCommit?: string;
  syncError?: string;
  syncedAt?: GitSourceStatus["syncedAt"];
  nextSyncAt?: GitSourceStatus["nextSyncAt"];
  drift?: string[];
  orphaned?: string[];
}
const status = ({ drift, orphaned, ...s }: StatusInit = {}) =>
  create(GitSourceStatusSchema, {
    syncedCommit: A,
    fetchedCommit: A,
    syncedAt: at("00"),
    nextSyncAt: at("10"),
    ...s,
    resources: [
      create(GitSyncedResourceSchema, { resourceType: "tenant", id: "shop", path: "t.yaml", drift: drift?.includes("tenant/shop") }),
      create(GitSyncedResourceSchema, { resourceType: "service", id: "web", path: "s.yaml", drift: drift?.includes("service/web") }),
      ...(orphaned ?? []).map((id) => create(GitSyncedResourceSchema, { resourceType: "service", id, path: "gone.yaml", orphaned: true })),
    ],
  });
const idle: GitSyncWork = { created: 0, updated: 0, pruned: [] };
const types = (previous: GitSourceStatus, next: GitSourceStatus, work = idle) => gitSyncEvents(previous, next, work).map((e) => e.type);

describe("git sync events and status writes", () => {
  it("a sync that finds nothing new writes nothing and tells nothing (only its times moved)", () => {
    const next = status({ syncedAt: at("20"), nextSyncAt: at("30") });
    expect(statusWorthWriting(status(), next, idle)).toBe(false);
    expect(types(status(), next)).toEqual([]);
  });

  it("a new commit applied is written and told with its counts, drift and orphans", () => {
    const next = status({ syncedCommit: B, fetchedCommit: B, syncedAt: at("20"), orphaned: ["old"] });
    const work = { created: 1, updated: 2, pruned: [] };
    expect(statusWorthWriting(status(), next, work)).toBe(true);
    expect(gitSyncEvents(status(), next, work)).toEqual([
      { type: "git_sync_applied", data: { commit: B, created: 1, updated: 2, pruned: 0, drift: 0, orphaned: 1 } },
    ]);
  });

  it("writes on the same commit (a reapply) are told; synced_at moves with them", () => {
    const next = status({ syncedAt: at("20") });
    const work = { created: 0, updated: 1, pruned: [] };
    expect(statusWorthWriting(status(), next, work)).toBe(true);
    expect(types(status(), next, work)).toEqual(["git_sync_applied"]);
  });

  it("a failure is told once: the same error on the same commit again is neither told nor written", () => {
    const failed = status({ fetchedCommit: B, syncError: "x.yaml#2: id: bad" });
    expect(types(status(), failed)).toEqual(["git_sync_failed"]);
    expect(gitSyncEvents(status(), failed, idle)[0]!.data).toMatchObject({ error: "x.yaml#2: id: bad", commit: B, synced_commit: A });
    const again = status({ fetchedCommit: B, syncError: "x.yaml#2: id: bad", nextSyncAt: at("40") });
    expect(types(failed, again)).toEqual([]);
    expect(statusWorthWriting(failed, again, idle)).toBe(false);
    // Another commit failing the same way is a new failure.
    expect(types(failed, status({ fetchedCommit: "c".repeat(40), syncError: "x.yaml#2: id: bad" }))).toEqual(["git_sync_failed"]);
  });

  it("drift is told when its set changes to a non-empty one, not while it stays or when it clears", () => {
    const drifted = status({ drift: ["tenant/shop"] });
    expect(gitSyncEvents(status(), drifted, idle)).toEqual([
      { type: "git_sync_drift_detected", data: { commit: A, resources: ["tenant/shop"] } },
    ]);
    expect(statusWorthWriting(status(), drifted, idle)).toBe(true);
    expect(types(drifted, status({ drift: ["tenant/shop"], nextSyncAt: at("50") }))).toEqual([]);
    expect(types(drifted, status({ drift: ["service/web", "tenant/shop"] }))).toEqual(["git_sync_drift_detected"]);
    expect(types(drifted, status())).toEqual([]);
    expect(statusWorthWriting(drifted, status(), idle)).toBe(true);
  });

  it("prunes are told with the resources deleted, beside the applied event", () => {
    const work = { created: 0, updated: 0, pruned: [{ type: "service" as const, id: "old", path: "gone.yaml" }] };
    const next = status({ syncedCommit: B, fetchedCommit: B });
    expect(gitSyncEvents(status(), next, work)).toEqual([
      { type: "git_sync_applied", data: { commit: B, created: 0, updated: 0, pruned: 1, drift: 0, orphaned: 0 } },
      { type: "git_sync_pruned", data: { commit: B, resources: ["service/old"] } },
    ]);
  });
});
