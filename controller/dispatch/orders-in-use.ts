// The finished work orders that retention must keep whatever their age:
//   - each tenant's last order per node (its target record names it: Explain starts there, and
//     the reconciler reads its outcome);
//   - per tenant and node, the newest successful deploy or rollback order of each of the last
//     ROLLBACK_DEPTH distinct specs: a rollback without a named deployment restores "the last
//     spec that applied successfully before the current one" from these orders.
// And the deployments it must keep: each tenant's current one, and those of the orders kept.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Store } from "../store/store.js";
import { eachWorkOrder, scannedResources } from "../store/each-page.js";

export const ROLLBACK_DEPTH = 5;

/** What the keep rule needs of a successful order. */
export interface SuccessfulOrder {
  id: string;
  tenantId: string;
  nodeId: string;
  type: WorkOrderType;
  specHash: string;
  finishedAtMs: number;
}

/** The ids to keep (pure): see the top of this file. */
export function ordersToKeep(tenants: Resource[], successful: SuccessfulOrder[], depth = ROLLBACK_DEPTH): Set<string> {
  const keep = new Set<string>();
  for (const t of tenants) {
    if (t.currentState?.kind.case !== "tenant") continue;
    for (const target of t.currentState.kind.value.targets) if (target.lastWorkOrderId !== "") keep.add(target.lastWorkOrderId);
  }
  const byTarget = new Map<string, SuccessfulOrder[]>();
  for (const o of successful) {
    if (o.type !== WorkOrderType.DEPLOY_SERVICE && o.type !== WorkOrderType.ROLLBACK) continue;
    const key = `${o.tenantId}\0${o.nodeId}`;
    let list = byTarget.get(key);
    if (!list) byTarget.set(key, (list = []));
    list.push(o);
  }
  for (const list of byTarget.values()) {
    list.sort((a, b) => b.finishedAtMs - a.finishedAtMs || (a.id < b.id ? 1 : -1));
    const specs = new Set<string>();
    for (const o of list) {
      if (specs.has(o.specHash)) continue;
      specs.add(o.specHash);
      keep.add(o.id);
      if (specs.size >= depth) break;
    }
  }
  return keep;
}

/** The deployment ids to keep (pure): see the top of this file. */
export function deploymentsToKeep(tenants: Resource[], deployments: Resource[], keptOrders: ReadonlySet<string>): Set<string> {
  const keep = new Set<string>();
  for (const t of tenants) {
    if (t.currentState?.kind.case === "tenant" && t.currentState.kind.value.deploymentId !== "")
      keep.add(t.currentState.kind.value.deploymentId);
  }
  for (const d of deployments) {
    const orderId = d.desiredState?.kind.case === "deployment" ? d.desiredState.kind.value.workOrderId : "";
    if (orderId !== "" && keptOrders.has(orderId)) keep.add(d.id);
  }
  return keep;
}

/** What retention keeps: order ids and deployment ids, read from the store a page at a time. */
export async function historyInUse(store: Store): Promise<{ orders: Set<string>; deployments: Set<string> }> {
  const tenants = await listAll(store, "tenant");
  const orders = await ordersInUse(store, tenants);
  return { orders, deployments: deploymentsToKeep(tenants, await listAll(store, "deployment"), orders) };
}

function listAll(store: Store, resourceType: "tenant" | "deployment"): Promise<Resource[]> {
  return scannedResources(store, { resourceType, includeDeleted: true, pageSize: 500 });
}

/** Reads what ordersToKeep needs from the store, a page at a time. */
export async function ordersInUse(store: Store, tenants?: Resource[]): Promise<Set<string>> {
  tenants ??= await listAll(store, "tenant");
  const successful: SuccessfulOrder[] = [];
  for await (const o of eachWorkOrder(store, { status: WorkOrderStatus.SUCCESS, pageSize: 500, summaryOnly: true }))
    successful.push(summary(o));
  return ordersToKeep(tenants, successful);
}

function summary(o: WorkOrder): SuccessfulOrder {
  return {
    id: o.id,
    tenantId: o.target?.tenantId ?? "",
    nodeId: o.target?.nodeId ?? "",
    type: o.type,
    specHash: o.desiredState?.specHash ?? "",
    finishedAtMs: o.finishedAt ? timestampDate(o.finishedAt).getTime() : 0,
  };
}
