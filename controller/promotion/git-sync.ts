// Git sync's executor: one sync of one source. It fetches the source's branch into the source's
// bare mirror (<data-dir>/git/<id>.git), reads the manifests of the commit, plans
// (git-sync-plan.ts: pure) and runs the plan's writes in order through resources/resource-changes.ts
// as the controller, the same rules and events as a caller's writes (the reconciler hears of each).
// With prune on it then deletes, dependents first, what the source wrote and no longer holds. The
// first refused write or prune stops the sync: what was written before it stays (each write is
// whole), synced_commit stays the last commit applied whole, and sync_error names the document.
//
// The source's status (GitSourceStatus in current_state) is written here alone, with the sync's
// events in the same store write (git-sync-events.ts), and only when more than its next_sync_at
// changed. One sync of a source runs at a time across every controller on the store (the shared
// lock keyed by the source); each controller keeps its own mirror.
//
//   lock -> read source -> fetch, list, read, diff -> plan -> writes -> prunes -> status + events
//                            '-> mirror error: sync_error, nothing written
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { v4 as uuidv4 } from "uuid";
import { type GitSourceSpec, type GitSourceStatus, GitSourceStatusSchema } from "../../gen/skipper/v1/delivery_pb.js";
import { type Resource, ResourceStatusSchema } from "../../gen/skipper/v1/resource_pb.js";
import {
  CreateResourceRequestSchema,
  DeleteResourceRequestSchema,
  UpdateResourceRequestSchema,
} from "../../gen/skipper/v1/resource_service_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import { API_WRITE_ORDER } from "../../common/resource-kinds.js";
import { CONTROLLER_ACTOR } from "../auth/actor.js";
import type { Principal, TenantAccess, Trace } from "../base/context.js";
import { forbidden, isSkipperError, notFound } from "../base/errors.js";
import { buildEvent } from "../events/event-recorder.js";
import { type ChangeDeps, createResource, deleteResource, updateResource } from "../resources/resource-changes.js";
import { checkConfinement } from "../resources/tenant-confinement.js";
import type { Store } from "../store/store.js";
import { scannedResources } from "../store/each-page.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";
import { GitMirror, isGitMirrorError } from "./git-mirror.js";
import { type GitSyncEvent, gitSourceStatusOf, gitSyncEvents, type GitSyncWork, statusWorthWriting } from "./git-sync-events.js";
import {
  changedFiles,
  DEFAULT_SYNC_INTERVAL_MS,
  GIT_SOURCE_ANNOTATION,
  type GitSyncPlan,
  type GitSyncWrite,
  parseSourceDocuments,
  planGitSync,
  statusAfterFailure,
} from "./git-sync-plan.js";

export interface GitSyncDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  /** The controller's data directory: mirrors live under <dataDir>/git/. */
  dataDir: string;
  /** Allow file:// URLs (--allow-git-file-urls); otherwise the mirror refuses them. */
  allowFileUrls: boolean;
  /** Serialises per key across every controller on the store. */
  locks: { run<T>(key: string, fn: () => Promise<T>): Promise<T> };
  keyRing: SecretKeyRing;
  /** Told of every resource a sync wrote (the reconciler's triggers). */
  changed: (r: Resource) => void;
  /** The nodes a resource's data is on (never used: a prune does not delete data). */
  dataNodes: (r: Resource) => Promise<string[]>;
  /** Per git call (default 60 s). */
  gitTimeoutMs?: number;
}

/** How a sync ended: the source as stored after it, and whether it applied the commit whole. */
export interface GitSyncOutcome {
  source: Resource;
  ok: boolean;
}

/** The spec of a stored, live git_source. */
export function gitSourceOf(r: Resource | undefined): GitSourceSpec | undefined {
  return r?.desiredState?.kind.case === "gitSource" && !r.deletion ? r.desiredState.kind.value : undefined;
}

/** A source's interval in milliseconds (default 60 s). */
export function syncIntervalMs(spec: GitSourceSpec): number {
  const d = spec.interval;
  const ms = d ? Number(d.seconds) * 1000 + Math.floor(d.nanos / 1e6) : 0;
  return ms > 0 ? ms : DEFAULT_SYNC_INTERVAL_MS;
}

// The sync writes as a caller whose scope is every tenant, as whoever may write a git_source, but
// without an admin's rights: a tenant's policy (an admin's) and nodes are not Git's to change.
const SYNC_SCOPE: TenantAccess = { unrestricted: true, allows: async () => true, require: async () => undefined };
const SYNC_PRINCIPAL: Principal = { kind: "anonymous" };

/** Runs syncs; holds no state but the mirrors on disk (removed by the loop once their source is gone). */
export class GitSync {
  constructor(private readonly deps: GitSyncDeps) {}

  /** Syncs source `id` now (after a sync of it under way); RESOURCE_NOT_FOUND when it is not stored. */
  async sync(id: string, opts: { reapply?: boolean; trace?: Trace } = {}): Promise<GitSyncOutcome> {
    return this.deps.locks.run(`git-source:${id}`, async () => {
      const trace = syncTrace(opts.trace);
      const source = await this.deps.store.getResource("git_source", id);
      const spec = gitSourceOf(source);
      if (!source || !spec) throw notFound("git_source", id);
      const previous = gitSourceStatusOf(source);
      const { status, work } = await this.attempt(id, spec, previous, opts.reapply ?? false, trace);
      const events = gitSyncEvents(previous, status, work);
      const stored = statusWorthWriting(previous, status, work) ? await this.save(id, status, events, trace) : source;
      this.deps.logger.info(
        {
          action: "git_sync",
          result: status.syncError ? "error" : "ok",
          metadata: { git_source: id, commit: status.fetchedCommit, created: work.created, updated: work.updated },
        },
        status.syncError ? `git sync stopped: ${status.syncError}` : "git source synced",
      );
      return { source: stored, ok: status.syncError === "" };
    });
  }

  /** The ids of the mirrors on this controller's disk. */
  async mirrors(): Promise<string[]> {
    const names = await readdir(join(this.deps.dataDir, "git")).catch(() => [] as string[]);
    return names.filter((n) => n.endsWith(".git")).map((n) => n.slice(0, -".git".length));
  }

  /** Removes the mirror of source `id` when no such source is stored (any more); true when it did. */
  async removeMirrorIfGone(id: string): Promise<boolean> {
    return this.deps.locks.run(`git-source:${id}`, async () => {
      if (gitSourceOf(await this.deps.store.getResource("git_source", id))) return false;
      await rm(this.mirrorDir(id), { recursive: true, force: true });
      return true;
    });
  }

  private mirrorDir(id: string): string {
    return join(this.deps.dataDir, "git", `${id}.git`);
  }

  // Fetch, plan, write, prune: the status to record and what was done. A refusal (of the mirror,
  // the plan or a write) is a status with sync_error; anything else (the store failing) throws.
  private async attempt(
    id: string,
    spec: GitSourceSpec,
    previous: GitSourceStatus,
    reapply: boolean,
    trace: Trace,
  ): Promise<{ status: GitSourceStatus; work: GitSyncWork }> {
    const work: GitSyncWork = { created: 0, updated: 0, pruned: [] };
    let plan: GitSyncPlan;
    try {
      plan = await this.plan(id, spec, previous, reapply);
    } catch (e) {
      if (!isGitMirrorError(e)) throw e;
      return { status: this.fetchFailed(spec, previous, e.message), work };
    }
    if (plan.error) return { status: plan.status, work };
    const deps = this.changeDeps();
    for (const w of plan.writes) {
      try {
        await this.write(deps, w, trace);
      } catch (e) {
        if (!isSkipperError(e)) throw e;
        return { status: statusAfterFailure(plan, previous, w.path, e.message), work };
      }
      // A tenant created bare and completed later (git-sync-plan.ts) counts once, as created.
      if (w.action === "create") work.created++;
      else if (!plan.writes.some((o) => o.action === "create" && o.type === w.type && o.id === w.id)) work.updated++;
    }
    for (const p of plan.prunes) {
      try {
        // DeleteResource's rules: no cascade, no data deleted; one still referenced is refused.
        await deleteResource(deps, create(DeleteResourceRequestSchema, { resourceType: p.type, id: p.id }), trace, this.deps.logger);
      } catch (e) {
        if (!isSkipperError(e)) throw e;
        return { status: statusAfterFailure(plan, previous, p.path || `${p.type}/${p.id}`, `cannot prune: ${e.message}`), work };
      }
      work.pruned.push(p);
    }
    return { status: plan.status, work };
  }

  // The plan of the branch's newest commit against what the store holds.
  private async plan(id: string, spec: GitSourceSpec, previous: GitSourceStatus, reapply: boolean): Promise<GitSyncPlan> {
    const { store } = this.deps;
    const mirror = new GitMirror({
      dir: this.mirrorDir(id),
      allowFileUrls: this.deps.allowFileUrls,
      timeoutMs: this.deps.gitTimeoutMs,
    });
    const commit = await mirror.fetch(spec.url, spec.branch || "main");
    const files = await mirror.files(commit, spec.path);
    const texts = await mirror.read(files.map((f) => f.blob));
    const documents = parseSourceDocuments(files.map((f) => ({ path: f.path, text: texts.get(f.blob) ?? "" })));
    const diff = previous.syncedCommit ? await mirror.changedSince(previous.syncedCommit, commit, spec.path) : undefined;
    const stored = new Map<string, Resource>();
    for (const m of documents.documents) {
      const r = await store.getResource(m.type, m.id);
      if (r && !r.deletion) stored.set(`${m.type}/${m.id}`, r);
    }
    const owned: Resource[] = [];
    for (const type of API_WRITE_ORDER) {
      for (const r of await scannedResources(store, { resourceType: type })) {
        if (!r.deletion && r.metadata?.annotations[GIT_SOURCE_ANNOTATION] === id) owned.push(r);
      }
    }
    return planGitSync({
      sourceId: id,
      spec,
      status: previous,
      commit,
      documents,
      changed: changedFiles(previous, reapply, diff),
      owned,
      stored,
      now: this.deps.now(),
    });
  }

  // The status after a fetch (or read) that failed: as it was, with the error and the next try.
  private fetchFailed(spec: GitSourceSpec, previous: GitSourceStatus, message: string): GitSourceStatus {
    return create(GitSourceStatusSchema, {
      ...previous,
      syncError: message,
      nextSyncAt: timestampFromDate(new Date(this.deps.now().getTime() + syncIntervalMs(spec))),
    });
  }

  private async write(deps: ChangeDeps, w: GitSyncWrite, trace: Trace): Promise<void> {
    const run = () =>
      w.action === "create"
        ? createResource(deps, create(CreateResourceRequestSchema, { resourceType: w.type, resource: w.resource }), trace, this.deps.logger)
        : updateResource(
            deps,
            create(UpdateResourceRequestSchema, {
              resourceType: w.type,
              id: w.id,
              desiredState: w.resource.desiredState,
              labels: w.resource.metadata?.labels ?? {},
              annotations: w.resource.metadata?.annotations ?? {},
              updateMask: { paths: w.updatePaths },
            }),
            trace,
          );
    // A secret's values are sealed with the ring's newest key: not across a key rotation (as the API).
    await (w.type === "secret" ? this.deps.locks.run("secret-keys", run) : run());
  }

  private changeDeps(): ChangeDeps {
    const { store, now, keyRing, changed, dataNodes } = this.deps;
    return {
      store,
      now,
      keyRing,
      changed,
      dataNodes,
      may: async (type) => {
        if (type === "node") throw forbidden("nodes are administered with the admin permission; a Git source does not write them");
      },
      confine: (before, next) => checkConfinement({ principal: SYNC_PRINCIPAL, tenants: SYNC_SCOPE }, store, before, next),
    };
  }

  // The status and its events, in one write; the source as stored after it.
  private async save(id: string, status: GitSourceStatus, events: GitSyncEvent[], trace: Trace): Promise<Resource> {
    return this.deps.store.updateResource(
      "git_source",
      id,
      (cur) => {
        if (cur.deletion || !gitSourceOf(cur)) throw notFound("git_source", id);
        cur.currentState = create(ResourceStatusSchema, { kind: { case: "gitSource", value: status } });
        cur.updatedAt = timestampFromDate(this.deps.now());
        return cur;
      },
      undefined,
      (written) =>
        events.map((e) =>
          buildEvent({
            type: e.type,
            ...trace,
            resourceType: "git_source",
            resourceId: id,
            revision: written.metadata?.resourceVersion,
            data: e.data,
          }),
        ),
    );
  }
}

// The sync's trace: the caller's request and correlation ids when a call asked for it (what it
// writes is found from the call), a new one for the loop's; the actor is always the controller.
function syncTrace(given: Trace | undefined): Trace {
  const requestId = given?.requestId ?? uuidv4();
  return { requestId, correlationId: given?.correlationId ?? requestId, traceparent: given?.traceparent, actor: CONTROLLER_ACTOR };
}
