// Pool orders (WorkOrderTarget.pool): offered to every node the pool admits (pool-eligibility.ts),
// claimed by the first that asks, exactly once per attempt (the store's compare-and-set, as any
// claim). Session pushes and polling both come here through nextOrderFor (order-lifecycle.ts); the
// feed rings every watch for a pool order no node holds (order-feed.ts), and a watch passes it on
// only to a node the pool admits (nodeMayHear), as only such a node may read it (checkNodeReach).
// While none can take it, a read of the order says why (WorkOrder.wait, computed here, never stored).
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import { forbidden, notClaimable } from "../base/errors.js";
import type { ResourceStore, WorkOrderStore } from "../store/store.js";
import type { ReconcileTriggers } from "../reconcile/triggers.js";
import { expiredAt, expireOrder } from "./order-expiry.js";
import type { OutcomeDeps } from "./order-outcome.js";
import { isPoolOrder, poolEligibility, poolWait } from "./pool-eligibility.js";

/** Pool orders read from the store at a time. */
export const POOL_PAGE = 100;

/**
 * Pool orders one look goes through at most: the ones it may not take are paged past (orders no
 * node can serve do not hide the rest); past this many, an order waits for those before it to be
 * claimed, expire or be cancelled.
 */
export const POOL_SCAN_MAX = 5000;

/** True when pending order `a` goes before `b`: higher priority, then older, then id. */
export function goesBefore(a: WorkOrder, b: WorkOrder): boolean {
  if (a.priority !== b.priority) return a.priority > b.priority;
  const ta = a.createdAt ? timestampDate(a.createdAt).getTime() : 0;
  const tb = b.createdAt ? timestampDate(b.createdAt).getTime() : 0;
  return ta !== tb ? ta < tb : a.id < b.id;
}

/**
 * The first pending pool order node `nodeId` may claim, or undefined: page by page past the ones
 * it may not take. Expired ones met on the way are failed (EXPIRED), as a node's own are.
 */
export async function nextPoolOrderFor(
  deps: OutcomeDeps & { now: () => Date; logger: Logger; triggers: ReconcileTriggers },
  nodeId: string,
): Promise<WorkOrder | undefined> {
  let node: Resource | undefined | null = null;
  let after: WorkOrder | undefined;
  for (let seen = 0; seen < POOL_SCAN_MAX; ) {
    const page = await deps.store.pendingPoolOrders(POOL_PAGE, after);
    if (page.length === 0) return undefined;
    // Read once, and only when some pool order waits.
    node ??= await deps.store.getResource("node", nodeId);
    if (!node || node.deletion) return undefined;
    for (const o of page) {
      if (expiredAt(o, deps.now())) await expireOrder(deps, o, deps.now());
      else if (poolEligibility(o, node).ok) return o;
    }
    if (page.length < POOL_PAGE) return undefined;
    seen += page.length;
    after = page[page.length - 1];
  }
  return undefined;
}

/**
 * Refuses node `nodeId`'s claim of pool order `order` (ClaimWorkOrder by id) when the pool does
 * not admit it: WORK_ORDER_NOT_CLAIMABLE with details.reason (NODE_DISABLED, NOT_IN_POOL,
 * CAPABILITY_MISSING, NOT_PERMITTED). A node's own order passes.
 */
export async function checkPoolClaim(store: ResourceStore, order: WorkOrder, nodeId: string): Promise<void> {
  if (!isPoolOrder(order) || order.status !== WorkOrderStatus.PENDING) return;
  const verdict = poolEligibility(order, await store.getResource("node", nodeId));
  if (!verdict.ok) {
    throw notClaimable(`node ${nodeId} may not claim pool order ${order.id}: ${verdict.message}`, {
      work_order_id: order.id,
      node_id: nodeId,
      reason: verdict.reason,
    });
  }
}

/**
 * Refuses node `nodeId` reading or acting on `order` (FORBIDDEN) unless it is its own, a pool
 * order it claimed once, or a pending pool order whose pool admits it (poolEligibility): a node
 * outside the pool reads neither its action nor what the order hands out. Whether it may claim it
 * now is checkPoolClaim's.
 */
export async function checkNodeReach(store: ResourceStore, order: WorkOrder, nodeId: string): Promise<void> {
  if (order.target?.nodeId === nodeId) return;
  if (isPoolOrder(order) && order.attempts.some((a) => a.nodeId === nodeId)) return;
  if (!isPoolOrder(order) || order.status !== WorkOrderStatus.PENDING) {
    throw forbidden(`work order ${order.id} belongs to another node`, { work_order_id: order.id });
  }
  const verdict = poolEligibility(order, await store.getResource("node", nodeId));
  if (!verdict.ok) {
    throw forbidden(`node ${nodeId} may not claim or read pool order ${order.id}: ${verdict.message}`, {
      work_order_id: order.id,
      node_id: nodeId,
      reason: verdict.reason,
    });
  }
}

/**
 * Whether a watch of node `nodeId` is told of `order` (order-feed.ts rings every watch for a pool
 * order no node holds): its own, or a pool order its pool admits. Never the action of one it may
 * not take.
 */
export async function nodeMayHear(store: ResourceStore, order: WorkOrder, nodeId: string): Promise<boolean> {
  if (order.target?.nodeId === nodeId) return true;
  if (!isPoolOrder(order) || (order.target?.nodeId ?? "") !== "") return false;
  return poolEligibility(order, await store.getResource("node", nodeId)).ok;
}

/** `orders` with each pending pool order's wait filled in from the nodes as stored now. */
export async function withPoolWaits(store: ResourceStore & WorkOrderStore, orders: WorkOrder[]): Promise<WorkOrder[]> {
  const waiting = orders.filter((o) => isPoolOrder(o) && o.status === WorkOrderStatus.PENDING);
  if (waiting.length === 0) return orders;
  const nodes = [];
  let pageToken = "";
  do {
    const page = await store.scanResources({ resourceType: "node", pageSize: 1000, pageToken });
    nodes.push(...page.items);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  for (const o of waiting) o.wait = poolWait(o, nodes);
  return orders;
}
