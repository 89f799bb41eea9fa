// The PostgreSQL store's events: one row per event, keyed by (day, id) so that appending one again is a no-op.
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { EventSchema, type Event } from "../../../gen/skipper/v1/event_pb.js";
import { timestampKey } from "../record-keys.js";
import type * as S from "../store.js";
import { eventTimestamp } from "../record-checks.js";
import { checkId } from "../../base/id-checks.js";
import { bodyOf, EVENT_COLUMNS, eventColumns, messageOf, params } from "./pg-records.js";
import { conditions, type PgDatabase } from "./pg-database.js";

const EVENT_PAGE = { tag: "events", key: /^\d{21}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/ };

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
