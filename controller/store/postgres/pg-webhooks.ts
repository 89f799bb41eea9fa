// The PostgreSQL store's webhooks: subscriptions, their deliveries (the columns the dispatcher
// filters and orders on, and the record as webhook-records.ts encodes it) and the cursor.
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { timestampKey } from "../record-keys.js";
import type * as S from "../store.js";
import { WebhookDeliveryState, type WebhookDelivery } from "../../../gen/skipper/v1/webhook_service_pb.js";
import type { JsonObject } from "@bufbuild/protobuf";
import { DELIVERY_PAGE, decodeDelivery, decodeWebhook, deliveryKey, dueAt, encodeDelivery, encodeWebhook } from "../webhook-records.js";
import { checkId } from "../../base/id-checks.js";
import { toColumn } from "./pg-records.js";
import type { PgDatabase } from "./pg-database.js";

// The columns of a delivery row, in the order the INSERT and UPDATE above name them.
function deliveryRow(r: S.WebhookDeliveryRecord): unknown[] {
  const d = r.delivery;
  return [
    d.id,
    d.webhookId,
    d.state,
    new Date(dueAt(d)),
    d.deliveredAt ? timestampDate(d.deliveredAt) : null,
    d.lastFailureAt ? timestampDate(d.lastFailureAt) : null,
    toColumn(deliveryKey(d)),
    JSON.stringify(encodeDelivery(r)),
  ];
}

/** The WebhookStore facet of the PostgreSQL store. */
export class PgWebhooks implements S.WebhookStore {
  constructor(private readonly db: PgDatabase) {}

  async putWebhook(record: S.WebhookRecord): Promise<void> {
    checkId(record.webhook.id, "id");
    await this.db.query(`INSERT INTO webhooks (id, body, created_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET body = $2`, [
      record.webhook.id,
      JSON.stringify(encodeWebhook(record)),
      record.webhook.createdAt ? timestampDate(record.webhook.createdAt) : new Date(0),
    ]);
  }

  async getWebhook(id: string): Promise<S.WebhookRecord | undefined> {
    const { rows } = await this.db.query<{ body: JsonObject }>("SELECT body FROM webhooks WHERE id = $1", [id]);
    return rows[0] && decodeWebhook(rows[0].body);
  }

  async listWebhooks(): Promise<S.WebhookRecord[]> {
    const { rows } = await this.db.query<{ body: JsonObject }>("SELECT body FROM webhooks ORDER BY created_at, id");
    return rows.map((r) => decodeWebhook(r.body));
  }

  async deleteWebhook(id: string): Promise<boolean> {
    return this.db.transaction("BEGIN", async (c) => {
      await c.query("DELETE FROM webhook_deliveries WHERE webhook_id = $1", [id]);
      const { rowCount } = await c.query("DELETE FROM webhooks WHERE id = $1", [id]);
      return (rowCount ?? 0) > 0;
    });
  }

  async enqueueWebhookDeliveries(records: S.WebhookDeliveryRecord[]): Promise<number> {
    let added = 0;
    for (const r of records) {
      checkId(r.delivery.id, "id");
      const { rowCount } = await this.db.query(
        `INSERT INTO webhook_deliveries (id, webhook_id, state, next_attempt_at, delivered_at, last_failure_at, sort_key, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING`,
        deliveryRow(r),
      );
      added += rowCount ?? 0;
    }
    return added;
  }

  async getWebhookDelivery(id: string): Promise<S.WebhookDeliveryRecord | undefined> {
    const { rows } = await this.db.query<{ body: JsonObject }>("SELECT body FROM webhook_deliveries WHERE id = $1", [id]);
    return rows[0] && decodeDelivery(rows[0].body);
  }

  async updateWebhookDelivery(delivery: WebhookDelivery, attemptOrderId?: string): Promise<boolean> {
    const current = await this.getWebhookDelivery(delivery.id);
    if (!current) return false;
    const { rowCount } = await this.db.query(
      `UPDATE webhook_deliveries SET webhook_id = $2, state = $3, next_attempt_at = $4, delivered_at = $5, last_failure_at = $6,
         sort_key = $7, body = $8 WHERE id = $1`,
      deliveryRow({ delivery, event: current.event, ...(attemptOrderId ? { attemptOrderId } : {}) }),
    );
    return (rowCount ?? 0) > 0;
  }

  async listWebhookDeliveries(filter: S.WebhookDeliveryFilter): Promise<S.Page<S.WebhookDeliveryRecord>> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (filter.webhookId) {
      args.push(filter.webhookId);
      where.push(`webhook_id = $${args.length}`);
    }
    if (filter.state) {
      args.push(filter.state);
      where.push(`state = $${args.length}`);
    }
    return this.db.page(filter, DELIVERY_PAGE, "webhook_deliveries", where, args, (body) => decodeDelivery(body as JsonObject));
  }

  async dueWebhookDeliveries(now: Date, limit: number, skipWebhookIds: readonly string[] = []): Promise<S.WebhookDeliveryRecord[]> {
    const { rows } = await this.db.query<{ body: JsonObject }>(
      `SELECT body FROM webhook_deliveries WHERE state = $1 AND next_attempt_at <= $2 AND NOT (webhook_id = ANY($4::text[]))
       ORDER BY next_attempt_at, id LIMIT $3`,
      [WebhookDeliveryState.PENDING, now, limit, [...skipWebhookIds]],
    );
    return rows.map((r) => decodeDelivery(r.body));
  }

  async webhookDeliveryStats(webhookId: string): Promise<S.WebhookDeliveryStats> {
    const { rows } = await this.db.query<{ backlog: string; dead: string; last_success: Date | null }>(
      `SELECT count(*) FILTER (WHERE state = $2) AS backlog, count(*) FILTER (WHERE state = $3) AS dead,
         max(delivered_at) AS last_success FROM webhook_deliveries WHERE webhook_id = $1`,
      [webhookId, WebhookDeliveryState.PENDING, WebhookDeliveryState.DEAD_LETTERED],
    );
    const failed = await this.db.query<{ body: JsonObject }>(
      "SELECT body FROM webhook_deliveries WHERE webhook_id = $1 AND last_failure_at IS NOT NULL ORDER BY last_failure_at DESC LIMIT 1",
      [webhookId],
    );
    const last = failed.rows[0] && decodeDelivery(failed.rows[0].body).delivery;
    return {
      backlog: Number(rows[0]?.backlog ?? 0),
      deadLettered: Number(rows[0]?.dead ?? 0),
      ...(rows[0]?.last_success ? { lastSuccessAt: rows[0].last_success } : {}),
      ...(last?.lastFailureAt ? { lastFailureAt: timestampDate(last.lastFailureAt) } : {}),
      lastFailure: last?.lastFailure ?? "",
    };
  }

  async pruneWebhookDeliveries(before: Date): Promise<number> {
    const { rowCount } = await this.db.query("DELETE FROM webhook_deliveries WHERE state <> $1 AND sort_key < $2", [
      WebhookDeliveryState.PENDING,
      toColumn(timestampKey(timestampFromDate(before))),
    ]);
    return rowCount ?? 0;
  }

  async getWebhookCursor(): Promise<Date | undefined> {
    const { rows } = await this.db.query<{ at: Date }>("SELECT at FROM webhook_cursor");
    return rows[0]?.at;
  }

  async putWebhookCursor(at: Date): Promise<void> {
    await this.db.query("INSERT INTO webhook_cursor (at) VALUES ($1) ON CONFLICT (singleton) DO UPDATE SET at = $1", [at]);
  }
}
