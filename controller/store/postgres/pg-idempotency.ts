// The PostgreSQL store's idempotency records: one row per key; an expired one is deleted when next asked for.
import type * as S from "../store.js";
import type { PgDatabase } from "./pg-database.js";

/** The IdempotencyStore facet of the PostgreSQL store. */
export class PgIdempotency implements S.IdempotencyStore {
  constructor(private readonly db: PgDatabase) {}

  async getIdempotencyRecord(key: string, now: Date): Promise<S.IdempotencyRecord | undefined> {
    const { rows } = await this.db.query<{ request_hash: string; response: unknown; created_at: Date; expires_at: Date }>(
      "SELECT request_hash, response, created_at, expires_at FROM idempotency_records WHERE key = $1",
      [key],
    );
    const r = rows[0];
    if (!r) return undefined;
    if (r.expires_at.getTime() > now.getTime()) {
      return { key, requestHash: r.request_hash, response: r.response, createdAt: r.created_at, expiresAt: r.expires_at };
    }
    // Expired: drop it now (unless it was replaced meanwhile).
    await this.db.query("DELETE FROM idempotency_records WHERE key = $1 AND expires_at <= $2", [key, now]);
    return undefined;
  }

  async putIdempotencyRecord(record: S.IdempotencyRecord): Promise<void> {
    await this.db.query(
      `INSERT INTO idempotency_records (key, request_hash, response, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (key) DO UPDATE SET request_hash = $2, response = $3, created_at = $4, expires_at = $5`,
      [record.key, record.requestHash, JSON.stringify(record.response ?? null), record.createdAt, record.expiresAt],
    );
  }
}
