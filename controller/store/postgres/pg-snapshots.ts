// The PostgreSQL store's snapshots: one row per slot, holding the text the file store writes.
import { SnapshotSchema, type Snapshot } from "../../../gen/skipper/v1/snapshot_pb.js";
import { encodeSnapshot } from "../record-codec.js";
import type * as S from "../store.js";
import { snapshotSlot } from "../record-checks.js";
import { messageOf } from "./pg-records.js";
import type { PgDatabase } from "./pg-database.js";

/** The SnapshotStore facet of the PostgreSQL store. */
export class PgSnapshots implements S.SnapshotStore {
  constructor(private readonly db: PgDatabase) {}

  async putSnapshot(snapshot: Snapshot): Promise<void> {
    const slot = snapshotSlot(snapshot.scope, snapshot.tenantId);
    // The text the file store writes, made a slice at a time (a system snapshot is big).
    const text = await encodeSnapshot(snapshot);
    await this.db.query(
      "INSERT INTO snapshots (slot, body, updated_at) VALUES ($1, $2, now()) ON CONFLICT (slot) DO UPDATE SET body = $2, updated_at = now()",
      [slot, text],
    );
  }

  async getLatestSnapshot(scope: "system" | "tenant", tenantId?: string): Promise<Snapshot | undefined> {
    const slot = snapshotSlot(scope, tenantId ?? "");
    const { rows } = await this.db.query<{ body: unknown }>("SELECT body FROM snapshots WHERE slot = $1", [slot]);
    return rows[0] && messageOf(SnapshotSchema, rows[0].body);
  }
}
