// The PostgreSQL store's events: one row per event, keyed by (day, id) so that appending one again is a no-op.
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { EventSchema, type Event } from "../../../gen/skipper/v1/event_pb.js";
import { timestampKey } from "../record-keys.js";
import type * as S from "../store.js";
import { eventTimestamp } from "../record-checks.js";
import { checkId } from "../../base/id-checks.js";
import { bodyOf, EVENT_COLUMNS, eventColumns, messageOf, params } from "./pg-records.js";
import { conditions, type Client, type PgDatabase } from "./pg-database.js";

const EVENT_PAGE = { tag: "events", key: /^\d{21}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/ };

// The SQL type of each of EVENT_COLUMNS, for rows given as a SELECT (whose parameters have no
// column to take a type from).
const EVENT_TYPES = ["date", "text", "text", "text", "text", "text", "text", "text", "bigint", "jsonb"];

/**
 * `events` as rows of the events table for an INSERT ... SELECT: `sql` (a query of them, its
 * parameters numbered from `from`) and `args`.
 */
export function eventRows(events: readonly Event[], from: number): { sql: string; args: unknown[] } {
  const args: unknown[] = [];
  const rows: string[] = [];
  for (const event of events) {
    eventTimestamp(event);
    checkId(event.id, "event_id");
    const cols = eventColumns(event, bodyOf(EventSchema, event));
    rows.push(`SELECT ${cols.map((_, i) => `$${from + args.length + i}::${EVENT_TYPES[i]}`).join(", ")}`);
    args.push(...cols);
  }
  return { sql: rows.join(" UNION ALL "), args };
}

/**
 * An INSERT of `events` that runs only when the statement's CTE `written` has a row: the record
 * they tell of and they are one statement, so one step (store.ts EventsOf). An event already
 * stored (same day and id) is left as it is.
 */
export function eventsIfWritten(events: readonly Event[], from: number): { sql: string; args: unknown[] } {
  if (events.length === 0) return { sql: "", args: [] };
  const rows = eventRows(events, from);
  return {
    sql: `, told AS (INSERT INTO events (${EVENT_COLUMNS}) SELECT * FROM (${rows.sql}) e WHERE EXISTS (SELECT 1 FROM written) ON CONFLICT (day, id) DO NOTHING)`,
    args: rows.args,
  };
}

/**
 * Inserts `events` on `c`, in the transaction of the record they tell of (store.ts EventsOf); one
 * already stored (same day and id) is left as it is.
 */
export async function insertEvents(c: Client, events: readonly Event[]): Promise<void> {
  if (events.length === 0) return;
  const rows = eventRows(events, 1);
  await c.query(`INSERT INTO events (${EVENT_COLUMNS}) ${rows.sql} ON CONFLICT (day, id) DO NOTHING`, rows.args);
}

/** The EventStore facet of the PostgreSQL store. */
export class PgEvents implements S.EventStore {
  constructor(private readonly db: PgDatabase) {}

  async appendEvent(event: Event): Promise<void> {
    eventTimestamp(event);
    checkId(event.id, "event_id");
    const cols = eventColumns(event, bodyOf(EventSchema, event));
    await this.db.query(`INSERT INTO events (${EVENT_COLUMNS}) VALUES (${params(cols.length)}) ON CONFLICT (day, id) DO NOTHING`, cols);
  }

  async listEvents(filter: S.EventFilter): Promise<S.Page<Event>> {
    const { where, args, arg } = conditions();
    if (filter.type) where.push(`type = ${arg(filter.type)}`);
    if (filter.tenantId) where.push(`tenant_id = ${arg(filter.tenantId)}`);
    if (filter.resourceId) where.push(`resource_id = ${arg(filter.resourceId)}`);
    if (filter.workOrderId) where.push(`work_order_id = ${arg(filter.workOrderId)}`);
    if (filter.correlationId) where.push(`correlation_id = ${arg(filter.correlationId)}`);
    if (filter.since) where.push(`sort_key >= ${arg(timestampKey(timestampFromDate(filter.since)))}`);
    if (filter.sinceRevision !== undefined) where.push(`revision > ${arg(filter.sinceRevision.toString())}`);
    return this.db.page(filter, EVENT_PAGE, "events", where, args, (body) => messageOf(EventSchema, body));
  }

  async pruneEvents(before: Date): Promise<number> {
    // sort_key begins with the timestamp's key, so "< key of before" is "older than before".
    const { rowCount } = await this.db.query("DELETE FROM events WHERE sort_key < $1", [timestampKey(timestampFromDate(before))]);
    return rowCount ?? 0;
  }
}
