// What one sync of a Git source does, decided without side effects: given the manifests at the
// fetched commit, which of their files changed since the last commit applied whole, and what the
// store holds, the plan lists the writes (in API write order), the drift (a stored resource that
// differs from a document whose file did not change: listed, never reverted: the store is the
// source of truth and Git one writer among others), the orphans (resources this source wrote whose
// document is gone; with prune on they are to be deleted instead) and the source's next status.
// The executor (the lead's git-sync.ts) runs the writes through resources/resource-changes.ts as
// the controller, stops at the first refused one and records statusAfterFailure; synced_commit
// advances only when every write and prune went through.
//
// A tree that cannot be applied whole is applied not at all: a document that does not parse, a
// kind the controller writes, a git_source (a source cannot rewrite sources) or a resource another
// source holds stops the sync before any write or prune (a document that fails to parse must not
// read as "gone" and be pruned). sync_error then names it: "apps/web.yaml#2: field: problem".
import { clone, create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { GitSourceSpec, GitSourceStatus, GitSyncedResource } from "../../gen/skipper/v1/delivery_pb.js";
import { GitSourceStatusSchema, GitSyncedResourceSchema } from "../../gen/skipper/v1/delivery_pb.js";
import { MetadataSchema, type Resource, ResourceSchema, ResourceSpecSchema } from "../../gen/skipper/v1/resource_pb.js";
import { carriesValues, documentChanges, type FieldChange } from "../../common/desired-diff.js";
import { isManifestError, type Manifest, manifestErrorLine, parseManifestDocuments } from "../../common/manifest-documents.js";
import { API_WRITE_ORDER, type ResourceType } from "../../common/resource-kinds.js";

/** The annotation naming the Git source a resource was written from (its id). */
export const GIT_SOURCE_ANNOTATION = "skipper.dev/git-source";
/** The annotation naming the document a resource was written from ("apps/web.yaml#2"). */
export const GIT_PATH_ANNOTATION = "skipper.dev/git-path";
/** A source's interval when its spec sets none. */
export const DEFAULT_SYNC_INTERVAL_MS = 60_000;

/** A manifest file at the fetched commit, as the mirror lists and reads it. */
export interface SourceFile {
  path: string;
  text: string;
}

/** The documents of a source's files, in API write order; or why they cannot be applied. */
export interface SourceDocuments {
  documents: Manifest[];
  /** "file#n: field: problem" of the first bad document; `documents` is then empty. */
  error?: string;
}

/** What the plan is given. */
export interface GitSyncInput {
  sourceId: string;
  spec: GitSourceSpec;
  /** The stored status (absent: never synced). */
  status: GitSourceStatus | undefined;
  /** The commit fetched now. */
  commit: string;
  documents: SourceDocuments;
  /** Files changed since status.synced_commit; "all" at the first sync, on a reapply, or when that commit is gone. */
  changed: ReadonlySet<string> | "all";
  /** The stored (not deleted) resources annotated with this source. */
  owned: readonly Resource[];
  /** The stored resources the documents name, by "type/id"; absent: not stored (or deleted). */
  stored: ReadonlyMap<string, Resource>;
  now: Date;
}

/** One write: `resource` carries the document's desired state, its labels when given, and its annotations with the source's two. */
export interface GitSyncWrite {
  type: ResourceType;
  id: string;
  /** The document: "apps/web.yaml#2". */
  path: string;
  action: "create" | "update";
  resource: Resource;
  /** Update mask paths for an update: desired_state, labels when the document gives them, annotations. */
  updatePaths: string[];
  /** What it changes in the stored resource (redacted; empty for a create or for a secret's values only). */
  changes: FieldChange[];
}

/** A resource this source names or wrote, with where its document is (was). */
export interface GitSyncTarget {
  type: ResourceType;
  id: string;
  path: string;
}

/** A stored resource that differs from its unchanged document. */
export interface GitDrift extends GitSyncTarget {
  /** Not stored at all (deleted through the API). */
  missing: boolean;
  /** What writing the document would change in the stored resource (redacted). */
  changes: FieldChange[];
}

export interface GitSyncPlan {
  writes: GitSyncWrite[];
  drift: GitDrift[];
  /** Gone from the tree, prune off: kept, listed orphaned. */
  orphans: GitSyncTarget[];
  /** Gone from the tree, prune on: to delete, dependents first (reverse API write order). */
  prunes: GitSyncTarget[];
  /** The status once every write and prune went through (or, with `error`, the status to record now). */
  status: GitSourceStatus;
  /** Why nothing is written: the sync_error in `status`. */
  error?: string;
}

const key = (type: string, id: string) => `${type}/${id}`;

/** The documents of `files` (sorted by path), checked as `skipper apply` checks them, plus what a synced tree may not hold. */
export function parseSourceDocuments(files: readonly SourceFile[]): SourceDocuments {
  let documents: Manifest[];
  try {
    documents = parseManifestDocuments(files.map((f) => ({ source: f.path, text: f.text })));
  } catch (e) {
    if (isManifestError(e)) return { documents: [], error: manifestErrorLine(e) };
    throw e;
  }
  const source = documents.find((m) => m.type === "git_source");
  if (source) {
    return {
      documents: [],
      error: `${source.source}: resource_type: a git_source cannot be synced from Git (a source would rewrite sources)`,
    };
  }
  return { documents };
}

/**
 * The files a sync treats as changed: every file at the first sync, on a reapply, or when the
 * last commit applied whole is no longer in the mirror (`diff` undefined, as GitMirror.changedSince
 * answers then); else the files that differ since it.
 */
export function changedFiles(
  status: GitSourceStatus | undefined,
  reapply: boolean,
  diff: readonly string[] | undefined,
): ReadonlySet<string> | "all" {
  if (reapply || !status?.syncedCommit || diff === undefined) return "all";
  return new Set(diff);
}

/** The file a document's source names ("apps/web.yaml#2" -> "apps/web.yaml"). */
export function fileOf(path: string): string {
  return path.replace(/#\d+$/, "");
}

/** The sync's writes, drift, orphans or prunes, and the next status. Pure. */
export function planGitSync(input: GitSyncInput): GitSyncPlan {
  const error = input.documents.error ?? claimedElsewhere(input);
  if (error) {
    return { writes: [], drift: [], orphans: [], prunes: [], status: nextStatus(input, input.status?.resources ?? [], error), error };
  }
  const writes: GitSyncWrite[] = [];
  const later: GitSyncWrite[] = [];
  const drift: GitDrift[] = [];
  const listed: GitSyncedResource[] = [];
  const isChanged = (m: Manifest) => input.changed === "all" || input.changed.has(fileOf(m.source));
  const creates = new Set(
    input.documents.documents.filter((m) => isChanged(m) && !input.stored.has(key(m.type, m.id))).map((m) => key(m.type, m.id)),
  );
  for (const m of input.documents.documents) {
    const stored = input.stored.get(key(m.type, m.id));
    const intended = withSourceAnnotations(m, stored, input.sourceId);
    const changed = isChanged(m);
    const changes = stored ? documentChanges(intended, stored) : [];
    const drifted = !changed && (!stored || changes.length > 0);
    if (drifted) drift.push({ type: m.type, id: m.id, path: m.source, missing: !stored, changes });
    else if (changed && !stored) {
      const bare = namedSecrets(m).some((id) => creates.has(key("secret", id)));
      writes.push(writeOf(intended, "create", [], bare));
      if (bare) later.push(writeOf(intended, "update", []));
    } else if (changed && (changes.length > 0 || carriesValues(m))) writes.push(writeOf(intended, "update", changes));
    listed.push(create(GitSyncedResourceSchema, { resourceType: m.type, id: m.id, path: m.source, drift: drifted }));
  }
  const named = new Set(input.documents.documents.map((m) => key(m.type, m.id)));
  const gone = input.owned
    .filter((r) => !named.has(key(r.resourceType, r.id)) && (API_WRITE_ORDER as readonly string[]).includes(r.resourceType))
    .map((r) => ({ type: r.resourceType as ResourceType, id: r.id, path: r.metadata?.annotations[GIT_PATH_ANNOTATION] ?? "" }))
    .sort((a, b) => API_WRITE_ORDER.indexOf(b.type) - API_WRITE_ORDER.indexOf(a.type) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const orphans = input.spec.prune ? [] : gone;
  const prunes = input.spec.prune ? gone : [];
  listed.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  for (const o of orphans) listed.push(create(GitSyncedResourceSchema, { resourceType: o.type, id: o.id, path: o.path, orphaned: true }));
  return { writes: [...writes, ...later], drift, orphans, prunes, status: nextStatus(input, listed, undefined) };
}

/** The status to record when the executor stopped at `path` ("apps/web.yaml#2", or a pruned resource's) with `message`: synced_commit stays. */
export function statusAfterFailure(
  plan: GitSyncPlan,
  previous: GitSourceStatus | undefined,
  path: string,
  message: string,
): GitSourceStatus {
  return create(GitSourceStatusSchema, {
    ...plan.status,
    syncedCommit: previous?.syncedCommit ?? "",
    syncedAt: previous?.syncedAt,
    syncError: `${path}: ${message}`,
  });
}

// A document naming a resource another source wrote: two sources would overwrite each other.
function claimedElsewhere(input: GitSyncInput): string | undefined {
  for (const m of input.documents.documents) {
    const holder = input.stored.get(key(m.type, m.id))?.metadata?.annotations[GIT_SOURCE_ANNOTATION];
    if (holder && holder !== input.sourceId) {
      return `${m.source}: id: ${m.type}/${m.id} is synced from git source ${holder} (remove it there, or its ${GIT_SOURCE_ANNOTATION} annotation, first)`;
    }
  }
  return undefined;
}

// The document as written: its annotations (or, when it gives none, the stored ones) with the
// source's two, so a write always records where it came from.
function withSourceAnnotations(m: Manifest, stored: Resource | undefined, sourceId: string): Manifest {
  const base = m.annotationsGiven ? (m.resource.metadata?.annotations ?? {}) : (stored?.metadata?.annotations ?? {});
  const annotations = { ...base, [GIT_SOURCE_ANNOTATION]: sourceId, [GIT_PATH_ANNOTATION]: m.source };
  const resource = clone(ResourceSchema, m.resource);
  resource.metadata = create(MetadataSchema, { labels: { ...(m.resource.metadata?.labels ?? {}) }, annotations });
  return { ...m, resource, annotationsGiven: true };
}

function writeOf(m: Manifest, action: "create" | "update", changes: FieldChange[], bare = false): GitSyncWrite {
  const resource = bare ? bareTenant(m.resource) : m.resource;
  const updatePaths = action === "update" ? ["desired_state", ...(m.labelsGiven ? ["labels"] : []), "annotations"] : [];
  return { type: m.type, id: m.id, path: m.source, action, resource, updatePaths, changes };
}

// A new tenant whose own compose file names secrets created in the same sync is created bare first
// (the secrets name their tenant) and given its spec once they exist, as `skipper apply` does.
function namedSecrets(m: Manifest): string[] {
  if (m.resource.desiredState?.kind.case !== "tenant") return [];
  const compose = m.resource.desiredState.kind.value.compose;
  return [...Object.values(compose?.secretEnv ?? {}), ...Object.values(compose?.secretFiles ?? {})].map((ref) => ref.secretId);
}

function bareTenant(r: Resource): Resource {
  const displayName = r.desiredState?.kind.case === "tenant" ? r.desiredState.kind.value.displayName : "";
  const bare = clone(ResourceSchema, r);
  bare.desiredState = create(ResourceSpecSchema, { kind: { case: "tenant", value: { displayName } } });
  return bare;
}

function nextStatus(input: GitSyncInput, resources: GitSyncedResource[], error: string | undefined): GitSourceStatus {
  const interval = input.spec.interval;
  const ms = interval ? Number(interval.seconds) * 1000 + Math.floor(interval.nanos / 1e6) : 0;
  const previous = input.status;
  return create(GitSourceStatusSchema, {
    syncedCommit: error ? (previous?.syncedCommit ?? "") : input.commit,
    syncedAt: error ? previous?.syncedAt : timestampFromDate(input.now),
    syncError: error ?? "",
    resources,
    nextSyncAt: timestampFromDate(new Date(input.now.getTime() + (ms > 0 ? ms : DEFAULT_SYNC_INTERVAL_MS))),
    fetchedCommit: input.commit,
  });
}
