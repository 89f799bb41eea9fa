// Pool orders (WorkOrderTarget.pool): offered to every node the pool admits (pool-eligibility.ts),
// claimed by the first that asks, exactly once per attempt (the store's compare-and-set, as any
// claim). Session pushes and polling both come here through nextOrderFor (order-lifecycle.ts); the
// feed rings every watch for a pool order no node holds (order-feed.ts). While none can take it,
// a read of the order says why (WorkOrder.wait, computed here, never stored).
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import { notClaimable } from "../base/errors.js";
import type { ResourceStore, WorkOrderStore } from "../store/store.js";
import type { ReconcileTriggers } from "../reconcile/triggers.js";
import { expiredAt, expireOrder } from "./order-expiry.js";
import type { OutcomeDeps } from "./order-outcome.js";
import { isPoolOrder, poolEligibility, poolWait } from "./pool-eligibility.js";

/** Pool orders one look goes through for a node (the oldest of the highest priority first). */
export const POOL_SCAN = 100;

/** True when pending order `a` goes before `b`: higher priority, then older, then id. */
export function goesBefore(a: WorkOrder, b: WorkOrder): boolean {
  if (a.priority !== b.priority) return a.priority > b.priority;
  const ta = a.createdAt ? timestampDate(a.createdAt).getTime() : 0;
  const tb = b.createdAt ? timestampDate(b.createdAt).getTime() : 0;
  return ta !== tb ? ta < tb : a.id < b.id;
}

/**
 * The first pending pool order node `nodeId` may claim, or undefined. Expired ones met on the way
 * are failed (EXPIRED), as a node's own are.
 */
export async function nextPoolOrderFor(
  deps: OutcomeDeps & { now: () => Date; logger: Logger; triggers: ReconcileTriggers },
  nodeId: string,
): Promise<WorkOrder | undefined> {
  const orders = await deps.store.pendingPoolOrders(POOL_SCAN);
  if (orders.length === 0) return undefined;
  const node = await deps.store.getResource("node", nodeId);
  for (const o of orders) {
    if (expiredAt(o, deps.now())) {
      await expireOrder(deps, o, deps.now());
      continue;
    }
    if (poolEligibility(o, node).ok) return o;
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
 * True when node `nodeId` may read and act on `order`: its own, or a pool order that waits for a
 * node (whether it may claim it is checkPoolClaim's) or that it claimed once.
 */
export function nodeMayReach(order: WorkOrder, nodeId: string): boolean {
  if (order.target?.nodeId === nodeId) return true;
  if (!isPoolOrder(order)) return false;
  return order.status === WorkOrderStatus.PENDING || order.attempts.some((a) => a.nodeId === nodeId);
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
