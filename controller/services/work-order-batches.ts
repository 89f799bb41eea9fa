// WorkOrderService's batch calls, for callers with many orders (pool-style workers, the
// benchmark): ClaimWorkOrders claims up to N of a node's pending orders, each as
// ClaimNextWorkOrder claims one; ReportWorkOrderResults records many results, each checked and
// finished as ReportWorkOrderResult would, each answered on its own. A slice of the service,
// merged into it by work-order-service.ts.
import type { ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import type { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { ApiErrorSchema, type ApiError } from "../../gen/skipper/v1/envelope_pb.js";
import { callInfo, orderTraceOf, responseMeta, type CallInfo } from "../base/context.js";
import { forbidden, invalid, isSkipperError } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { claimNextOrder } from "../dispatch/order-lifecycle.js";
import type { ServiceDeps } from "./deps.js";
import { reportResult } from "./work-order-access.js";

type Batches = Pick<ServiceImpl<typeof WorkOrderService>, "claimWorkOrders" | "reportWorkOrderResults">;

/** The batch calls of WorkOrderService. */
export function workOrderBatches(deps: ServiceDeps): Batches {
  return {
    async claimWorkOrders(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = checkId(req.nodeId, "node_id");
      if (call.principal.kind === "node" && call.principal.nodeId !== nodeId) {
        throw forbidden(`this token belongs to node ${call.principal.nodeId}, not ${nodeId}`, { node_id: nodeId });
      }
      const max = req.max === 0 ? DEFAULT_CLAIM_BATCH : req.max;
      if (max < 1 || max > MAX_BATCH) throw invalid(`max must be 1 to ${MAX_BATCH} (0 means ${DEFAULT_CLAIM_BATCH})`, { field: "max" });
      const trace = (order: WorkOrder) => orderTraceOf(call, order);
      const claimed: WorkOrder[] = [];
      // One at a time, each exactly ClaimNextWorkOrder's claim: the store's compare-and-set
      // decides each order, so a concurrent claim (single or batch) never gets one of these.
      while (claimed.length < max) {
        let order: WorkOrder | undefined;
        try {
          order = await claimNextOrder(deps, nodeId, trace, call.logger);
        } catch (e) {
          // Orders already claimed are answered rather than left to lapse; with none, the
          // error is the answer, as ClaimNextWorkOrder's.
          if (claimed.length === 0) throw e;
          call.logger.warn({ action: "ClaimWorkOrders", node_id: nodeId, err: e }, "claim stopped early");
          break;
        }
        if (!order) break;
        claimed.push(order);
      }
      return { meta: responseMeta(ctx), workOrders: claimed };
    },

    async reportWorkOrderResults(req, ctx) {
      const call = callInfo(ctx);
      if (req.items.length > MAX_BATCH) {
        throw invalid(`at most ${MAX_BATCH} items per call, got ${req.items.length}`, { field: "items" });
      }
      const items = [];
      for (const item of req.items) {
        try {
          const outcome = await reportResult(deps, call, item.workOrderId, item.result, item.fencingToken);
          items.push({ workOrderId: item.workOrderId, workOrder: outcome.workOrder, duplicate: outcome.duplicate });
        } catch (e) {
          items.push({ workOrderId: item.workOrderId, error: apiErrorOf(e, call) });
        }
      }
      return { meta: responseMeta(ctx), items };
    },
  };
}

/** How many orders one ClaimWorkOrders takes when the caller does not say. */
const DEFAULT_CLAIM_BATCH = 10;
/** The most orders one ClaimWorkOrders claims, and items one ReportWorkOrderResults carries. */
const MAX_BATCH = 100;

/**
 * A batch item's refusal as the single call would have answered it: a domain error's code,
 * message and details; anything else logged and answered INTERNAL_ERROR without its text.
 */
function apiErrorOf(e: unknown, call: CallInfo): ApiError {
  if (isSkipperError(e)) return create(ApiErrorSchema, { code: e.code, message: e.message, details: e.details });
  call.logger.error({ action: "ReportWorkOrderResults", result: "INTERNAL_ERROR", err: e }, "unexpected error in a batch item");
  return create(ApiErrorSchema, { code: "INTERNAL_ERROR", message: "internal error; see controller logs for this request id" });
}
