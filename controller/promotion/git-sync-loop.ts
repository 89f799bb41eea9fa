// The Git sync loop: the leader's alone. It lists the git sources every few seconds and syncs each
// when it is due: at once when first seen (a new source, or a new leader), then every interval of
// its spec (default 60 s). A sync that fails (its status has a sync_error, or it threw) is tried
// again after its interval plus a backoff that grows with each failure in a row (common/backoff.ts,
// full jitter), so a repository that is down is not fetched ever faster. At most 4 syncs run at
// once; one source's syncs never overlap (git-sync.ts holds its lock). SyncGitSource syncs on
// demand through the same GitSync, on whichever controller answers the call. The mirror of a
// source no longer stored is removed from this controller's disk.
//
//   timer -> list sources -> the due ones, 4 at a time: sync -> ok: again after the interval
//                                                            '-> failed: interval + backoff
import type { Logger } from "../../common/logging/logger.js";
import { fullJitterDelay } from "../../common/backoff.js";
import { mapLimit } from "../../common/map-limit.js";
import { isSkipperError } from "../base/errors.js";
import type { Store } from "../store/store.js";
import { scannedResources } from "../store/each-page.js";
import { type GitSync, gitSourceOf, syncIntervalMs } from "./git-sync.js";

export interface GitSyncLoopDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  sync: Pick<GitSync, "sync" | "mirrors" | "removeMirrorIfGone">;
  /** How often the sources are listed (default 5 s): a new source is synced within this. */
  listEveryMs?: number;
  /** The backoff's jitter, in [0, 1) (default Math.random; tests fix it). */
  random?: () => number;
}

const MAX_AT_ONCE = 4;
const BACKOFF_BASE_MS = 10_000;
const BACKOFF_CAP_MS = 15 * 60_000;

interface Schedule {
  /** When the next sync is due (ms since the epoch). */
  at: number;
  /** Failed syncs in a row. */
  failures: number;
}

/** Syncs every git source on its interval; holds only its schedule. */
export class GitSyncLoop {
  private readonly due = new Map<string, Schedule>();
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private stopped = true;

  constructor(private readonly deps: GitSyncLoopDeps) {}

  /** Starts listing and syncing (the first round now). */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.run();
  }

  /** Stops the timer and waits for the syncs under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.round;
  }

  private run(): void {
    this.round = this.syncDue()
      .catch((e) => this.deps.logger.error({ action: "git_sync", result: "error", err: e }, "could not list the git sources"))
      .finally(() => {
        this.round = undefined;
        if (this.stopped) return;
        this.timer = setTimeout(() => this.run(), this.wakeInMs());
        this.timer.unref();
      });
  }

  // One round: forget sources that are gone (and remove their mirrors), sync those due.
  private async syncDue(): Promise<void> {
    const sources = (await scannedResources(this.deps.store, { resourceType: "git_source" })).filter((r) => gitSourceOf(r));
    const listed = new Set(sources.map((r) => r.id));
    for (const id of this.due.keys()) if (!listed.has(id)) this.due.delete(id);
    for (const id of await this.deps.sync.mirrors()) {
      if (!listed.has(id) && (await this.deps.sync.removeMirrorIfGone(id)))
        this.deps.logger.info(
          { action: "git_sync", result: "ok", metadata: { git_source: id } },
          "removed the mirror of a deleted git source",
        );
    }
    const now = this.deps.now().getTime();
    const due = sources.filter((r) => (this.due.get(r.id)?.at ?? now) <= now);
    await mapLimit(due, MAX_AT_ONCE, async (r) => {
      if (!this.stopped) await this.syncOne(r.id, syncIntervalMs(gitSourceOf(r)!));
    });
  }

  private async syncOne(id: string, intervalMs: number): Promise<void> {
    const failures = this.due.get(id)?.failures ?? 0;
    let ok = false;
    try {
      ok = (await this.deps.sync.sync(id)).ok;
    } catch (e) {
      if (isSkipperError(e) && e.code === "RESOURCE_NOT_FOUND") {
        this.due.delete(id);
        return;
      }
      this.deps.logger.error({ action: "git_sync", result: "error", err: e, metadata: { git_source: id } }, "git sync failed");
    }
    const now = this.deps.now().getTime();
    const backoff = ok ? 0 : fullJitterDelay(failures, BACKOFF_BASE_MS, BACKOFF_CAP_MS, this.deps.random);
    this.due.set(id, { at: now + intervalMs + backoff, failures: ok ? 0 : failures + 1 });
  }

  // Until the next listing, or the next sync due before it.
  private wakeInMs(): number {
    const now = this.deps.now().getTime();
    let wake = this.deps.listEveryMs ?? 5000;
    for (const s of this.due.values()) wake = Math.min(wake, s.at - now);
    return Math.max(100, wake);
  }
}
