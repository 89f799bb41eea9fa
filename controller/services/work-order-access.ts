// What WorkOrderService's calls on one order check before acting: the order exists and is the
// caller's (a node's own, or in an admin's tenants), and a reported result is well-formed. The
// single calls and their batch forms (work-order-batches.ts) share these, so each batch item is
// checked, and refused, exactly as its single call would be.
import type { WorkOrder, WorkOrderResult } from "../../gen/skipper/v1/work_order_pb.js";
import { orderTraceOf, type CallInfo } from "../base/context.js";
import { invalid, notFound } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { finishOrder } from "../dispatch/order-lifecycle.js";
import type { FinishOutcome } from "../store/store.js";
import type { ServiceDeps } from "./deps.js";
import { checkNodeReach } from "../dispatch/pool-orders.js";

/**
 * Order `id` if `call` may act on it: a node its own (or a pool order its pool admits), anyone
 * else an order of its tenants.
 */
export async function ownOrderOf(deps: ServiceDeps, id: string, call: CallInfo): Promise<WorkOrder> {
  const order = await deps.store.getWorkOrder(checkId(id, "id"));
  if (!order) throw notFound("work_order", id);
  if (call.principal.kind === "node") {
    await checkNodeReach(deps.store, order, call.principal.nodeId);
  } else {
    // An order of no tenant (ad-hoc, to a host) is for callers whose scope is every tenant.
    await call.tenants.require(order.target?.tenantId);
  }
  call.audit.target = `work_order/${order.id}`;
  call.audit.tenantId = order.target?.tenantId;
  return order;
}

/** Records the caller's result for order `id`: ReportWorkOrderResult's checks, then finishOrder. */
export async function reportResult(
  deps: ServiceDeps,
  call: CallInfo,
  id: string,
  result: WorkOrderResult | undefined,
  fencingToken: bigint,
): Promise<FinishOutcome> {
  const order = await ownOrderOf(deps, id, call);
  if (!result) throw invalid("result is required", { field: "result" });
  if (!/^[A-Z][A-Z0-9_]{0,63}$/.test(result.code)) {
    throw invalid("result.code must be an UPPER_SNAKE_CASE code such as APPLY_OK", { field: "result.code" });
  }
  const nodeId = call.principal.kind === "node" ? call.principal.nodeId : "";
  if (fencingToken < 0n) throw invalid("fencing_token must not be negative", { field: "fencing_token" });
  return finishOrder(deps, order, nodeId, result, fencingToken, orderTraceOf(call, order), call.logger);
}
