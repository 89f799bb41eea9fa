// Walks a listing page by page: every resource, work order or event a filter matches, for callers
// that need them all (sweeps, retention, recovery, the newest of a long history) rather than one page.
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { EventFilter, Page, PageRequest, ResourceFilter, Store, WorkOrderFilter } from "./store.js";

// Every item of a listing, in its order, read `pageSize` at a time (default 1000).
async function* eachOf<F extends PageRequest, T>(list: (f: F) => Promise<Page<T>>, filter: Omit<F, "pageToken">): AsyncGenerator<T> {
  let pageToken = "";
  do {
    const page = await list({ pageSize: 1000, ...filter, pageToken } as F);
    yield* page.items;
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
}

/** Every resource `filter` matches, in listing order. */
export function eachResource(store: Store, filter: Omit<ResourceFilter, "pageToken">): AsyncGenerator<Resource> {
  return eachOf((f: ResourceFilter) => store.listResources(f), filter);
}

/**
 * Every resource `filter` matches, as scanResources hands them out: frozen, shared with the
 * store, for a pass that only reads them (a change throws).
 */
export function eachScannedResource(
  store: Pick<Store, "scanResources">,
  filter: Omit<ResourceFilter, "pageToken">,
): AsyncGenerator<Resource> {
  return eachOf((f: ResourceFilter) => store.scanResources(f), filter);
}

/** eachScannedResource, collected: frozen resources, to read only. */
export function scannedResources(store: Store, filter: Omit<ResourceFilter, "pageToken">): Promise<Resource[]> {
  return collected(eachScannedResource(store, filter));
}

/** Every work order `filter` matches, in listing order. */
export function eachWorkOrder(store: Store, filter: Omit<WorkOrderFilter, "pageToken">): AsyncGenerator<WorkOrder> {
  return eachOf((f: WorkOrderFilter) => store.listWorkOrders(f), filter);
}

/** Every event `filter` matches, oldest first. */
export function eachEvent(store: Store, filter: Omit<EventFilter, "pageToken">): AsyncGenerator<Event> {
  return eachOf((f: EventFilter) => store.listEvents(f), filter);
}

/** eachResource, collected. */
export function allResources(store: Store, filter: Omit<ResourceFilter, "pageToken">): Promise<Resource[]> {
  return collected(eachResource(store, filter));
}

async function collected<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}
