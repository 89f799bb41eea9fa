// The embedded store: one readable JSON file per record under the data directory, every write
// atomic and durable (atomic-write.ts), every read served from in-memory indexes. open() rebuilds
// those of resources and work orders (finished ones as summaries: order-summary.ts,
// summary-file.ts); history that is never rewritten is read when first asked for: events a day at
// a time (event-log.ts), snapshots one file at a time. Writes to one record are serialised by a
// per-key lock, and the index is updated only after the write is durable, so a reader never sees
// a state that a crash could take back.
//
// Layout (see store-paths.ts): resources/<type's plural>/<id>.json (resources/tenants/,
// resources/resource-limits/; an older layout is moved at open: layout-migration.ts),
// work-orders/{pending,running,finished}/<id>.json, events/YYYY-MM-DD/<ts>-<id>.json, snapshots/,
// idempotency/, auth/, audit/YYYY-MM-DD.jsonl (the audit trail: audit-segments.ts), logs/, .lock.
import { readFile, rm } from "node:fs/promises";
import { copyMessage, freezeMessage } from "../../../common/message-copy.js";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { ApiKeySchema } from "../../../gen/skipper/v1/access_pb.js";
import { EnrollmentTokenSchema } from "../../../gen/skipper/v1/enrollment_service_pb.js";
import type { AuditEntry } from "../../../gen/skipper/v1/audit_service_pb.js";
import type { WebhookDelivery } from "../../../gen/skipper/v1/webhook_service_pb.js";
import { EventSchema, type Event } from "../../../gen/skipper/v1/event_pb.js";
import { DeploymentPhase, ResourceSchema, type Resource } from "../../../gen/skipper/v1/resource_pb.js";
import { SnapshotSchema, type Snapshot } from "../../../gen/skipper/v1/snapshot_pb.js";
import { WorkOrderSchema, type WorkOrder } from "../../../gen/skipper/v1/work_order_pb.js";
import { notFound, SkipperError } from "../../errors.js";
import type { ResourceType } from "../../../common/ids.js";
import { checkResourceType } from "../../id-checks.js";
import { KeyedLock } from "../../keyed-lock.js";
import { DurableFs } from "./atomic-write.js";
import { oldestFirst } from "./oldest-first.js";
import { AuditSegments } from "./audit-segments.js";
import { acquireDataDirLock, type DataDirLock } from "./data-dir-lock.js";
import { EventLog } from "./event-log.js";
import { RecordReader } from "./quarantine.js";
import { loadDataDir } from "./load-data-dir.js";
import { migrateLayout } from "./layout-migration.js";
import * as codec from "../record-codec.js";
import { ResourceIndex, versionOf } from "./resource-index.js";
import { checkNewWorkOrder, OrderSteps, workOrderExists } from "../order-steps.js";
import type * as S from "../store.js";
import { LAYOUT, StorePaths } from "./store-paths.js";
import { stageOf, WorkOrderIndex } from "./work-order-index.js";
import { makePrivate } from "./private-modes.js";
import { isOrderSummary, summarise, summaryMessage } from "../order-summary.js";
import { ORDER_SUMMARY_ROWS } from "./order-summary-rows.js";
import { summaryDue, writeSummary } from "./summary-file.js";
import { WebhookFiles } from "./webhook-files.js";
import { eventTimestamp, snapshotSlot } from "../record-checks.js";
import { checkCreatable, newResourceRecord, resourceUpdate } from "../resource-writes.js";
import { isFinished } from "../work-order-transitions.js";

export interface FileStoreOptions {
  /** Called for repairs made at open (temp files removed, files quarantined, duplicates resolved). */
  onWarning?: (msg: string, meta: object) => void;
  /** Called for what open() changed on purpose (resource directories moved to the current layout). */
  onInfo?: (msg: string, meta: object) => void;
  /** Rewrite the finished orders' summary after this many orders finished or were pruned (default 1,000). */
  summaryEvery?: number;
}

const SUMMARY_EVERY = 1000;

/** The file-backed Store (backend "file"). */
export class FileStore extends OrderSteps implements S.Store {
  readonly backend = "file";
  private readonly paths: StorePaths;
  private readonly fs: DurableFs;
  private readonly locks = new KeyedLock();
  private readonly warn: (msg: string, meta: object) => void;
  private readonly info: (msg: string, meta: object) => void;
  private readonly inFlight = new Set<Promise<unknown>>();
  private lock: DataDirLock | undefined;
  private revision = 0n;
  private readonly unpublished = new Set<bigint>();
  private resources = new ResourceIndex();
  private orders = new WorkOrderIndex();
  private events: EventLog;
  private audit: AuditSegments;
  // The snapshot slots that have a file. A snapshot is read from it when asked for: reads are
  // rare, and a system snapshot covers every resource (open() read them all before).
  private snapshots = new Set<string>();
  private readonly reader: RecordReader;
  private idempotency = new Map<string, S.IdempotencyRecord>();
  private nodeCredentials = new Map<string, S.NodeCredential>();
  private admin: S.AdminCredential | undefined;
  private apiKeys = new Map<string, S.ApiKeyRecord>();
  private enrollmentTokens = new Map<string, S.EnrollmentTokenRecord>();
  private readonly webhooks: WebhookFiles;
  // Finished or pruned orders the summary file on disk does not reflect yet.
  private summaryLag = 0;
  private readonly summaryEvery: number;

  constructor(dataDir: string, options: FileStoreOptions = {}) {
    super();
    this.paths = new StorePaths(dataDir);
    this.fs = new DurableFs(this.paths.root);
    this.warn = options.onWarning ?? (() => undefined);
    this.info = options.onInfo ?? (() => undefined);
    this.summaryEvery = options.summaryEvery ?? SUMMARY_EVERY;
    this.reader = new RecordReader(this.paths, this.fs, this.warn);
    this.events = this.eventLog();
    this.audit = this.auditSegments();
    this.webhooks = new WebhookFiles(this.paths, this.fs, (key, fn) => this.write(key, fn));
  }

  private auditSegments(): AuditSegments {
    return new AuditSegments({ paths: this.paths, fs: this.fs, warn: this.warn });
  }

  private eventLog(): EventLog {
    const reader = this.reader;
    return new EventLog({
      paths: this.paths,
      fs: this.fs,
      reader,
      warn: this.warn,
      removeTemp: async (path) => {
        await rm(path, { force: true });
        this.warn("removed a temp file left by an interrupted write", { path: reader.rel(path) });
      },
      track: (key, write) => this.write(key, write),
      summaryEvery: this.summaryEvery,
    });
  }

  /** Creates the layout, takes the directory lock, repairs leftovers and loads the indexes. */
  async open(): Promise<void> {
    if (this.lock) return;
    await this.fs.ensureDir(this.paths.root);
    const lock = await acquireDataDirLock(this.paths.lock(), this.paths.root);
    try {
      const tightened = await makePrivate(this.paths.root);
      if (tightened > 0)
        this.warn("data directory was readable by other users: made private (directories 0700, files 0600)", { entries: tightened });
      // What a crash left in the write-ahead log is put in place before anything reads a file.
      const { replayed, torn } = await this.fs.openLog();
      if (replayed > 0) this.info("replayed the write-ahead log a stop left behind", { paths: replayed });
      if (torn) this.warn("the write-ahead log ended in a torn append (never acknowledged): dropped", {});
      // Before the layout's directories are made: an old directory is renamed whole when its new one is absent.
      const moved = await migrateLayout(this.paths, this.fs, this.reader);
      if (moved.length > 0) this.info("moved resource directories to the current data directory layout", { layout: 2, moved });
      for (const dir of LAYOUT) await this.fs.ensureDir(this.paths.dir(dir));
      const data = await loadDataDir(this.paths, this.fs, this.warn, new Date());
      this.resources = new ResourceIndex();
      this.resources.load(data.resources.map(freezeMessage));
      this.revision = this.resources.maxVersion();
      this.orders = new WorkOrderIndex();
      // Finished orders read in full (not named by the summary) are held as summaries too.
      this.orders.load(data.workOrders.map((o) => (isFinished(o) ? summarise(o) : o)));
      this.summaryLag = data.finishedSummaryStale ? this.summaryEvery : 0;
      this.events = this.eventLog();
      await this.events.open();
      this.audit = this.auditSegments();
      await this.audit.open();
      this.snapshots = new Set(data.snapshotSlots);
      this.idempotency = new Map(data.idempotency.map((r) => [r.key, r]));
      this.nodeCredentials = new Map(data.nodeCredentials.map((c) => [c.nodeId, c]));
      this.admin = data.adminCredential;
      this.apiKeys = new Map(data.apiKeys.map((r) => [r.key.id, r]));
      this.enrollmentTokens = new Map(data.enrollmentTokens.map((r) => [r.token.id, r]));
      await this.webhooks.load(data.webhooks, data.webhookDeliveries);
    } catch (e) {
      await this.fs.closeLog().catch(() => undefined);
      await lock.release();
      throw e;
    }
    this.lock = lock;
    this.summariseIfBehind(true);
  }

  /** Waits for writes in flight, brings the finished orders' summary up to date, then releases the directory lock. */
  async close(): Promise<void> {
    const lock = this.lock;
    if (!lock) return;
    this.summariseIfBehind(true);
    this.events.flush();
    this.lock = undefined;
    await Promise.allSettled([...this.inFlight]);
    await this.audit.close().catch((e: unknown) => {
      this.warn("could not close the audit trail's file", { reason: e instanceof Error ? e.message : String(e) });
    });
    // The record files made durable and the log emptied: wal/ is left empty by a clean stop.
    await this.fs.closeLog().catch((e: unknown) => {
      this.warn("could not checkpoint the write-ahead log (the next open replays it)", {
        reason: e instanceof Error ? e.message : String(e),
      });
    });
    await lock.release();
  }

  // --- resources -------------------------------------------------------------------------

  async getResource(type: ResourceType, id: string, options: S.GetOptions = {}): Promise<Resource | undefined> {
    this.ensureOpen();
    const r = this.resources.get(type, id);
    if (!r || (r.deletion && !options.includeDeleted)) return undefined;
    return copyMessage(ResourceSchema, r);
  }

  async resourceExists(type: ResourceType, id: string): Promise<boolean> {
    this.ensureOpen();
    const r = this.resources.get(type, id);
    return r !== undefined && !r.deletion;
  }

  async currentRevision(): Promise<bigint> {
    this.ensureOpen();
    // Only what a listing can already return: a revision handed to a write still on its way to
    // disk (and so not yet in the index) holds the answer below it, or a reader that resumes
    // "since" this answer would skip that write for good.
    let low = this.revision;
    for (const r of this.unpublished) if (r - 1n < low) low = r - 1n;
    return low;
  }

  async listResources(filter: S.ResourceFilter): Promise<S.Page<Resource>> {
    this.ensureOpen();
    return this.resources.list(filter, (r) => copyMessage(ResourceSchema, r));
  }

  async scanResources(filter: S.ResourceFilter): Promise<S.Page<Resource>> {
    this.ensureOpen();
    // The index's records are frozen when they go in (put and load): handed out as they are.
    return this.resources.list(filter, (r) => r);
  }

  async createResource(resource: Resource): Promise<Resource> {
    const type = checkResourceType(resource.resourceType);
    const path = this.paths.resource(type, resource.id);
    return this.write(`resource/${type}/${resource.id}`, async () => {
      const existing = this.resources.get(type, resource.id);
      checkCreatable(type, resource.id, existing && { deleted: existing.deletion !== undefined });
      const stored = newResourceRecord(resource);
      await this.storeResource(path, stored);
      return copyMessage(ResourceSchema, stored);
    });
  }

  async updateResource(
    type: ResourceType,
    id: string,
    mutate: (current: Resource) => Resource,
    expectedVersion?: string,
  ): Promise<Resource> {
    const path = this.paths.resource(checkResourceType(type), id);
    return this.write(`resource/${type}/${id}`, async () => {
      const update = resourceUpdate(type, id, this.resources.get(type, id), mutate, expectedVersion);
      if (update.changed) await this.storeResource(path, update.resource);
      return update.changed ? copyMessage(ResourceSchema, update.resource) : update.resource;
    });
  }

  // Writes a resource with the next revision, then puts it in the index.
  private storeResource(path: string, stored: Resource): Promise<void> {
    return this.publish((rev) => {
      stored.metadata!.resourceVersion = rev;
      return this.fs.writeFile(path, codec.encodeMessage(ResourceSchema, stored)).then(() => this.resources.put(freezeMessage(stored)));
    });
  }

  // --- work orders -----------------------------------------------------------------------

  async createWorkOrder(workOrder: WorkOrder): Promise<WorkOrder> {
    const path = this.paths.workOrder("pending", workOrder.id);
    checkNewWorkOrder(workOrder);
    return this.write(`work-order/${workOrder.id}`, async () => {
      if (this.orders.get(workOrder.id)) throw workOrderExists(workOrder.id);
      const stored = copyMessage(WorkOrderSchema, workOrder);
      await this.fs.writeFile(path, codec.encodeMessage(WorkOrderSchema, stored));
      this.orders.put(stored);
      return copyMessage(WorkOrderSchema, stored);
    });
  }

  async getWorkOrder(id: string): Promise<WorkOrder | undefined> {
    this.ensureOpen();
    const o = this.orders.get(id);
    return o && this.wholeOrder(o);
  }

  async listWorkOrders(filter: S.WorkOrderFilter): Promise<S.Page<WorkOrder>> {
    this.ensureOpen();
    if (filter.summaryOnly) return this.orders.list(filter, summaryMessage);
    const page = this.orders.list(filter, (o) => o);
    const items = await Promise.all(page.items.map((o) => this.wholeOrder(o)));
    return { items: items.filter((o) => o !== undefined), nextPageToken: page.nextPageToken };
  }

  // A copy of the stored order: a summary's record is read from its file (a finished order's
  // file is never rewritten). One that cannot be read is left out with a warning.
  private async wholeOrder(o: WorkOrder): Promise<WorkOrder | undefined> {
    if (!isOrderSummary(o)) return copyMessage(WorkOrderSchema, o);
    const path = this.paths.workOrder("finished", o.id);
    try {
      const whole = codec.decodeMessage(WorkOrderSchema, await readFile(path, "utf8"));
      if (whole.id === o.id && whole.status === o.status) return whole;
    } catch (e) {
      this.warn("could not read a finished work order", { work_order_id: o.id, reason: e instanceof Error ? e.message : String(e) });
      return undefined;
    }
    this.warn("a finished work order's file does not match its summary", { work_order_id: o.id });
    return undefined;
  }

  // The stored order in full for a transition under its lock (see wholeOrder).
  private async currentOrder(id: string): Promise<WorkOrder> {
    const o = this.orders.get(id);
    const whole = o && (isOrderSummary(o) ? await this.wholeOrder(o) : o);
    if (!whole) throw notFound("work_order", id);
    return whole;
  }

  async nextPendingWorkOrder(nodeId: string): Promise<WorkOrder | undefined> {
    this.ensureOpen();
    const o = this.orders.nextPending(nodeId);
    return o && copyMessage(WorkOrderSchema, o);
  }

  async countPendingWorkOrders(nodeId: string): Promise<number> {
    this.ensureOpen();
    return this.orders.countPending(nodeId);
  }

  async countWorkOrders(): Promise<S.WorkOrderCount[]> {
    this.ensureOpen();
    return this.orders.counts();
  }

  // One state-machine step of an order under its lock, made durable.
  protected transition(id: string, step: (current: WorkOrder) => WorkOrder): Promise<WorkOrder> {
    this.paths.workOrder("pending", id);
    return this.write(`work-order/${id}`, async () => {
      const current = await this.currentOrder(id);
      const next = step(current);
      if (next === current) return copyMessage(WorkOrderSchema, current); // nothing to do (idempotent)
      await this.moveOrder(current, next);
      return copyMessage(WorkOrderSchema, next);
    });
  }

  async pruneWorkOrders(finishedBefore: Date, keep: ReadonlySet<string>): Promise<number> {
    this.ensureOpen();
    // Out of the indexes in one synchronous step, then off the disk. A finished order is never
    // written again, so nothing can put a pruned file back; a crash midway leaves files the next
    // prune deletes.
    const gone = this.orders.removeFinished(finishedBefore, keep);
    for (const o of gone) await rm(this.paths.workOrder("finished", o.id), { force: true });
    this.summaryLag += gone.length;
    this.summariseIfBehind();
    return gone.length;
  }

  async pruneDeployments(finishedBefore: Date, keep: ReadonlySet<string>): Promise<number> {
    this.ensureOpen();
    const top = this.resources.maxVersion();
    const gone = new Set<Resource>();
    for (const d of this.resources.ofType("deployment")) {
      const st = d.currentState?.kind.case === "deployment" ? d.currentState.kind.value : undefined;
      const done = st?.phase === DeploymentPhase.SUCCEEDED || st?.phase === DeploymentPhase.FAILED;
      if (!done || !st?.finishedAt || timestampDate(st.finishedAt) >= finishedBefore || keep.has(d.id) || versionOf(d) === top) continue;
      gone.add(d);
    }
    // As with orders: out of the indexes in one step, then off the disk; a finished deployment
    // is not written again.
    this.resources.removeMany(gone);
    for (const d of gone) await rm(this.paths.resource("deployment", d.id), { force: true });
    return gone.size;
  }

  // Writes the order's new stage file, then removes the old one. A crash in between leaves two
  // copies; open() keeps the more advanced one (progressOf), so the transition is never lost nor
  // undone.
  private async moveOrder(current: WorkOrder, next: WorkOrder): Promise<void> {
    const from = stageOf(current.status);
    const to = stageOf(next.status);
    const text = codec.encodeMessage(WorkOrderSchema, next);
    // A lease renewal stays in its stage: the write replaces the file.
    if (from === to) await this.fs.writeFile(this.paths.workOrder(to, next.id), text);
    else await this.fs.move(this.paths.workOrder(from, current.id), this.paths.workOrder(to, next.id), text);
    if (to !== "finished") return this.orders.put(next);
    this.orders.put(summarise(next));
    this.summaryLag++;
    this.summariseIfBehind();
  }

  // Rewrites the finished orders' summary (in the background, tracked like a write) when it is due
  // (summaryDue) or, with `now`, when it lags at all. It only saves work at the next open(): see
  // summary-file.ts.
  private summariseIfBehind(now = false): void {
    if (now ? this.summaryLag === 0 : !summaryDue(this.summaryLag, this.orders.finishedCount, this.summaryEvery)) return;
    this.summaryLag = 0;
    const rows = [...this.orders.finished()].map((o): [string, WorkOrder] => [`${o.id}.json`, o]);
    this.write("summary/finished-orders", () =>
      writeSummary(this.fs, this.paths.dir("work-orders", "finished"), ORDER_SUMMARY_ROWS, rows),
    ).catch((e: unknown) => {
      this.summaryLag++;
      this.warn("could not write the finished work orders' summary", { reason: e instanceof Error ? e.message : String(e) });
    });
  }

  // --- events ----------------------------------------------------------------------------

  async appendEvent(event: Event): Promise<void> {
    const at = timestampDate(eventTimestamp(event));
    const path = this.paths.event(at, event.id);
    await this.write(`event/${event.id}`, async () => {
      const day = await this.events.dayOf(at);
      if (day.has(event.id)) return;
      const stored = copyMessage(EventSchema, event);
      await this.fs.writeFile(path, codec.encodeMessage(EventSchema, stored));
      this.events.added(day, stored);
    });
  }

  async listEvents(filter: S.EventFilter): Promise<S.Page<Event>> {
    this.ensureOpen();
    return this.events.list(filter);
  }

  async pruneEvents(before: Date): Promise<number> {
    this.ensureOpen();
    return this.events.prune(before);
  }

  // --- audit trail ----------------------------------------------------------------------

  async appendAuditEntry(draft: S.AuditDraft): Promise<AuditEntry> {
    this.ensureOpen();
    // Not under a record lock: the trail group-commits the appends that queue up together.
    return this.track(this.audit.append(draft));
  }

  async listAuditEntries(filter: S.AuditFilter): Promise<S.Page<AuditEntry>> {
    this.ensureOpen();
    return this.audit.list(filter);
  }

  scanAuditEntries(): AsyncIterable<S.StoredAuditEntry> {
    this.ensureOpen();
    return this.audit.scan();
  }

  async pruneAuditEntries(before: Date): Promise<number> {
    this.ensureOpen();
    return this.track(this.audit.prune(before));
  }

  // --- snapshots -------------------------------------------------------------------------

  async putSnapshot(snapshot: Snapshot): Promise<void> {
    const { key, path } = this.snapshotSlot(snapshot.scope, snapshot.tenantId);
    await this.write(`snapshot/${key}`, async () => {
      const text = await codec.encodeSnapshot(snapshot);
      await this.fs.writeFile(path, text);
      this.snapshots.add(key);
    });
  }

  async getLatestSnapshot(scope: "system" | "tenant", tenantId?: string): Promise<Snapshot | undefined> {
    this.ensureOpen();
    const { key, path } = this.snapshotSlot(scope, tenantId ?? "");
    if (!this.snapshots.has(key)) return undefined;
    // Under the slot's lock, so a file being replaced is never taken for a bad one.
    return this.write(`snapshot/${key}`, async () => {
      const s = await this.reader.read(
        path,
        (t) => codec.decodeMessage(SnapshotSchema, t),
        (s) => scope === "system" || s.tenantId === tenantId,
      );
      if (!s) this.snapshots.delete(key);
      return s;
    });
  }

  private snapshotSlot(scope: string, tenantId: string): { key: string; path: string } {
    const key = snapshotSlot(scope, tenantId);
    return { key, path: key === "system" ? this.paths.systemSnapshot() : this.paths.tenantSnapshot(tenantId) };
  }

  // --- idempotency -----------------------------------------------------------------------

  async getIdempotencyRecord(key: string, now: Date): Promise<S.IdempotencyRecord | undefined> {
    this.ensureOpen();
    const path = this.paths.idempotency(key);
    const r = this.idempotency.get(key);
    if (!r) return undefined;
    if (r.expiresAt.getTime() > now.getTime()) return copyRecord(r);
    // Expired: drop it now rather than waiting for the next open() to prune it.
    await this.write(`idempotency/${key}`, async () => {
      if (this.idempotency.get(key) !== r) return;
      await this.fs.unlink(path);
      this.idempotency.delete(key);
    });
    return undefined;
  }

  async putIdempotencyRecord(record: S.IdempotencyRecord): Promise<void> {
    const path = this.paths.idempotency(record.key);
    const stored = copyRecord(record);
    await this.write(`idempotency/${record.key}`, async () => {
      await this.fs.writeFile(path, codec.encodeIdempotency(stored));
      this.idempotency.set(stored.key, stored);
    });
  }

  // --- credentials -----------------------------------------------------------------------

  async getNodeCredential(nodeId: string): Promise<S.NodeCredential | undefined> {
    this.ensureOpen();
    const c = this.nodeCredentials.get(nodeId);
    return c && copyCredential(c);
  }

  async getLiveNodeCredential(nodeId: string): Promise<S.NodeCredential | undefined> {
    this.ensureOpen();
    const node = this.resources.get("node", nodeId);
    return node && !node.deletion ? this.getNodeCredential(nodeId) : undefined;
  }

  async putNodeCredential(credential: S.NodeCredential): Promise<void> {
    const path = this.paths.nodeCredential(credential.nodeId);
    const stored = copyCredential(credential);
    await this.write(`node-credential/${stored.nodeId}`, async () => {
      await this.fs.writeFile(path, codec.encodeNodeCredential(stored));
      this.nodeCredentials.set(stored.nodeId, stored);
    });
  }

  async getAdminCredential(): Promise<S.AdminCredential | undefined> {
    this.ensureOpen();
    return this.admin && { ...this.admin, createdAt: new Date(this.admin.createdAt) };
  }

  async putAdminCredential(credential: S.AdminCredential): Promise<void> {
    const stored = { tokenHash: credential.tokenHash, createdAt: new Date(credential.createdAt) };
    await this.write("admin-credential", async () => {
      await this.fs.writeFile(this.paths.adminCredential(), codec.encodeAdminCredential(stored));
      this.admin = stored;
    });
  }

  async getApiKey(id: string): Promise<S.ApiKeyRecord | undefined> {
    this.ensureOpen();
    const r = this.apiKeys.get(id);
    return r && copyApiKey(r);
  }

  async putApiKey(record: S.ApiKeyRecord): Promise<void> {
    const path = this.paths.apiKey(record.key.id);
    const stored = copyApiKey(record);
    await this.write(`api-key/${stored.key.id}`, async () => {
      await this.fs.writeFile(path, codec.encodeApiKey(stored));
      this.apiKeys.set(stored.key.id, stored);
    });
  }

  async listApiKeys(): Promise<S.ApiKeyRecord[]> {
    this.ensureOpen();
    return [...this.apiKeys.values()].map(copyApiKey).sort(oldestFirst((r) => r.key));
  }

  async getEnrollmentToken(id: string): Promise<S.EnrollmentTokenRecord | undefined> {
    this.ensureOpen();
    const r = this.enrollmentTokens.get(id);
    return r && copyEnrollmentToken(r);
  }

  async putEnrollmentToken(record: S.EnrollmentTokenRecord): Promise<void> {
    const path = this.paths.enrollmentToken(record.token.id);
    const stored = copyEnrollmentToken(record);
    await this.write(`enrollment-token/${stored.token.id}`, async () => {
      await this.fs.writeFile(path, codec.encodeEnrollmentToken(stored));
      this.enrollmentTokens.set(stored.token.id, stored);
    });
  }

  async listEnrollmentTokens(): Promise<S.EnrollmentTokenRecord[]> {
    this.ensureOpen();
    return [...this.enrollmentTokens.values()].map(copyEnrollmentToken).sort(oldestFirst((r) => r.token));
  }

  // --- webhooks (webhook-files.ts) ---------------------------------------------------------

  putWebhook(record: S.WebhookRecord): Promise<void> {
    return this.webhooks.put(record);
  }

  async getWebhook(id: string): Promise<S.WebhookRecord | undefined> {
    this.ensureOpen();
    return this.webhooks.get(id);
  }

  async listWebhooks(): Promise<S.WebhookRecord[]> {
    this.ensureOpen();
    return this.webhooks.list();
  }

  deleteWebhook(id: string): Promise<boolean> {
    return this.webhooks.delete(id);
  }

  enqueueWebhookDeliveries(records: S.WebhookDeliveryRecord[]): Promise<number> {
    return this.webhooks.enqueue(records);
  }

  async getWebhookDelivery(id: string): Promise<S.WebhookDeliveryRecord | undefined> {
    this.ensureOpen();
    return this.webhooks.getDelivery(id);
  }

  updateWebhookDelivery(delivery: WebhookDelivery): Promise<boolean> {
    return this.webhooks.update(delivery);
  }

  async listWebhookDeliveries(filter: S.WebhookDeliveryFilter): Promise<S.Page<S.WebhookDeliveryRecord>> {
    this.ensureOpen();
    return this.webhooks.listDeliveries(filter);
  }

  async dueWebhookDeliveries(now: Date, limit: number, skipWebhookIds: readonly string[] = []): Promise<S.WebhookDeliveryRecord[]> {
    this.ensureOpen();
    return this.webhooks.due(now, limit, skipWebhookIds);
  }

  async webhookDeliveryStats(webhookId: string): Promise<S.WebhookDeliveryStats> {
    this.ensureOpen();
    return this.webhooks.stats(webhookId);
  }

  pruneWebhookDeliveries(before: Date): Promise<number> {
    return this.webhooks.prune(before);
  }

  async getWebhookCursor(): Promise<Date | undefined> {
    this.ensureOpen();
    return this.webhooks.getCursor();
  }

  putWebhookCursor(at: Date): Promise<void> {
    return this.webhooks.putCursor(at);
  }

  // --- plumbing --------------------------------------------------------------------------

  // Runs a write under the record's lock and tracks it so close() can wait for it.
  private write<T>(key: string, fn: () => Promise<T>): Promise<T> {
    this.ensureOpen();
    // Once accepted, a write runs to completion even if close() starts meanwhile.
    return this.track(this.locks.run(key, fn));
  }

  // Counts a write in flight until it settles (close() waits for it).
  private track<T>(p: Promise<T>): Promise<T> {
    this.inFlight.add(p);
    const forget = () => this.inFlight.delete(p);
    p.then(forget, forget);
    return p;
  }

  private ensureOpen(): void {
    if (!this.lock) throw new SkipperError("INTERNAL_ERROR", "the file store is not open");
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

function copyRecord(r: S.IdempotencyRecord): S.IdempotencyRecord {
  return {
    key: r.key,
    requestHash: r.requestHash,
    response: structuredClone(r.response),
    createdAt: new Date(r.createdAt),
    expiresAt: new Date(r.expiresAt),
  };
}

/** A copy the caller may change without changing what the store holds. */
function copyApiKey(r: S.ApiKeyRecord): S.ApiKeyRecord {
  return { ...r, key: copyMessage(ApiKeySchema, r.key) };
}

function copyCredential(c: S.NodeCredential): S.NodeCredential {
  return {
    nodeId: c.nodeId,
    tokenHash: c.tokenHash,
    createdAt: new Date(c.createdAt),
    ...(c.certificates ? { certificates: c.certificates.map((x) => ({ ...x, notAfter: new Date(x.notAfter) })) } : {}),
  };
}

function copyEnrollmentToken(r: S.EnrollmentTokenRecord): S.EnrollmentTokenRecord {
  return { token: copyMessage(EnrollmentTokenSchema, r.token), secretHash: r.secretHash };
}
