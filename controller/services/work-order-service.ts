// WorkOrderService: admins queue ad-hoc orders, list, read and cancel them; nodes read, claim
// and finish their own.
import type { ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import {
  CreateWorkOrderRequestSchema,
  CreateWorkOrderResponseSchema,
  type WorkOrderService,
} from "../../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { callInfo, responseMeta, type CallInfo } from "../context.js";
import { forbidden, invalid, notFound } from "../errors.js";
import { checkId } from "../id-checks.js";
import { cancelOrder, claimOrder, finishOrder, renewLease } from "../dispatch/order-lifecycle.js";
import type { ServiceDeps } from "./deps.js";
import { idempotent } from "./idempotency.js";
import { queueOrder } from "../dispatch/queue-order.js";

/** Work order implementation. */
export function workOrderService(deps: ServiceDeps): ServiceImpl<typeof WorkOrderService> {
  const { store } = deps;

  async function ownOrder(id: string, call: CallInfo): Promise<WorkOrder> {
    const order = await store.getWorkOrder(checkId(id, "id"));
    if (!order) throw notFound("work_order", id);
    if (call.principal.kind === "node" && order.target?.nodeId !== call.principal.nodeId) {
      throw forbidden(`work order ${id} belongs to another node`, { work_order_id: id });
    }
    return order;
  }

  return {
    async createWorkOrder(req, ctx) {
      const call = callInfo(ctx);
      const schemas = { request: CreateWorkOrderRequestSchema, response: CreateWorkOrderResponseSchema };
      const res = await idempotent(deps, call, "WorkOrderService/CreateWorkOrder", schemas, req, async () =>
        create(CreateWorkOrderResponseSchema, { workOrder: await queueOrder(deps, req, call) }),
      );
      return { ...res, meta: responseMeta(ctx) };
    },

    async listWorkOrders(req, ctx) {
      if (req.nodeId !== "") checkId(req.nodeId, "node_id");
      if (req.tenantId !== "") checkId(req.tenantId, "tenant_id");
      if (req.status !== WorkOrderStatus.UNSPECIFIED && !(req.status in WorkOrderStatus)) {
        throw invalid(`unknown status ${req.status}`, { field: "status" });
      }
      const page = await store.listWorkOrders({
        status: req.status === WorkOrderStatus.UNSPECIFIED ? undefined : req.status,
        nodeId: req.nodeId || undefined,
        tenantId: req.tenantId || undefined,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
      });
      return { meta: responseMeta(ctx), workOrders: page.items, nextPageToken: page.nextPageToken };
    },

    async getWorkOrder(req, ctx) {
      return { meta: responseMeta(ctx), workOrder: await ownOrder(req.id, callInfo(ctx)) };
    },

    async claimWorkOrder(req, ctx) {
      const call = callInfo(ctx);
      const order = await ownOrder(req.id, call);
      const claimed = await claimOrder(deps, order, { requestId: call.requestId, correlationId: order.correlationId }, call.logger);
      return { meta: responseMeta(ctx), workOrder: claimed };
    },

    async cancelWorkOrder(req, ctx) {
      const call = callInfo(ctx);
      const order = await ownOrder(req.id, call);
      if (req.reason.length > 512) throw invalid("reason must be at most 512 characters", { field: "reason" });
      const trace = { requestId: call.requestId, correlationId: order.correlationId };
      return { meta: responseMeta(ctx), workOrder: await cancelOrder(deps, order, req.reason, call.requestId, trace, call.logger) };
    },

    async renewWorkOrderLease(req, ctx) {
      const call = callInfo(ctx);
      const order = await ownOrder(req.id, call);
      if (call.principal.kind !== "node") throw forbidden("only the node holding the claim renews its lease", { work_order_id: order.id });
      if (req.fencingToken <= 0n) throw invalid("fencing_token is required", { field: "fencing_token" });
      const renewed = await renewLease(deps, order, call.principal.nodeId, req.fencingToken);
      return { meta: responseMeta(ctx), workOrder: renewed };
    },

    async reportWorkOrderResult(req, ctx) {
      const call = callInfo(ctx);
      const order = await ownOrder(req.id, call);
      const result = req.result;
      if (!result) throw invalid("result is required", { field: "result" });
      if (!/^[A-Z][A-Z0-9_]{0,63}$/.test(result.code)) {
        throw invalid("result.code must be an UPPER_SNAKE_CASE code such as APPLY_OK", { field: "result.code" });
      }
      const nodeId = call.principal.kind === "node" ? call.principal.nodeId : "";
      if (req.fencingToken < 0n) throw invalid("fencing_token must not be negative", { field: "fencing_token" });
      const trace = { requestId: call.requestId, correlationId: order.correlationId };
      const outcome = await finishOrder(deps, order, nodeId, result, req.fencingToken, trace, call.logger);
      return { meta: responseMeta(ctx), workOrder: outcome.workOrder, duplicate: outcome.duplicate };
    },
  };
}
