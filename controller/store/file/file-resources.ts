// The file store's resources: resources/<type's plural>/<id>.json, served from an in-memory index
// (resource-index.ts) that open() loads and a write updates once the file is durable. Each write
// takes the next store revision (resource-writes.ts says what is written).
import { rm } from "node:fs/promises";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { copyMessage, freezeMessage } from "../../../common/message-copy.js";
import type { ResourceType } from "../../../common/ids.js";
import { ResourceSchema, type Resource } from "../../../gen/skipper/v1/resource_pb.js";
import { checkResourceType } from "../../base/id-checks.js";
import * as codec from "../record-codec.js";
import { checkCreatable, editedResources, ENDED_DEPLOYMENT_PHASES, newResourceRecord, resourceUpdate } from "../resource-writes.js";
import type * as S from "../store.js";
import type { FileOp } from "./atomic-write.js";
import type { FileCore } from "./file-core.js";
import type { FileEvents } from "./file-events.js";
import { ResourceIndex, versionOf } from "./resource-index.js";

/** The ResourceStore facet of the file store. */
export class FileResources implements S.ResourceStore {
  private index = new ResourceIndex();
  private revision = 0n;
  private readonly unpublished = new Set<bigint>();

  constructor(
    private readonly core: FileCore,
    private readonly events: FileEvents,
  ) {}

  /** Replaces the index with the resources read at open; the revision resumes from the highest. */
  load(resources: Resource[]): void {
    this.index = new ResourceIndex();
    this.index.load(resources.map(freezeMessage));
    this.revision = this.index.maxVersion();
  }

  /** True when the resource is stored and not deleted (what resourceExists answers, without the open check). */
  isLive(type: ResourceType, id: string): boolean {
    const r = this.index.get(type, id);
    return r !== undefined && !r.deletion;
  }

  async getResource(type: ResourceType, id: string, options: S.GetOptions = {}): Promise<Resource | undefined> {
    this.core.ensureOpen();
    const r = this.index.get(type, id);
    if (!r || (r.deletion && !options.includeDeleted)) return undefined;
    return copyMessage(ResourceSchema, r);
  }

  async resourceExists(type: ResourceType, id: string): Promise<boolean> {
    this.core.ensureOpen();
    return this.isLive(type, id);
  }

  async currentRevision(): Promise<bigint> {
    this.core.ensureOpen();
    // Only what a listing can already return: a revision handed to a write still on its way to
    // disk (and so not yet in the index) holds the answer below it, or a reader that resumes
    // "since" this answer would skip that write for good.
    let low = this.revision;
    for (const r of this.unpublished) if (r - 1n < low) low = r - 1n;
    return low;
  }

  async listResources(filter: S.ResourceFilter): Promise<S.Page<Resource>> {
    this.core.ensureOpen();
    return this.index.list(filter, (r) => copyMessage(ResourceSchema, r));
  }

  async scanResources(filter: S.ResourceFilter): Promise<S.Page<Resource>> {
    this.core.ensureOpen();
    // The index's records are frozen when they go in (put and load): handed out as they are.
    return this.index.list(filter, (r) => r);
  }

  async createResource(resource: Resource, events?: S.EventsOf<Resource>): Promise<Resource> {
    const type = checkResourceType(resource.resourceType);
    const path = this.core.paths.resource(type, resource.id);
    return this.core.write(`resource/${type}/${resource.id}`, async () => {
      const existing = this.index.get(type, resource.id);
      checkCreatable(type, resource.id, existing && { deleted: existing.deletion !== undefined });
      const stored = newResourceRecord(resource);
      await this.store(path, stored, events);
      return copyMessage(ResourceSchema, stored);
    });
  }

  async updateResource(
    type: ResourceType,
    id: string,
    mutate: (current: Resource) => Resource,
    expectedVersion?: string,
    events?: S.EventsOf<Resource>,
  ): Promise<Resource> {
    const path = this.core.paths.resource(checkResourceType(type), id);
    return this.core.write(`resource/${type}/${id}`, async () => {
      const update = resourceUpdate(type, id, this.index.get(type, id), mutate, expectedVersion);
      if (update.changed) await this.store(path, update.resource, events);
      return update.changed ? copyMessage(ResourceSchema, update.resource) : update.resource;
    });
  }

  async pruneDeployments(finishedBefore: Date, keep: ReadonlySet<string>): Promise<number> {
    this.core.ensureOpen();
    const top = this.index.maxVersion();
    const gone = new Set<Resource>();
    for (const d of this.index.ofType("deployment")) {
      const st = d.currentState?.kind.case === "deployment" ? d.currentState.kind.value : undefined;
      const done = st?.phase !== undefined && ENDED_DEPLOYMENT_PHASES.includes(st.phase);
      if (!done || !st?.finishedAt || timestampDate(st.finishedAt) >= finishedBefore || keep.has(d.id) || versionOf(d) === top) continue;
      gone.add(d);
    }
    // As with orders: out of the indexes in one step, then off the disk; a finished deployment
    // is not written again.
    this.index.removeMany(gone);
    for (const d of gone) await rm(this.core.paths.resource("deployment", d.id), { force: true });
    return gone.size;
  }

  /**
   * Runs `commit` with the record files of `edits` (store.ts ResourceEdit: what a work order's
   * transition writes with it), under those resources' locks: commit writes them with its own files
   * in one step, and the index takes them once commit returned (durable). Edits of a resource not
   * stored, or that change nothing, give no file; several edits of one resource apply in order.
   */
  async withEdits<T>(edits: readonly S.ResourceEdit[], commit: (files: FileOp[]) => Promise<T>): Promise<T> {
    const keys = new Set<string>();
    for (const e of edits) {
      keys.add(`resource/${checkResourceType(e.resourceType)}/${e.id}`);
      this.core.paths.resource(e.resourceType, e.id); // refuses an id that is no file name
    }
    // Locks taken in one order (sorted keys), as every multi-record writer here does.
    const sorted = [...keys].sort();
    const locked = (i: number): Promise<T> =>
      i === sorted.length ? this.writeEdits(edits, commit) : this.core.write(sorted[i]!, () => locked(i + 1));
    return locked(0);
  }

  // withEdits under the locks: the updates, their revisions, the commit, then the index.
  private async writeEdits<T>(edits: readonly S.ResourceEdit[], commit: (files: FileOp[]) => Promise<T>): Promise<T> {
    const updates = editedResources(edits, (type, id) => this.index.get(type, id));
    const revisions = updates.map(() => {
      this.revision += 1n;
      this.unpublished.add(this.revision);
      return this.revision;
    });
    try {
      const files = updates.map((r, i): FileOp => {
        r.metadata!.resourceVersion = revisions[i]!.toString();
        const type = checkResourceType(r.resourceType);
        return { path: this.core.paths.resource(type, r.id), data: codec.encodeMessage(ResourceSchema, r) };
      });
      const out = await commit(files);
      for (const r of updates) this.index.put(freezeMessage(r));
      return out;
    } finally {
      for (const rev of revisions) this.unpublished.delete(rev);
    }
  }

  // Writes a resource with the next revision (and the events of it, in the same step), then puts
  // it in the index.
  private store(path: string, stored: Resource, events: S.EventsOf<Resource> | undefined): Promise<void> {
    return this.publish(async (rev) => {
      stored.metadata!.resourceVersion = rev;
      const text = codec.encodeMessage(ResourceSchema, stored);
      if (!events) {
        await this.core.fs.writeFile(path, text);
        this.index.put(freezeMessage(stored));
        return;
      }
      const staged = await this.events.stage(events(copyMessage(ResourceSchema, stored)));
      await this.core.fs.commit([{ path, data: text }, ...staged.files]);
      this.index.put(freezeMessage(stored));
      staged.indexed();
    });
  }

  // Gives a resource write the next revision and counts it unpublished until the record is in
  // the index (or the write failed): see currentRevision.
  private async publish(write: (revision: string) => Promise<void>): Promise<void> {
    this.revision += 1n;
    const rev = this.revision;
    this.unpublished.add(rev);
    try {
      await write(rev.toString());
    } finally {
      this.unpublished.delete(rev);
    }
  }
}
