// Reads a data directory back into memory at open(). Leftover temp files (a crash between write
// and rename) are deleted; a file that does not parse, or does not match the path it sits at, is
// moved to quarantine/ with a warning instead of stopping the controller; a work order found in
// several stage directories (a crash between writing the new stage and unlinking the old one)
// keeps its most advanced copy. Finished work orders come from their summary file (see
// summary-file.ts), read in full only when the summary does not name them.
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import { readdir, unlink } from "node:fs/promises";
import { join } from "node:path";
import { ResourceSchema, type Resource } from "../../../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderStatus, type WorkOrder } from "../../../gen/skipper/v1/work_order_pb.js";
import { isValidId, RESOURCE_TYPES } from "../../../common/ids.js";
import { TEMP_FILE_PATTERN, type DurableFs } from "./atomic-write.js";
import * as codec from "../record-codec.js";
import { progressOf } from "../../domain/work-order-transitions.js";
import type {
  AdminCredential,
  ApiKeyRecord,
  EnrollmentTokenRecord,
  IdempotencyRecord,
  NodeCredential,
  WebhookDeliveryRecord,
  WebhookRecord,
} from "../store.js";
import { decodeDelivery, decodeWebhook } from "../webhook-records.js";
import { ORDER_SUMMARY_ROWS } from "./order-summary-rows.js";
import { loadSummarised } from "./summary-file.js";
import { RecordReader, type Warn } from "./quarantine.js";
import { IDEMPOTENCY_KEY_PATTERN, ORDER_DIRS, type OrderDir, type StorePaths } from "./store-paths.js";
import { FINISHED_STATUSES } from "../../../common/order-status.js";

/** Everything open() rebuilds its indexes from. */
export interface LoadedData {
  resources: Resource[];
  /** Unfinished orders in full; finished ones as summaries (order-summary.ts) or in full. */
  workOrders: WorkOrder[];
  /** The finished orders' summary file differs from the directory: it should be rewritten. */
  finishedSummaryStale: boolean;
  /** The snapshot slots that have a file ("system", "tenant/<id>"); snapshots are read when asked for. */
  snapshotSlots: string[];
  idempotency: IdempotencyRecord[];
  nodeCredentials: NodeCredential[];
  adminCredential?: AdminCredential;
  apiKeys: ApiKeyRecord[];
  enrollmentTokens: EnrollmentTokenRecord[];
  webhooks: WebhookRecord[];
  webhookDeliveries: WebhookDeliveryRecord[];
}

export type { Warn } from "./quarantine.js";

const STAGE_STATUSES: Record<OrderDir, WorkOrderStatus[]> = {
  pending: [WorkOrderStatus.PENDING, WorkOrderStatus.RETRY_PENDING],
  running: [WorkOrderStatus.RUNNING],
  finished: [...FINISHED_STATUSES],
};
const STORE_DIRS = ["resources", "work-orders", "events", "snapshots", "idempotency", "auth", "webhooks"];
const READ_CONCURRENCY = 32;

/** Loads the data directory (see the file comment for what gets repaired on the way). */
export async function loadDataDir(paths: StorePaths, fs: DurableFs, warn: Warn, now: Date): Promise<LoadedData> {
  const loader = new Loader(paths, fs, warn);
  await loader.removeTempFiles(paths.root, 0);
  // Started first: the listing of finished orders and their summary's text are read (off the
  // main thread) while resources are decoded.
  const workOrders = loader.workOrders();
  workOrders.catch(() => undefined); // awaited below; not an unhandled rejection meanwhile
  const resources = (
    await Promise.all(
      RESOURCE_TYPES.map((type) =>
        loader.records(paths.resourceDir(type), ResourceSchema, (r, id) => r.id === id && r.resourceType === type),
      ),
    )
  ).flat();
  const { orders, finishedSummaryStale } = await workOrders;
  return {
    resources,
    workOrders: orders,
    finishedSummaryStale,
    snapshotSlots: [
      ...(await recordIds(paths.dir("snapshots", "system"))).filter((id) => id === "latest").map(() => "system"),
      ...(await recordIds(paths.dir("snapshots", "tenants"))).map((id) => `tenant/${id}`),
    ],
    idempotency: await loader.idempotency(now),
    nodeCredentials: await loader.plain(paths.dir("auth", "nodes"), codec.decodeNodeCredential, (c, id) => c.nodeId === id),
    adminCredential: (await loader.plain(paths.dir("auth"), codec.decodeAdminCredential, (_c, id) => id === "admin"))[0],
    apiKeys: await loader.plain(paths.dir("auth", "keys"), codec.decodeApiKey, (r, id) => r.key.id === id),
    enrollmentTokens: await loader.plain(paths.dir("auth", "enrollment"), codec.decodeEnrollmentToken, (r, id) => r.token.id === id),
    webhooks: await loader.plain(
      paths.dir("webhooks", "subscriptions"),
      (t) => decodeWebhook(JSON.parse(t)),
      (r, id) => r.webhook.id === id,
    ),
    webhookDeliveries: await loader.plain(
      paths.dir("webhooks", "deliveries"),
      (t) => decodeDelivery(JSON.parse(t)),
      (r, id) => r.delivery.id === id,
    ),
  };
}

class Loader {
  private readonly reader: RecordReader;

  constructor(
    private readonly paths: StorePaths,
    private readonly fs: DurableFs,
    private readonly warn: Warn,
  ) {
    this.reader = new RecordReader(paths, fs, warn);
  }

  /**
   * Deletes temp files under the root's store directories (not logs/ or tls/, owned by others),
   * except in directories whose own reader lists them anyway and removes them there: finished
   * orders (loadSummarised) and event days (event-day.ts, when a day is first read).
   */
  async removeTempFiles(dir: string, depth: number): Promise<void> {
    for (const entry of await list(dir)) {
      const p = join(dir, entry.name);
      if (entry.isDirectory() && (depth > 0 || STORE_DIRS.includes(entry.name))) {
        if (p !== this.paths.dir("work-orders", "finished") && dir !== this.paths.dir("events")) await this.removeTempFiles(p, depth + 1);
      } else if (entry.isFile() && TEMP_FILE_PATTERN.test(entry.name)) await this.removeTempFile(p);
    }
  }

  /** Deletes one temp file left by an interrupted write, with a warning. */
  async removeTempFile(p: string): Promise<void> {
    await unlink(p).catch(() => undefined);
    this.warn("removed a temp file left by an interrupted write", { path: this.reader.rel(p) });
  }

  /** Proto records `<id>.json` in `dir` that decode and pass `matches(record, id)`. */
  records<D extends DescMessage>(dir: string, schema: D, matches: (m: MessageShape<D>, id: string) => boolean): Promise<MessageShape<D>[]> {
    return this.plain(dir, (text) => codec.decodeMessage(schema, text), matches);
  }

  /** Records `<id>.json` in `dir`, decoded by `decode`; bad ones are quarantined. */
  async plain<T>(dir: string, decode: (text: string) => T, matches: (r: T, id: string) => boolean): Promise<T[]> {
    const files = (await list(dir)).filter((e) => e.isFile() && !e.name.startsWith("."));
    const out: T[] = [];
    await forEachLimit(files, async (f) => {
      const id = idOf(f.name);
      const r = await this.reader.read(join(dir, f.name), decode, (v) => isValidId(id) && matches(v, id));
      if (r !== undefined) out.push(r);
    });
    return out;
  }

  async workOrders(): Promise<{ orders: WorkOrder[]; finishedSummaryStale: boolean }> {
    const found = new Map<string, Array<{ stage: OrderDir; order: WorkOrder }>>();
    const matches = (stage: OrderDir) => (o: WorkOrder, id: string) => o.id === id && STAGE_STATUSES[stage].includes(o.status);
    const finishedDir = this.paths.dir("work-orders", "finished");
    const finished = await loadSummarised(
      finishedDir,
      ORDER_SUMMARY_ROWS,
      (name) =>
        this.reader.read(
          join(finishedDir, name),
          (t) => codec.decodeMessage(WorkOrderSchema, t),
          (o) => isValidId(idOf(name)) && matches("finished")(o, idOf(name)),
        ),
      (name) => this.removeTempFile(join(finishedDir, name)),
    );
    for (const stage of ORDER_DIRS.filter((d) => d !== "finished")) {
      const orders = await this.records(this.paths.dir("work-orders", stage), WorkOrderSchema, matches(stage));
      for (const order of orders) found.set(order.id, [...(found.get(order.id) ?? []), { stage, order }]);
    }
    // Copies to resolve are rare: only an unfinished order can also have a finished copy.
    for (const [id, copies] of found) {
      const done = finished.get(`${id}.json`);
      if (done) copies.push({ stage: "finished", order: done });
    }
    const result: WorkOrder[] = found.size === 0 ? finished.items : finished.items.filter((o) => !found.has(o.id));
    for (const [id, copies] of found) {
      copies.sort((a, b) => progressOf(b.order) - progressOf(a.order));
      result.push(copies[0]!.order);
      for (const stale of copies.slice(1)) {
        await this.fs.unlink(this.paths.workOrder(stale.stage, id));
        this.warn("removed a superseded work order copy left by an interrupted transition", {
          work_order_id: id,
          kept: copies[0]!.stage,
          removed: stale.stage,
        });
      }
    }
    return { orders: result, finishedSummaryStale: finished.stale };
  }

  async idempotency(now: Date): Promise<IdempotencyRecord[]> {
    const dir = this.paths.dir("idempotency");
    const all = await this.plain(dir, codec.decodeIdempotency, (r, id) => r.key === id && IDEMPOTENCY_KEY_PATTERN.test(id));
    const isLive = (r: IdempotencyRecord) => r.expiresAt.getTime() > now.getTime();
    // Concurrent, so the unlinks share directory fsyncs.
    await Promise.all(all.filter((r) => !isLive(r)).map((r) => this.fs.unlink(this.paths.idempotency(r.key))));
    return all.filter(isLive);
  }
}

// The id a record file is named for ("" when the name is not <id>.json).
function idOf(fileName: string): string {
  return fileName.endsWith(".json") ? fileName.slice(0, -5) : "";
}

// The ids of the record files `<id>.json` in `dir`.
async function recordIds(dir: string): Promise<string[]> {
  return (await list(dir)).filter((e) => e.isFile() && !e.name.startsWith(".") && isValidId(idOf(e.name))).map((e) => idOf(e.name));
}

async function list(dir: string) {
  try {
    return await readdir(dir, { withFileTypes: true });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw e;
  }
}

// Runs `fn` over `items` with bounded parallelism (startup reads thousands of small files).
async function forEachLimit<T>(items: T[], fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(READ_CONCURRENCY, items.length) }, worker));
}
