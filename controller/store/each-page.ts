// Walks a listing page by page: every resource, work order or event a filter matches, for callers
// that need them all (sweeps, retention, recovery, the newest of a long history) rather than one page.
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { EventFilter, ResourceFilter, Store, WorkOrderFilter } from "./store.js";

/** Every resource `filter` matches, in listing order, read `pageSize` at a time (default 1000). */
export async function* eachResource(store: Store, filter: Omit<ResourceFilter, "pageToken">): AsyncGenerator<Resource> {
  let pageToken = "";
  do {
    const page = await store.listResources({ pageSize: 1000, ...filter, pageToken });
    yield* page.items;
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
}

/** Every work order `filter` matches, in listing order, read `pageSize` at a time (default 1000). */
export async function* eachWorkOrder(store: Store, filter: Omit<WorkOrderFilter, "pageToken">): AsyncGenerator<WorkOrder> {
  let pageToken = "";
  do {
    const page = await store.listWorkOrders({ pageSize: 1000, ...filter, pageToken });
    yield* page.items;
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
}

/** Every event matching `filter`, page by page (oldest first). */
export async function* eachEvent(store: Store, filter: Omit<EventFilter, "pageToken">): AsyncGenerator<Event> {
  let pageToken = "";
  do {
    const page = await store.listEvents({ pageSize: 1000, ...filter, pageToken });
    yield* page.items;
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
}

/** eachResource, collected. */
export async function allResources(store: Store, filter: Omit<ResourceFilter, "pageToken">): Promise<Resource[]> {
  const out: Resource[] = [];
  for await (const r of eachResource(store, filter)) out.push(r);
  return out;
}
