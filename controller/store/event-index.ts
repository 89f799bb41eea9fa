// In-memory index over the event log, by id (appends are idempotent by id) and in listing order
// (timestamp, id), so `since` and page tokens become a binary search.
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import { readPage } from "./paging.js";
import { SortedIndex, timestampKey, tupleKey } from "./sorted-index.js";
import type { EventFilter, Page } from "./store.js";

const PAGE_TAG = "events";
const KEY_PATTERN = /^\d{21}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Events held in memory; stored messages are never handed out (callers get clones). */
export class EventIndex {
  private readonly byId = new Map<string, Event>();
  private readonly ordered = new SortedIndex<Event>();

  /** Rebuilds from the events found on disk. */
  load(events: Event[]): void {
    for (const e of events) this.byId.set(e.id, e);
    this.ordered.load(events.map((e) => [eventKey(e), e]));
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  add(event: Event): void {
    this.byId.set(event.id, event);
    this.ordered.set(eventKey(event), event);
  }

  /** Forgets every event older than `before`; returns them. */
  removeBefore(before: Date): Event[] {
    const gone = this.ordered.dropBefore(tupleKey(timestampKey(timestampFromDate(before)), ""));
    for (const e of gone) this.byId.delete(e.id);
    return gone;
  }

  /** A page of events in (timestamp, id) order matching the filter; `out` copies each one. */
  list(filter: EventFilter, out: (e: Event) => Event): Page<Event> {
    const match = (e: Event) =>
      (!filter.type || e.type === filter.type) &&
      (!filter.tenantId || e.tenantId === filter.tenantId) &&
      (!filter.resourceId || e.resourceId === filter.resourceId) &&
      (!filter.workOrderId || e.workOrderId === filter.workOrderId) &&
      (!filter.correlationId || e.correlationId === filter.correlationId) &&
      (filter.sinceRevision === undefined || e.revision > filter.sinceRevision);
    const from = filter.since ? timestampKey(timestampFromDate(filter.since)) : undefined;
    return readPage(this.ordered, PAGE_TAG, filter, KEY_PATTERN, match, out, from);
  }
}

function eventKey(e: Event): string {
  return tupleKey(timestampKey(e.timestamp), e.id);
}
