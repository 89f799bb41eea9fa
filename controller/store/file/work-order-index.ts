// In-memory indexes over work orders: by id, in listing order (created_at, id), and the pending
// orders of each node in the same order, so "next pending for node X" is a lookup, not a scan;
// and a running count per status and type, so counting them is not a scan either.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { WorkOrderStatus, type WorkOrder } from "../../../gen/skipper/v1/work_order_pb.js";
import { timestampKey, tupleKey } from "../record-keys.js";
import { readPage, SortedIndex } from "./sorted-index.js";
import type { Page, WorkOrderCount, WorkOrderFilter } from "../store.js";
import type { OrderDir } from "./store-paths.js";
import { FINISHED_STATUSES } from "../../../common/order-status.js";

const PAGE_TAG = "work-orders";

/** Where a page of pending pool orders resumes: after the order with these (it need not be pending still). */
type PoolOrderCursor = Pick<WorkOrder, "priority" | "createdAt" | "id">;
const KEY_PATTERN = /^\d{21}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** The stage directory an order with this status lives in. */
export function stageOf(status: WorkOrderStatus): OrderDir {
  if (status === WorkOrderStatus.PENDING || status === WorkOrderStatus.RETRY_PENDING) return "pending";
  if (status === WorkOrderStatus.RUNNING) return "running";
  return "finished";
}

/** Work orders held in memory; stored messages are never handed out (callers get clones). */
export class WorkOrderIndex {
  private readonly byId = new Map<string, WorkOrder>();
  private readonly ordered = new SortedIndex<WorkOrder>();
  private readonly pendingByNode = new Map<string, SortedIndex<WorkOrder>>();
  // Listing by status (start-up recovery lists RUNNING) should not walk every finished order.
  private readonly byStatus = new Map<WorkOrderStatus, SortedIndex<WorkOrder>>();
  // Listing one tenant's orders (the reconciler's in-flight check, Explain) reads only those.
  private readonly byTenant = new Map<string, SortedIndex<WorkOrder>>();
  // How many orders of each status and type ("<status>/<type>"), kept with every change.
  private readonly tally = new Map<string, WorkOrderCount>();

  /** Rebuilds from the orders found on disk (each key computed once: open() loads a whole history). */
  load(orders: WorkOrder[]): void {
    // Sorted once: the status and tenant indexes take their entries in that order.
    const keyed = this.ordered.load(orders.map((o): [string, WorkOrder] => [orderKey(o), o]));
    const byStatus = new Map<WorkOrderStatus, Array<[string, WorkOrder]>>();
    const byTenant = new Map<string, Array<[string, WorkOrder]>>();
    for (const entry of keyed) {
      const o = entry[1];
      this.byId.set(o.id, o);
      this.count(o, 1);
      listIn(byStatus, o.status).push(entry);
      listIn(byTenant, tenantOf(o)).push(entry);
      if (o.status === WorkOrderStatus.PENDING) this.pendingOf(nodeOf(o)).set(pendingKey(o), o);
    }
    for (const [status, entries] of byStatus) this.statusIndex(status).loadSorted(entries);
    for (const [tenant, entries] of byTenant) this.tenantIndex(tenant).loadSorted(entries);
  }

  get(id: string): WorkOrder | undefined {
    return this.byId.get(id);
  }

  /** Inserts or replaces an order, moving it between the pending index and the rest. */
  put(order: WorkOrder): void {
    const prev = this.byId.get(order.id);
    if (prev) {
      this.count(prev, -1);
      // created_at never changes, so this is normally an in-place replace by set() below.
      if (orderKey(prev) !== orderKey(order)) this.ordered.delete(orderKey(prev));
      this.statusIndex(prev.status).delete(orderKey(prev));
      const pending = this.pendingByNode.get(nodeOf(prev));
      pending?.delete(pendingKey(prev));
      if (pending?.size === 0) this.pendingByNode.delete(nodeOf(prev));
    }
    if (prev && orderKey(prev) !== orderKey(order)) this.tenantIndex(tenantOf(prev)).delete(orderKey(prev));
    this.byId.set(order.id, order);
    this.count(order, 1);
    this.ordered.set(orderKey(order), order);
    this.tenantIndex(tenantOf(order)).set(orderKey(order), order);
    this.statusIndex(order.status).set(orderKey(order), order);
    if (order.status === WorkOrderStatus.PENDING) this.pendingOf(nodeOf(order)).set(pendingKey(order), order);
  }

  /**
   * Removes the finished orders (SUCCESS, FAILED, CANCELLED) that finished before `before`, except
   * those in `keep`; returns them. One pass over each index, not one splice per order.
   */
  removeFinished(before: Date, keep: ReadonlySet<string>): WorkOrder[] {
    const gone = new Set<WorkOrder>();
    for (const status of FINISHED_STATUSES) {
      for (const [, o] of this.statusIndex(status).entries()) {
        if (!keep.has(o.id) && o.finishedAt !== undefined && timestampDate(o.finishedAt) < before) gone.add(o);
      }
    }
    if (gone.size === 0) return [];
    const drop = (o: WorkOrder) => gone.has(o);
    this.ordered.deleteWhere(drop);
    for (const status of FINISHED_STATUSES) this.statusIndex(status).deleteWhere(drop);
    const tenants = new Set([...gone].map(tenantOf));
    for (const t of tenants) {
      const idx = this.tenantIndex(t);
      idx.deleteWhere(drop);
      if (idx.size === 0) this.byTenant.delete(t);
    }
    for (const o of gone) {
      this.byId.delete(o.id);
      this.count(o, -1);
    }
    return [...gone];
  }

  /** How many orders there are of each status and type (pairs with none left out). */
  counts(): WorkOrderCount[] {
    return [...this.tally.values()].map((c) => ({ ...c }));
  }

  /** How many orders are finished (SUCCESS, FAILED, CANCELLED). */
  get finishedCount(): number {
    let n = 0;
    for (const status of FINISHED_STATUSES) n += this.byStatus.get(status)?.size ?? 0;
    return n;
  }

  /** Every finished order (SUCCESS, FAILED, CANCELLED), in listing order. */
  *finished(): Generator<WorkOrder> {
    for (const [, o] of this.ordered.entries()) if (FINISHED_STATUSES.has(o.status)) yield o;
  }

  /** The pending order for `nodeId` to run next: highest priority, then oldest. */
  nextPending(nodeId: string): WorkOrder | undefined {
    return this.pendingByNode.get(nodeId)?.first();
  }

  /** Up to `limit` pending pool orders (held by no node), in the order nextPending takes them; after `after`, when given. */
  pendingPool(limit: number, after?: PoolOrderCursor): WorkOrder[] {
    const out: WorkOrder[] = [];
    const from = after && pendingKey(after);
    for (const [, o] of this.pendingByNode.get("")?.entries({ after: from }) ?? []) {
      if (out.length >= limit) break;
      if (o.target?.pool) out.push(o);
    }
    return out;
  }

  countPending(nodeId: string): number {
    return this.pendingByNode.get(nodeId)?.size ?? 0;
  }

  /** A page of orders in (created_at, id) order matching the filter; `out` copies each one. */
  list(filter: WorkOrderFilter, out: (o: WorkOrder) => WorkOrder): Page<WorkOrder> {
    const status = filter.status ?? WorkOrderStatus.UNSPECIFIED;
    const match = (o: WorkOrder) =>
      (status === WorkOrderStatus.UNSPECIFIED || o.status === status) &&
      (!filter.statuses || filter.statuses.includes(o.status)) &&
      (!filter.nodeId || nodeOf(o) === filter.nodeId) &&
      (!filter.tenantId || o.target?.tenantId === filter.tenantId) &&
      (!filter.expiresBy || (o.expiresAt !== undefined && timestampDate(o.expiresAt) <= filter.expiresBy));
    // Read the smallest index that holds every match.
    let source = this.ordered;
    if (filter.tenantId) source = this.byTenant.get(filter.tenantId) ?? new SortedIndex<WorkOrder>();
    else if (status !== WorkOrderStatus.UNSPECIFIED) source = this.statusIndex(status);
    return readPage(source, PAGE_TAG, filter, KEY_PATTERN, match, out);
  }

  private count(o: WorkOrder, delta: 1 | -1): void {
    const key = `${o.status}/${o.type}`;
    const c = this.tally.get(key) ?? { status: o.status, type: o.type, count: 0 };
    c.count += delta;
    if (c.count > 0) this.tally.set(key, c);
    else this.tally.delete(key);
  }

  private statusIndex(status: WorkOrderStatus): SortedIndex<WorkOrder> {
    return indexIn(this.byStatus, status);
  }

  private tenantIndex(tenantId: string): SortedIndex<WorkOrder> {
    return indexIn(this.byTenant, tenantId);
  }

  private pendingOf(nodeId: string): SortedIndex<WorkOrder> {
    return indexIn(this.pendingByNode, nodeId);
  }
}

function listIn<K, V>(map: Map<K, V[]>, key: K): V[] {
  let list = map.get(key);
  if (!list) map.set(key, (list = []));
  return list;
}

/** The index under `key`, created empty on first use. */
function indexIn<K>(map: Map<K, SortedIndex<WorkOrder>>, key: K): SortedIndex<WorkOrder> {
  let idx = map.get(key);
  if (!idx) map.set(key, (idx = new SortedIndex<WorkOrder>()));
  return idx;
}

function tenantOf(o: WorkOrder): string {
  return o.target?.tenantId ?? "";
}

function nodeOf(o: WorkOrder): string {
  return o.target?.nodeId ?? "";
}

// Priority first (higher sorts first: the key holds 2^31-1 - priority), then the listing order.
function pendingKey(o: PoolOrderCursor): string {
  return tupleKey(String(2147483647 - o.priority).padStart(10, "0"), orderKey(o));
}

function orderKey(o: Pick<WorkOrder, "createdAt" | "id">): string {
  return tupleKey(timestampKey(o.createdAt), o.id);
}
