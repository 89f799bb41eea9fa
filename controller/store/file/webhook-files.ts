// The file store's webhook records: subscriptions under webhooks/subscriptions/, deliveries under
// webhooks/deliveries/ (one JSON file each, read at open and served from memory), and the
// dispatcher's cursor in webhooks/cursor.json. Every write goes through the store's durable,
// write-ahead-logged file system and its per-record lock; memory is updated once it is durable.
import { readFile } from "node:fs/promises";
import { WebhookDeliveryState, type WebhookDelivery } from "../../../gen/skipper/v1/webhook_service_pb.js";
import type { DurableFs } from "./atomic-write.js";
import { encodePlain } from "../record-codec.js";
import { readPage, SortedIndex } from "./sorted-index.js";
import { oldestFirst } from "./oldest-first.js";
import type * as S from "../store.js";
import type { StorePaths } from "./store-paths.js";
import {
  copyDelivery,
  copyWebhook,
  DELIVERY_PAGE,
  deliveryKey,
  deliveryStats,
  dueAt,
  encodeDelivery,
  encodeWebhook,
} from "../webhook-records.js";
import { timestampMs } from "@bufbuild/protobuf/wkt";

type Write = <T>(key: string, fn: () => Promise<T>) => Promise<T>;

/** Subscriptions, deliveries and the cursor, for FileStore. */
export class WebhookFiles {
  private webhooks = new Map<string, S.WebhookRecord>();
  private deliveries = new Map<string, S.WebhookDeliveryRecord>();
  private byCreation = new SortedIndex<S.WebhookDeliveryRecord>();
  // The pending ones apart: the delivery loop asks for due ones every second, and the delivered
  // and dead-lettered ones are most of a long history.
  private pending = new Map<string, S.WebhookDeliveryRecord>();
  private cursor: Date | undefined;

  constructor(
    private readonly paths: StorePaths,
    private readonly fs: DurableFs,
    private readonly write: Write,
  ) {}

  /** Takes what open() loaded, and reads the cursor. */
  async load(webhooks: S.WebhookRecord[], deliveries: S.WebhookDeliveryRecord[]): Promise<void> {
    this.webhooks = new Map(webhooks.map((r) => [r.webhook.id, r]));
    this.deliveries = new Map();
    this.pending = new Map();
    this.byCreation = new SortedIndex();
    this.byCreation.load(deliveries.map((r) => [deliveryKey(r.delivery), r]));
    for (const r of deliveries) {
      this.deliveries.set(r.delivery.id, r);
      if (r.delivery.state === WebhookDeliveryState.PENDING) this.pending.set(r.delivery.id, r);
    }
    const text = await readFile(this.paths.webhookCursor(), "utf8").catch(() => undefined);
    const at = text === undefined ? undefined : new Date((JSON.parse(text) as { at?: string }).at ?? "");
    this.cursor = at && !Number.isNaN(at.getTime()) ? at : undefined;
  }

  async put(record: S.WebhookRecord): Promise<void> {
    const stored = copyWebhook(record);
    await this.write(`webhook/${stored.webhook.id}`, async () => {
      await this.fs.writeFile(this.paths.webhook(stored.webhook.id), encodePlain(encodeWebhook(stored)));
      this.webhooks.set(stored.webhook.id, stored);
    });
  }

  get(id: string): S.WebhookRecord | undefined {
    const r = this.webhooks.get(id);
    return r && copyWebhook(r);
  }

  list(): S.WebhookRecord[] {
    return [...this.webhooks.values()].map(copyWebhook).sort(oldestFirst((r) => r.webhook));
  }

  async delete(id: string): Promise<boolean> {
    return this.write(`webhook/${id}`, async () => {
      const existed = this.webhooks.has(id);
      // The deliveries first: a crash in between leaves the subscription, and deleting it again finishes.
      for (const r of [...this.deliveries.values()].filter((d) => d.delivery.webhookId === id)) {
        await this.write(`webhook-delivery/${r.delivery.id}`, async () => {
          await this.fs.unlink(this.paths.webhookDelivery(r.delivery.id));
          this.forget(r.delivery);
        });
      }
      await this.fs.unlink(this.paths.webhook(id));
      this.webhooks.delete(id);
      return existed;
    });
  }

  async enqueue(records: S.WebhookDeliveryRecord[]): Promise<number> {
    let added = 0;
    for (const r of records) {
      const stored = copyDelivery(r);
      const id = stored.delivery.id;
      added += await this.write(`webhook-delivery/${id}`, async () => {
        if (this.deliveries.has(id)) return 0;
        await this.fs.writeFile(this.paths.webhookDelivery(id), encodePlain(encodeDelivery(stored)));
        this.remember(stored);
        return 1;
      });
    }
    return added;
  }

  getDelivery(id: string): S.WebhookDeliveryRecord | undefined {
    const r = this.deliveries.get(id);
    return r && copyDelivery(r);
  }

  async update(delivery: WebhookDelivery, attemptOrderId?: string): Promise<boolean> {
    const id = delivery.id;
    return this.write(`webhook-delivery/${id}`, async () => {
      const current = this.deliveries.get(id);
      if (!current) return false;
      const stored = copyDelivery({ delivery, event: current.event, ...(attemptOrderId ? { attemptOrderId } : {}) });
      await this.fs.writeFile(this.paths.webhookDelivery(id), encodePlain(encodeDelivery(stored)));
      this.forget(current.delivery);
      this.remember(stored);
      return true;
    });
  }

  listDeliveries(filter: S.WebhookDeliveryFilter): S.Page<S.WebhookDeliveryRecord> {
    const match = (r: S.WebhookDeliveryRecord) =>
      (!filter.webhookId || r.delivery.webhookId === filter.webhookId) && (!filter.state || r.delivery.state === filter.state);
    return readPage(this.byCreation, DELIVERY_PAGE.tag, filter, DELIVERY_PAGE.key, match, copyDelivery);
  }

  due(now: Date, limit: number, skipWebhookIds: readonly string[]): S.WebhookDeliveryRecord[] {
    return [...this.pending.values()]
      .filter((r) => dueAt(r.delivery) <= now.getTime() && !skipWebhookIds.includes(r.delivery.webhookId))
      .sort((a, b) => dueAt(a.delivery) - dueAt(b.delivery) || (a.delivery.id < b.delivery.id ? -1 : 1))
      .slice(0, limit)
      .map(copyDelivery);
  }

  stats(webhookId: string): S.WebhookDeliveryStats {
    return deliveryStats([...this.deliveries.values()].filter((r) => r.delivery.webhookId === webhookId).map((r) => r.delivery));
  }

  async prune(before: Date): Promise<number> {
    const old = [...this.deliveries.values()].filter(
      (r) =>
        r.delivery.state !== WebhookDeliveryState.PENDING && r.delivery.createdAt && timestampMs(r.delivery.createdAt) < before.getTime(),
    );
    let pruned = 0;
    for (const r of old) {
      pruned += await this.write(`webhook-delivery/${r.delivery.id}`, async () => {
        const current = this.deliveries.get(r.delivery.id);
        // A redelivery since the listing made it pending again: it stays.
        if (!current || current.delivery.state === WebhookDeliveryState.PENDING) return 0;
        await this.fs.unlink(this.paths.webhookDelivery(r.delivery.id));
        this.forget(current.delivery);
        return 1;
      });
    }
    return pruned;
  }

  getCursor(): Date | undefined {
    return this.cursor && new Date(this.cursor);
  }

  async putCursor(at: Date): Promise<void> {
    await this.write("webhook-cursor", async () => {
      await this.fs.writeFile(this.paths.webhookCursor(), encodePlain({ at: at.toISOString() }));
      this.cursor = new Date(at);
    });
  }

  private remember(r: S.WebhookDeliveryRecord): void {
    this.deliveries.set(r.delivery.id, r);
    this.byCreation.set(deliveryKey(r.delivery), r);
    if (r.delivery.state === WebhookDeliveryState.PENDING) this.pending.set(r.delivery.id, r);
  }

  private forget(d: WebhookDelivery): void {
    this.deliveries.delete(d.id);
    this.pending.delete(d.id);
    this.byCreation.delete(deliveryKey(d));
  }
}
