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
import { FacetedStore, type Facets } from "../faceted-store.js";
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

/** The file store's facets, over one FileCore. */
interface FileFacets extends Facets {
  resources: FileResources;
  workOrders: FileWorkOrders;
  events: FileEvents;
  snapshots: FileSnapshots;
  audit: FileAudit;
  idempotency: FileIdempotency;
  credentials: FileCredentials;
  webhooks: FileWebhooks;
}

/** The file-backed Store (backend "file"). */
export class FileStore extends FacetedStore<FileFacets> {
  readonly backend = "file";
  private readonly core: FileCore;

  constructor(dataDir: string, options: FileStoreOptions = {}) {
    const summaryEvery = options.summaryEvery ?? SUMMARY_EVERY;
    const core = new FileCore(dataDir, options.onWarning ?? (() => undefined), options.onInfo ?? (() => undefined));
    const events = new FileEvents(core, summaryEvery);
    const resources = new FileResources(core, events);
    super({
      resources,
      workOrders: new FileWorkOrders(core, summaryEvery, events, resources),
      events,
      snapshots: new FileSnapshots(core),
      audit: new FileAudit(core),
      idempotency: new FileIdempotency(core),
      credentials: new FileCredentials(core, (nodeId) => resources.isLive("node", nodeId)),
      webhooks: new FileWebhooks(core),
    });
    this.core = core;
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
      this.facets.resources.load(data.resources);
      this.facets.workOrders.load(data.workOrders, data.finishedSummaryStale);
      await this.facets.events.open();
      await this.facets.audit.open();
      this.facets.snapshots.load(data.snapshotSlots);
      this.facets.idempotency.load(data.idempotency);
      this.facets.credentials.load(data);
      await this.facets.webhooks.files.load(data.webhooks, data.webhookDeliveries);
    } catch (e) {
      await fs.closeLog().catch(() => undefined);
      await lock.release();
      throw e;
    }
    this.core.lock = lock;
    this.facets.workOrders.summariseIfBehind(true);
  }

  /** Waits for writes in flight, brings the finished orders' summary up to date, then releases the directory lock. */
  async close(): Promise<void> {
    const lock = this.core.lock;
    if (!lock) return;
    this.facets.workOrders.summariseIfBehind(true);
    this.facets.events.flush();
    this.core.lock = undefined;
    await this.core.settled();
    await this.facets.audit.close().catch((e: unknown) => {
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
}
