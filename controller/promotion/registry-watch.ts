// One look of a version watch, as pure steps; the caller does the I/O between them:
//
//   planWatch     (artifact, status, recorded versions, listed tags, now) -> the tags whose digest
//                 to ask: new matching tags (newest first, at most maxNew) and a few recorded
//                 tags to check for a move (at most maxRechecks)
//   concludeWatch (the same, the plan, the digests got) -> versions to create, tags that moved,
//                 the artifact's next status and whether it is worth a write
//   failedWatch   (the same, the error's message, the retry delay) -> the status saying so
//
// Which tags are new. The first watch (no watched_at yet) takes the newest initial_versions
// matching tags. A later one takes a matching tag not recorded when it is no semver version, or
// when it is newer than the oldest semver version recorded: versions pruned by keep_versions, or
// left out by the first watch, are not found again; a backport older than every recorded version
// is not taken (post it). With nothing recorded, a later watch is a first one again.
//
// Versions are immutable: a recorded tag whose digest changed is not a new version; it is listed
// in moved_tags (sorted, at most 20) until it is seen back or no longer listed, and reported in
// `moved` once, when it first moves. Recorded tags checked: those that are no semver version first
// (they are the ones that move: "latest", "main"), then the newest versions.
//
// The status is worth a write when anything but its clocks changed, or watched_at is a minute
// old: an idle watch of 1,000 artifacts does not write 1,000 records a minute.
import { create } from "@bufbuild/protobuf";
import { durationMs, timestampDate, timestampFromMs } from "@bufbuild/protobuf/wkt";
import semver from "semver";
import { type ArtifactSpec, type ArtifactStatus, ArtifactStatusSchema } from "../../gen/skipper/v1/delivery_pb.js";
import { initialVersionCount, matchingTags, semverOfTag } from "./tag-filter.js";

export interface WatchInput {
  artifact: ArtifactSpec;
  status: ArtifactStatus | undefined;
  /** Every version recorded of the artifact (posted or discovered): version (tag) -> digest. */
  recorded: ReadonlyMap<string, string>;
  /** The repository's tags, as the registry listed them. */
  listed: readonly string[];
  now: number;
}

export interface WatchLimits {
  /** New tags resolved a watch; the rest wait for the next one. Default 20. */
  maxNew?: number;
  /** Recorded tags checked a watch for a move. Default 5. */
  maxRechecks?: number;
}

export interface WatchPlan {
  firstWatch: boolean;
  /** New matching tags to resolve and record, newest first. */
  newTags: string[];
  /** Recorded tags to resolve again, to see whether they moved. */
  recheck: string[];
  /** New tags beyond maxNew: the next look takes them. */
  deferred: number;
}

export interface WatchOutcome {
  /** Versions to create (origin DISCOVERED), newest first. */
  create: { tag: string; digest: string }[];
  /** Tags that moved since the last look (an event each). */
  moved: string[];
  status: ArtifactStatus;
  /** False: only the clocks changed, and watched_at is under a minute old. */
  write: boolean;
}

const DEFAULT_INTERVAL_MS = 60_000;
const MIN_INTERVAL_MS = 1000;
const WATCHED_AT_EVERY_MS = 60_000;
const MAX_MOVED = 20;

/** Which tags to resolve this look. */
export function planWatch(input: WatchInput, limits: WatchLimits = {}): WatchPlan {
  const matching = matchingTags(input.listed, input.artifact.watch);
  const unrecorded = matching.filter((t) => !input.recorded.has(t));
  const oldest = oldestSemver(input.recorded.keys());
  const firstWatch = !input.status?.watchedAt || input.recorded.size === 0;
  const wanted = firstWatch
    ? matching.slice(0, initialVersionCount(input.artifact.watch)).filter((t) => !input.recorded.has(t))
    : unrecorded.filter((t) => {
        const v = semverOfTag(t);
        return !v || !oldest || semver.gt(v, oldest);
      });
  const maxNew = limits.maxNew ?? 20;
  const listed = new Set(input.listed);
  const recordedListed = [...input.recorded.keys()].filter((t) => listed.has(t));
  const recheck = [
    ...recordedListed.filter((t) => !semverOfTag(t)).sort(),
    ...recordedListed.filter((t) => semverOfTag(t)).sort((a, b) => semver.rcompare(semverOfTag(a)!, semverOfTag(b)!)),
  ].slice(0, limits.maxRechecks ?? 5);
  return { firstWatch, newTags: wanted.slice(0, maxNew), recheck, deferred: Math.max(0, wanted.length - maxNew) };
}

/** What the look found, given the digests of the plan's tags (a tag without one is left for later). */
export function concludeWatch(input: WatchInput, plan: WatchPlan, digests: ReadonlyMap<string, string>): WatchOutcome {
  const created = plan.newTags.flatMap((tag) => (digests.has(tag) ? [{ tag, digest: digests.get(tag)! }] : []));
  const listed = new Set(input.listed);
  const before = new Set(input.status?.movedTags ?? []);
  const movedNow = new Set([...before].filter((t) => input.recorded.has(t) && listed.has(t)));
  for (const tag of plan.recheck) {
    const digest = digests.get(tag);
    if (digest === undefined) continue;
    if (digest !== input.recorded.get(tag)) movedNow.add(tag);
    else movedNow.delete(tag);
  }
  const movedTags = [...movedNow].sort().slice(0, MAX_MOVED);
  const all = [...input.recorded.keys(), ...created.map((c) => c.tag)];
  const status = nextStatus(input, {
    watchError: "",
    latestVersion: latestOf(all, created, input.status?.latestVersion ?? "", input.recorded),
    versions: all.length,
    movedTags,
  });
  return { create: created, moved: movedTags.filter((t) => !before.has(t)), status, write: worthWriting(input.status, status) };
}

/** The status of a look that failed: its (already redacted) message, and when to look again. */
export function failedWatch(input: WatchInput, message: string, retryInMs: number): WatchOutcome {
  const previous = input.status;
  const status = nextStatus(input, {
    watchError: message,
    latestVersion: previous?.latestVersion ?? "",
    versions: input.recorded.size,
    movedTags: previous?.movedTags ?? [],
  });
  status.watchedAt = previous?.watchedAt;
  status.nextWatchAt = timestampFromMs(input.now + retryInMs);
  return { create: [], moved: [], status, write: worthWriting(previous, status) };
}

/** When the next look is due after a successful one: the watch's interval (default 60 s, at least 1 s). */
export function watchIntervalMs(artifact: ArtifactSpec): number {
  const interval = artifact.watch?.interval;
  return interval ? Math.max(MIN_INTERVAL_MS, durationMs(interval)) : DEFAULT_INTERVAL_MS;
}

function nextStatus(
  input: WatchInput,
  fields: Pick<ArtifactStatus, "watchError" | "latestVersion" | "versions" | "movedTags">,
): ArtifactStatus {
  return create(ArtifactStatusSchema, {
    ...fields,
    watchedAt: timestampFromMs(input.now),
    nextWatchAt: timestampFromMs(input.now + watchIntervalMs(input.artifact)),
  });
}

// Anything but the clocks changed, or watched_at is a minute old (or was never written).
function worthWriting(before: ArtifactStatus | undefined, after: ArtifactStatus): boolean {
  if (!before) return true;
  const same =
    before.watchError === after.watchError &&
    before.latestVersion === after.latestVersion &&
    before.versions === after.versions &&
    before.movedTags.join("\n") === after.movedTags.join("\n");
  if (!same) return true;
  if (!before.watchedAt) return after.watchedAt !== undefined;
  if (!after.watchedAt) return false;
  return timestampDate(after.watchedAt).getTime() - timestampDate(before.watchedAt).getTime() >= WATCHED_AT_EVERY_MS;
}

// The newest version: the highest semver one recorded or created; with none, the newest created
// this look, else what the status said while it is still recorded.
function latestOf(all: string[], created: { tag: string }[], previous: string, recorded: ReadonlyMap<string, string>): string {
  let best = "";
  for (const tag of all) {
    const v = semverOfTag(tag);
    if (v && (!best || semver.gt(v, semverOfTag(best)!))) best = tag;
  }
  if (best) return best;
  if (created.length > 0) return created[0]!.tag;
  return recorded.has(previous) ? previous : "";
}

function oldestSemver(tags: Iterable<string>): string | undefined {
  let oldest: string | undefined;
  for (const tag of tags) {
    const v = semverOfTag(tag);
    if (v && (!oldest || semver.lt(v, oldest))) oldest = v;
  }
  return oldest;
}
