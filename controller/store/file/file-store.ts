// The embedded store: one readable JSON file per record under the data directory, every write
// atomic and durable (atomic-write.ts), every read served from in-memory indexes. open() rebuilds
// those of resources and work orders (finished ones as summaries: order-summary.ts,
// summary-file.ts); history that is never rewritten is read when first asked for: events a day at
// a time (event-log.ts), snapshots one file at a time. Writes to one record are serialised by a
// per-key lock, and the index is updated only after the write is durable, so a reader never sees
// a state that a crash could take back.
//
// FileStore opens and closes the data directory and hands each call to the facet it belongs to
// (file-resources.ts, file-work-orders.ts, file-events.ts, file-snapshots.ts, file-audit.ts,
// file-idempotency.ts, file-credentials.ts, file-webhooks.ts), which share file-core.ts.
//
// Layout (see store-paths.ts): resources/<type's plural>/<id>.json (resources/tenants/,
// resources/resource-limits/; an older layout is moved at open: layout-migration.ts),
// work-orders/{pending,running,finished}/<id>.json, events/YYYY-MM-DD/<ts>-<id>.json, snapshots/,
// idempotency/, auth/, audit/YYYY-MM-DD.jsonl (the audit trail: audit-segments.ts), logs/, .lock.
import type * as S from "../store.js";
import type { StoreArgs, StoreResult } from "../store.js";
import { acquireDataDirLock } from "./data-dir-lock.js";
import { FileAudit } from "./file-audit.js";
import { FileCore } from "./file-core.js";
import { FileCredentials } from "./file-credentials.js";
import { FileEvents } from "./file-events.js";
import { FileIdempotency } from "./file-idempotency.js";
import { FileResources } from "./file-resources.js";
import { FileSnapshots } from "./file-snapshots.js";
import { FileWebhooks } from "./file-webhooks.js";
import { FileWorkOrders } from "./file-work-orders.js";
import { migrateLayout } from "./layout-migration.js";
import { loadDataDir } from "./load-data-dir.js";
import { makePrivate } from "./private-modes.js";
import { LAYOUT } from "./store-paths.js";

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
export class FileStore implements S.Store {
  readonly backend = "file";
  private readonly core: FileCore;
  private readonly resources: FileResources;
  private readonly workOrders: FileWorkOrders;
  private readonly events: FileEvents;
  private readonly snapshots: FileSnapshots;
  private readonly audit: FileAudit;
  private readonly idempotency: FileIdempotency;
  private readonly credentials: FileCredentials;
  private readonly webhooks: FileWebhooks;

  constructor(dataDir: string, options: FileStoreOptions = {}) {
    const summaryEvery = options.summaryEvery ?? SUMMARY_EVERY;
    this.core = new FileCore(dataDir, options.onWarning ?? (() => undefined), options.onInfo ?? (() => undefined));
    this.resources = new FileResources(this.core);
    this.workOrders = new FileWorkOrders(this.core, summaryEvery);
    this.events = new FileEvents(this.core, summaryEvery);
    this.snapshots = new FileSnapshots(this.core);
    this.audit = new FileAudit(this.core);
    this.idempotency = new FileIdempotency(this.core);
    this.credentials = new FileCredentials(this.core, (nodeId) => this.resources.isLive("node", nodeId));
    this.webhooks = new FileWebhooks(this.core);
  }

  /** Creates the layout, takes the directory lock, repairs leftovers and loads the indexes. */
  async open(): Promise<void> {
    const { paths, fs, warn, info } = this.core;
    if (this.core.lock) return;
    await fs.ensureDir(paths.root);
    const lock = await acquireDataDirLock(paths.lock(), paths.root);
    try {
      const tightened = await makePrivate(paths.root);
      if (tightened > 0)
        warn("data directory was readable by other users: made private (directories 0700, files 0600)", { entries: tightened });
      // What a crash left in the write-ahead log is put in place before anything reads a file.
      const { replayed, torn } = await fs.openLog();
      if (replayed > 0) info("replayed the write-ahead log a stop left behind", { paths: replayed });
      if (torn) warn("the write-ahead log ended in a torn append (never acknowledged): dropped", {});
      // Before the layout's directories are made: an old directory is renamed whole when its new one is absent.
      const moved = await migrateLayout(paths, fs, this.core.reader);
      if (moved.length > 0) info("moved resource directories to the current data directory layout", { layout: 2, moved });
      for (const dir of LAYOUT) await fs.ensureDir(paths.dir(dir));
      const data = await loadDataDir(paths, fs, warn, new Date());
      this.resources.load(data.resources);
      this.workOrders.load(data.workOrders, data.finishedSummaryStale);
      await this.events.open();
      await this.audit.open();
      this.snapshots.load(data.snapshotSlots);
      this.idempotency.load(data.idempotency);
      this.credentials.load(data);
      await this.webhooks.files.load(data.webhooks, data.webhookDeliveries);
    } catch (e) {
      await fs.closeLog().catch(() => undefined);
      await lock.release();
      throw e;
    }
    this.core.lock = lock;
    this.workOrders.summariseIfBehind(true);
  }

  /** Waits for writes in flight, brings the finished orders' summary up to date, then releases the directory lock. */
  async close(): Promise<void> {
    const lock = this.core.lock;
    if (!lock) return;
    this.workOrders.summariseIfBehind(true);
    this.events.flush();
    this.core.lock = undefined;
    await this.core.settled();
    await this.audit.close().catch((e: unknown) => {
      this.core.warn("could not close the audit trail's file", { reason: e instanceof Error ? e.message : String(e) });
    });
    // The record files made durable and the log emptied: wal/ is left empty by a clean stop.
    await this.core.fs.closeLog().catch((e: unknown) => {
      this.core.warn("could not checkpoint the write-ahead log (the next open replays it)", {
        reason: e instanceof Error ? e.message : String(e),
      });
    });
    await lock.release();
  }

  // --- ResourceStore: resources ---

  getResource(...a: StoreArgs<"getResource">): StoreResult<"getResource"> {
    return this.resources.getResource(...a);
  }

  resourceExists(...a: StoreArgs<"resourceExists">): StoreResult<"resourceExists"> {
    return this.resources.resourceExists(...a);
  }

  listResources(...a: StoreArgs<"listResources">): StoreResult<"listResources"> {
    return this.resources.listResources(...a);
  }

  scanResources(...a: StoreArgs<"scanResources">): StoreResult<"scanResources"> {
    return this.resources.scanResources(...a);
  }

  currentRevision(...a: StoreArgs<"currentRevision">): StoreResult<"currentRevision"> {
    return this.resources.currentRevision(...a);
  }

  createResource(...a: StoreArgs<"createResource">): StoreResult<"createResource"> {
    return this.resources.createResource(...a);
  }

  updateResource(...a: StoreArgs<"updateResource">): StoreResult<"updateResource"> {
    return this.resources.updateResource(...a);
  }

  pruneDeployments(...a: StoreArgs<"pruneDeployments">): StoreResult<"pruneDeployments"> {
    return this.resources.pruneDeployments(...a);
  }

  // --- WorkOrderStore: workOrders ---

  createWorkOrder(...a: StoreArgs<"createWorkOrder">): StoreResult<"createWorkOrder"> {
    return this.workOrders.createWorkOrder(...a);
  }

  getWorkOrder(...a: StoreArgs<"getWorkOrder">): StoreResult<"getWorkOrder"> {
    return this.workOrders.getWorkOrder(...a);
  }

  listWorkOrders(...a: StoreArgs<"listWorkOrders">): StoreResult<"listWorkOrders"> {
    return this.workOrders.listWorkOrders(...a);
  }

  pruneWorkOrders(...a: StoreArgs<"pruneWorkOrders">): StoreResult<"pruneWorkOrders"> {
    return this.workOrders.pruneWorkOrders(...a);
  }

  nextPendingWorkOrder(...a: StoreArgs<"nextPendingWorkOrder">): StoreResult<"nextPendingWorkOrder"> {
    return this.workOrders.nextPendingWorkOrder(...a);
  }

  countPendingWorkOrders(...a: StoreArgs<"countPendingWorkOrders">): StoreResult<"countPendingWorkOrders"> {
    return this.workOrders.countPendingWorkOrders(...a);
  }

  countWorkOrders(...a: StoreArgs<"countWorkOrders">): StoreResult<"countWorkOrders"> {
    return this.workOrders.countWorkOrders(...a);
  }

  claimWorkOrder(...a: StoreArgs<"claimWorkOrder">): StoreResult<"claimWorkOrder"> {
    return this.workOrders.claimWorkOrder(...a);
  }

  renewWorkOrderLease(...a: StoreArgs<"renewWorkOrderLease">): StoreResult<"renewWorkOrderLease"> {
    return this.workOrders.renewWorkOrderLease(...a);
  }

  expireWorkOrderLease(...a: StoreArgs<"expireWorkOrderLease">): StoreResult<"expireWorkOrderLease"> {
    return this.workOrders.expireWorkOrderLease(...a);
  }

  cancelWorkOrder(...a: StoreArgs<"cancelWorkOrder">): StoreResult<"cancelWorkOrder"> {
    return this.workOrders.cancelWorkOrder(...a);
  }

  releaseWorkOrderRetry(...a: StoreArgs<"releaseWorkOrderRetry">): StoreResult<"releaseWorkOrderRetry"> {
    return this.workOrders.releaseWorkOrderRetry(...a);
  }

  finishWorkOrder(...a: StoreArgs<"finishWorkOrder">): StoreResult<"finishWorkOrder"> {
    return this.workOrders.finishWorkOrder(...a);
  }

  supersedeWorkOrder(...a: StoreArgs<"supersedeWorkOrder">): StoreResult<"supersedeWorkOrder"> {
    return this.workOrders.supersedeWorkOrder(...a);
  }

  // --- EventStore: events ---

  appendEvent(...a: StoreArgs<"appendEvent">): StoreResult<"appendEvent"> {
    return this.events.appendEvent(...a);
  }

  listEvents(...a: StoreArgs<"listEvents">): StoreResult<"listEvents"> {
    return this.events.listEvents(...a);
  }

  pruneEvents(...a: StoreArgs<"pruneEvents">): StoreResult<"pruneEvents"> {
    return this.events.pruneEvents(...a);
  }

  // --- SnapshotStore: snapshots ---

  putSnapshot(...a: StoreArgs<"putSnapshot">): StoreResult<"putSnapshot"> {
    return this.snapshots.putSnapshot(...a);
  }

  getLatestSnapshot(...a: StoreArgs<"getLatestSnapshot">): StoreResult<"getLatestSnapshot"> {
    return this.snapshots.getLatestSnapshot(...a);
  }

  // --- AuditStore: audit ---

  appendAuditEntry(...a: StoreArgs<"appendAuditEntry">): StoreResult<"appendAuditEntry"> {
    return this.audit.appendAuditEntry(...a);
  }

  listAuditEntries(...a: StoreArgs<"listAuditEntries">): StoreResult<"listAuditEntries"> {
    return this.audit.listAuditEntries(...a);
  }

  scanAuditEntries(...a: StoreArgs<"scanAuditEntries">): StoreResult<"scanAuditEntries"> {
    return this.audit.scanAuditEntries(...a);
  }

  pruneAuditEntries(...a: StoreArgs<"pruneAuditEntries">): StoreResult<"pruneAuditEntries"> {
    return this.audit.pruneAuditEntries(...a);
  }

  // --- IdempotencyStore: idempotency ---

  getIdempotencyRecord(...a: StoreArgs<"getIdempotencyRecord">): StoreResult<"getIdempotencyRecord"> {
    return this.idempotency.getIdempotencyRecord(...a);
  }

  putIdempotencyRecord(...a: StoreArgs<"putIdempotencyRecord">): StoreResult<"putIdempotencyRecord"> {
    return this.idempotency.putIdempotencyRecord(...a);
  }

  // --- CredentialStore: credentials ---

  getNodeCredential(...a: StoreArgs<"getNodeCredential">): StoreResult<"getNodeCredential"> {
    return this.credentials.getNodeCredential(...a);
  }

  getLiveNodeCredential(...a: StoreArgs<"getLiveNodeCredential">): StoreResult<"getLiveNodeCredential"> {
    return this.credentials.getLiveNodeCredential(...a);
  }

  putNodeCredential(...a: StoreArgs<"putNodeCredential">): StoreResult<"putNodeCredential"> {
    return this.credentials.putNodeCredential(...a);
  }

  getAdminCredential(...a: StoreArgs<"getAdminCredential">): StoreResult<"getAdminCredential"> {
    return this.credentials.getAdminCredential(...a);
  }

  putAdminCredential(...a: StoreArgs<"putAdminCredential">): StoreResult<"putAdminCredential"> {
    return this.credentials.putAdminCredential(...a);
  }

  getApiKey(...a: StoreArgs<"getApiKey">): StoreResult<"getApiKey"> {
    return this.credentials.getApiKey(...a);
  }

  putApiKey(...a: StoreArgs<"putApiKey">): StoreResult<"putApiKey"> {
    return this.credentials.putApiKey(...a);
  }

  listApiKeys(...a: StoreArgs<"listApiKeys">): StoreResult<"listApiKeys"> {
    return this.credentials.listApiKeys(...a);
  }

  getEnrollmentToken(...a: StoreArgs<"getEnrollmentToken">): StoreResult<"getEnrollmentToken"> {
    return this.credentials.getEnrollmentToken(...a);
  }

  putEnrollmentToken(...a: StoreArgs<"putEnrollmentToken">): StoreResult<"putEnrollmentToken"> {
    return this.credentials.putEnrollmentToken(...a);
  }

  listEnrollmentTokens(...a: StoreArgs<"listEnrollmentTokens">): StoreResult<"listEnrollmentTokens"> {
    return this.credentials.listEnrollmentTokens(...a);
  }

  // --- WebhookStore: webhooks ---

  putWebhook(...a: StoreArgs<"putWebhook">): StoreResult<"putWebhook"> {
    return this.webhooks.putWebhook(...a);
  }

  getWebhook(...a: StoreArgs<"getWebhook">): StoreResult<"getWebhook"> {
    return this.webhooks.getWebhook(...a);
  }

  listWebhooks(...a: StoreArgs<"listWebhooks">): StoreResult<"listWebhooks"> {
    return this.webhooks.listWebhooks(...a);
  }

  deleteWebhook(...a: StoreArgs<"deleteWebhook">): StoreResult<"deleteWebhook"> {
    return this.webhooks.deleteWebhook(...a);
  }

  enqueueWebhookDeliveries(...a: StoreArgs<"enqueueWebhookDeliveries">): StoreResult<"enqueueWebhookDeliveries"> {
    return this.webhooks.enqueueWebhookDeliveries(...a);
  }

  getWebhookDelivery(...a: StoreArgs<"getWebhookDelivery">): StoreResult<"getWebhookDelivery"> {
    return this.webhooks.getWebhookDelivery(...a);
  }

  updateWebhookDelivery(...a: StoreArgs<"updateWebhookDelivery">): StoreResult<"updateWebhookDelivery"> {
    return this.webhooks.updateWebhookDelivery(...a);
  }

  listWebhookDeliveries(...a: StoreArgs<"listWebhookDeliveries">): StoreResult<"listWebhookDeliveries"> {
    return this.webhooks.listWebhookDeliveries(...a);
  }

  dueWebhookDeliveries(...a: StoreArgs<"dueWebhookDeliveries">): StoreResult<"dueWebhookDeliveries"> {
    return this.webhooks.dueWebhookDeliveries(...a);
  }

  webhookDeliveryStats(...a: StoreArgs<"webhookDeliveryStats">): StoreResult<"webhookDeliveryStats"> {
    return this.webhooks.webhookDeliveryStats(...a);
  }

  pruneWebhookDeliveries(...a: StoreArgs<"pruneWebhookDeliveries">): StoreResult<"pruneWebhookDeliveries"> {
    return this.webhooks.pruneWebhookDeliveries(...a);
  }

  getWebhookCursor(...a: StoreArgs<"getWebhookCursor">): StoreResult<"getWebhookCursor"> {
    return this.webhooks.getWebhookCursor(...a);
  }

  putWebhookCursor(...a: StoreArgs<"putWebhookCursor">): StoreResult<"putWebhookCursor"> {
    return this.webhooks.putWebhookCursor(...a);
  }
}
