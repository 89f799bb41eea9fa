// The finished work orders that retention must keep whatever their age:
//   - each tenant's last order per node (its target record names it: Explain starts there, and
//     the reconciler reads its outcome);
//   - per tenant and node, the newest successful deploy or rollback order of each of the last
//     ROLLBACK_DEPTH distinct specs: a rollback without a named deployment restores "the last
//     spec that applied successfully before the current one" from these orders.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Store } from "../store/store.js";

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

/** Reads what ordersToKeep needs from the store, a page at a time. */
export async function ordersInUse(store: Store): Promise<Set<string>> {
  const tenants: Resource[] = [];
  let pageToken = "";
  do {
    const page = await store.listResources({ resourceType: "tenant", includeDeleted: true, pageSize: 500, pageToken });
    tenants.push(...page.items);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  const successful: SuccessfulOrder[] = [];
  do {
    const page = await store.listWorkOrders({ status: WorkOrderStatus.SUCCESS, pageSize: 500, pageToken });
    successful.push(...page.items.map(summary));
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
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
