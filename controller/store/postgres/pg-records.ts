// How the PostgreSQL store maps contract messages to rows and back: the body of each row is the
// message as proto JSON (what the file store writes to a file), the other columns are derived from
// it for filtering and sorting. Sort keys are the in-memory indexes' keys (sorted-index.ts) with a
// space where those put a NUL, which text columns cannot hold; both sort below every id character.
import { fromJson, toJson, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Event } from "../../../gen/skipper/v1/event_pb.js";
import type { Resource } from "../../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder } from "../../../gen/skipper/v1/work_order_pb.js";
import { eventDay, timestampKey, tupleKey } from "../record-keys.js";
import { tenantOf } from "../../../common/resource-kinds.js";
import { FINISHED_STATUSES } from "../../../common/order-status.js";

/** The message as the JSON value a jsonb column holds. */
export function bodyOf<D extends DescMessage>(schema: D, msg: MessageShape<D>): string {
  return JSON.stringify(toJson(schema, msg, { useProtoFieldName: true }));
}

/** The message a jsonb column holds (pg has parsed it); fields of a newer schema are tolerated. */
export function messageOf<D extends DescMessage>(schema: D, body: unknown): MessageShape<D> {
  return fromJson(schema, body as JsonValue, { ignoreUnknownFields: true });
}

/** A sorted-index key as stored in a sort_key column, and back. */
export const toColumn = (key: string) => key.replaceAll("\0", " ");
export const fromColumn = (key: string) => key.replaceAll(" ", "\0");

/** The columns of a resource row, in the order of RESOURCE_COLUMNS. */
export function resourceColumns(r: Resource, body: string): unknown[] {
  const st = r.currentState?.kind.case === "deployment" ? r.currentState.kind.value : undefined;
  return [
    r.resourceType,
    r.id,
    toColumn(tupleKey(r.resourceType, r.id)),
    r.metadata?.resourceVersion ?? "0",
    r.deletion !== undefined,
    tenantOf(r) ?? null,
    JSON.stringify(r.metadata?.labels ?? {}),
    st ? st.phase : null,
    st?.finishedAt ? timestampDate(st.finishedAt) : null,
    body,
  ];
}

export const RESOURCE_COLUMNS = "resource_type, id, sort_key, version, deleted, tenant_id, labels, phase, finished_at, body";

/** A work order's listing key: (created_at, id). */
export function orderKey(o: Pick<WorkOrder, "createdAt" | "id">): string {
  return tupleKey(timestampKey(o.createdAt), o.id);
}

/** The columns of a work order row, in the order of ORDER_COLUMNS. */
export function orderColumns(o: WorkOrder, body: string): unknown[] {
  return [
    o.id,
    toColumn(orderKey(o)),
    o.status,
    o.target?.nodeId ?? "",
    o.target?.tenantId ?? "",
    o.priority,
    o.expiresAt ? timestampDate(o.expiresAt) : null,
    FINISHED_STATUSES.has(o.status) && o.finishedAt ? timestampDate(o.finishedAt) : null,
    body,
  ];
}

export const ORDER_COLUMNS = "id, sort_key, status, node_id, tenant_id, priority, expires_at, finished_at, body";

/** An event's listing key: (timestamp, id). */
export function eventKey(e: Event): string {
  return tupleKey(timestampKey(e.timestamp), e.id);
}

/** The columns of an event row, in the order of EVENT_COLUMNS. */
export function eventColumns(e: Event, body: string): unknown[] {
  return [
    eventDay(timestampDate(e.timestamp!)),
    e.id,
    toColumn(eventKey(e)),
    e.type,
    e.tenantId,
    e.resourceId,
    e.workOrderId,
    e.correlationId,
    e.revision.toString(),
    body,
  ];
}

export const EVENT_COLUMNS = "day, id, sort_key, type, tenant_id, resource_id, work_order_id, correlation_id, revision, body";

/** "$1, $2, ..." for n parameters starting at `from`. */
export function params(n: number, from = 1): string {
  return Array.from({ length: n }, (_, i) => `$${from + i}`).join(", ");
}
