// The PostgreSQL store's audit trail. An append takes an advisory lock of its own for its
// transaction, reads the last row and inserts the next (audit-chain.ts), so entries are numbered
// and chained in one order whichever controller writes them. The row keeps the entry's text as
// made (a text column).
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { AuditEntry } from "../../../gen/skipper/v1/audit_service_pb.js";
import { auditDay, auditTime, chainAuditEntry, readAuditLine, type AuditHead } from "../audit-chain.js";
import { decodePageToken, encodePageToken, pageSizeOf } from "../paging.js";
import { eventDay } from "../record-keys.js";
import type * as S from "../store.js";
import { conditions, type PgDatabase } from "./pg-database.js";

// An audit page resumes after a sequence number.
const AUDIT_PAGE = { tag: "audit", key: /^\d{1,19}$/ };

// Rows the scan for verification reads at a time.
const AUDIT_SCAN_ROWS = 1000;

// The audit trail's append lock: ("skip", "audt"), apart from the gate and every other lock.
const BEGIN_AUDIT_APPEND = "BEGIN; SELECT pg_advisory_xact_lock(1936421232, 1635083380)";

interface AuditRow {
  seq: string;
  recorded_at: Date;
  text: string;
}

// The head the next entry chains to: the row's number, and its hash and time as its text holds
// them. A row whose text was spoiled gives "" (verification reports that row).
function headOfRow(row: AuditRow): AuditHead {
  const line = readAuditLine(row.text);
  return {
    sequence: BigInt(row.seq),
    hash: line.ok ? line.entry.hash : "",
    time: line.ok ? line.entry.time! : timestampFromDate(row.recorded_at),
  };
}

/** The AuditStore facet of the PostgreSQL store. */
export class PgAudit implements S.AuditStore {
  constructor(private readonly db: PgDatabase) {}

  async appendAuditEntry(draft: S.AuditDraft): Promise<AuditEntry> {
    // Sequence numbers come back as text (bigint) named `seq`: named `sequence`, ORDER BY sequence
    // would sort by that text column ("9" after "10").
    return this.db.transaction(BEGIN_AUDIT_APPEND, async (c) => {
      const { rows } = await c.query<AuditRow>(
        "SELECT sequence::text AS seq, recorded_at, text FROM audit_entries ORDER BY sequence DESC LIMIT 1",
      );
      const { entry, text } = chainAuditEntry(draft, rows[0] && headOfRow(rows[0]));
      await c.query("INSERT INTO audit_entries (sequence, day, recorded_at, text) VALUES ($1, $2, $3, $4)", [
        entry.sequence.toString(),
        auditDay(entry),
        auditTime(entry),
        text,
      ]);
      return entry;
    });
  }

  async listAuditEntries(filter: S.AuditFilter): Promise<S.Page<AuditEntry>> {
    const size = pageSizeOf(filter);
    const after = decodePageToken(AUDIT_PAGE.tag, filter.pageToken, AUDIT_PAGE.key);
    const { where, args, arg } = conditions();
    if (filter.since) where.push(`recorded_at >= ${arg(filter.since)}`);
    if (filter.until) where.push(`recorded_at < ${arg(filter.until)}`);
    if (after !== undefined) where.push(`sequence > ${arg(after)}`);
    const { rows } = await this.db.query<{ seq: string; text: string }>(
      `SELECT sequence::text AS seq, text FROM audit_entries${where.length ? ` WHERE ${where.join(" AND ")}` : ""}
        ORDER BY sequence LIMIT ${arg(size + 1)}`,
      args,
    );
    const page = rows.slice(0, size);
    const items: AuditEntry[] = [];
    for (const r of page) {
      const line = readAuditLine(r.text);
      if (line.ok) items.push(line.entry);
    }
    return { items, nextPageToken: rows.length > size ? encodePageToken(AUDIT_PAGE.tag, page.at(-1)!.seq) : "" };
  }

  async *scanAuditEntries(): AsyncIterable<S.StoredAuditEntry> {
    for (let after = "0"; ; ) {
      const { rows } = await this.db.query<{ seq: string; text: string }>(
        "SELECT sequence::text AS seq, text FROM audit_entries WHERE sequence > $1 ORDER BY sequence LIMIT $2",
        [after, AUDIT_SCAN_ROWS],
      );
      for (const r of rows) yield { location: `audit_entries sequence ${r.seq}`, text: r.text };
      if (rows.length < AUDIT_SCAN_ROWS) return;
      after = rows.at(-1)!.seq;
    }
  }

  async pruneAuditEntries(before: Date): Promise<number> {
    // Whole days before the cutoff's, never the last entry's day (numbering and the chain go on from it).
    const { rowCount } = await this.db.query(
      `DELETE FROM audit_entries
        WHERE day < $1::date AND day < (SELECT day FROM audit_entries ORDER BY sequence DESC LIMIT 1)`,
      [eventDay(before)],
    );
    return rowCount ?? 0;
  }
}
