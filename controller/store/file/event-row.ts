// An event as the event log indexes it: its listing key, its file name and the fields listings
// filter on, without its body (data, request id, ...), which is read from its file when the event
// is listed. Events are never rewritten, so a row never goes stale while its file exists.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Event } from "../../../gen/skipper/v1/event_pb.js";
import { eventFileName } from "./store-paths.js";
import { timestampKey, tupleKey } from "../record-keys.js";
import type { SummaryRows } from "./summary-file.js";

/** The indexed fields of one stored event. */
export interface EventRow {
  /** (timestamp, id) as a sortable key: the listing order. */
  key: string;
  id: string;
  /** The file name in its day directory. */
  name: string;
  type: string;
  tenantId: string;
  resourceId: string;
  workOrderId: string;
  correlationId: string;
  revision: bigint;
}

/** The row of a stored event. */
export function rowOf(e: Event): EventRow {
  return {
    key: tupleKey(timestampKey(e.timestamp), e.id),
    id: e.id,
    name: eventFileName(timestampDate(e.timestamp!), e.id),
    type: e.type,
    tenantId: e.tenantId,
    resourceId: e.resourceId,
    workOrderId: e.workOrderId,
    correlationId: e.correlationId,
    revision: e.revision,
  };
}

/** Rows of a day's summary file (summary-file.ts); the file name is the row's first column. */
export const EVENT_SUMMARY_ROWS: SummaryRows<EventRow> = {
  toRow: (r) => [r.key, r.name, r.type, r.tenantId, r.resourceId, r.workOrderId, r.correlationId, r.revision.toString()],
  fromRow: (v) => {
    if (v.length !== 8) throw new Error("an event summary row has the wrong number of columns");
    const key = v[0]!;
    if (!/^\d{21}\0/.test(key)) throw new Error("bad key in an event summary row");
    if (!/^\d{1,20}$/.test(v[7]!)) throw new Error("bad revision in an event summary row");
    return {
      key,
      id: key.slice(22),
      name: v[1]!,
      type: v[2]!,
      tenantId: v[3]!,
      resourceId: v[4]!,
      workOrderId: v[5]!,
      correlationId: v[6]!,
      revision: BigInt(v[7]!),
    };
  },
};
