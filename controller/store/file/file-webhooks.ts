// The file store's webhooks: webhooks/subscriptions/, webhooks/deliveries/ and the dispatcher's
// cursor, held in memory from open (webhook-files.ts); reads ask that the store be open.
import type { WebhookDelivery } from "../../../gen/skipper/v1/webhook_service_pb.js";
import type * as S from "../store.js";
import type { FileCore } from "./file-core.js";
import { WebhookFiles } from "./webhook-files.js";

/** The WebhookStore facet of the file store. */
export class FileWebhooks implements S.WebhookStore {
  readonly files: WebhookFiles;

  constructor(private readonly core: FileCore) {
    this.files = new WebhookFiles(core.paths, core.fs, (key, fn) => core.write(key, fn));
  }

  putWebhook(record: S.WebhookRecord): Promise<void> {
    return this.files.put(record);
  }

  async getWebhook(id: string): Promise<S.WebhookRecord | undefined> {
    this.core.ensureOpen();
    return this.files.get(id);
  }

  async listWebhooks(): Promise<S.WebhookRecord[]> {
    this.core.ensureOpen();
    return this.files.list();
  }

  deleteWebhook(id: string): Promise<boolean> {
    return this.files.delete(id);
  }

  enqueueWebhookDeliveries(records: S.WebhookDeliveryRecord[]): Promise<number> {
    return this.files.enqueue(records);
  }

  async getWebhookDelivery(id: string): Promise<S.WebhookDeliveryRecord | undefined> {
    this.core.ensureOpen();
    return this.files.getDelivery(id);
  }

  updateWebhookDelivery(delivery: WebhookDelivery, attemptOrderId?: string): Promise<boolean> {
    return this.files.update(delivery, attemptOrderId);
  }

  async listWebhookDeliveries(filter: S.WebhookDeliveryFilter): Promise<S.Page<S.WebhookDeliveryRecord>> {
    this.core.ensureOpen();
    return this.files.listDeliveries(filter);
  }

  async dueWebhookDeliveries(now: Date, limit: number, skipWebhookIds: readonly string[] = []): Promise<S.WebhookDeliveryRecord[]> {
    this.core.ensureOpen();
    return this.files.due(now, limit, skipWebhookIds);
  }

  async webhookDeliveryStats(webhookId: string): Promise<S.WebhookDeliveryStats> {
    this.core.ensureOpen();
    return this.files.stats(webhookId);
  }

  pruneWebhookDeliveries(before: Date): Promise<number> {
    return this.files.prune(before);
  }

  async getWebhookCursor(): Promise<Date | undefined> {
    this.core.ensureOpen();
    return this.files.getCursor();
  }

  putWebhookCursor(at: Date): Promise<void> {
    return this.files.putCursor(at);
  }
}
