// WorkOrderService: admins queue ad-hoc orders, list, read and cancel them; nodes read, claim
// and finish their own.
import type { ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import {
  CreateWorkOrderRequestSchema,
  CreateWorkOrderResponseSchema,
  type WorkOrderService,
} from "../../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderSchema, WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { callInfo, orderTraceOf, responseMeta, type CallInfo } from "../base/context.js";
import { forbidden, invalid } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { cancelOrder, claimOrder, renewLease } from "../dispatch/order-lifecycle.js";
import type { ServiceDeps } from "./deps.js";
import { ownOrderOf, reportResult } from "./work-order-access.js";
import { workOrderBatches } from "./work-order-batches.js";
import { checkTenantFilter, seesSecrets, visible } from "../auth/resource-access.js";
import { redactMessage } from "../../common/logging/redact-message.js";
import { idempotent } from "./idempotency.js";
import { queueOrder } from "../dispatch/queue-order.js";
import { checkHolder, resolveOrderSecrets } from "../dispatch/order-secrets.js";
import { checkPoolClaim, withPoolWaits } from "../dispatch/pool-orders.js";

/** An order as `call` may see it: a viewer's copy has its secrets hidden. */
function forCaller(call: CallInfo, order: WorkOrder): WorkOrder {
  return seesSecrets(call) ? order : redactMessage(WorkOrderSchema, order, { inlineEnv: true });
}

/** Work order implementation. */
export function workOrderService(deps: ServiceDeps): ServiceImpl<typeof WorkOrderService> {
  const { store } = deps;

  const ownOrder = (id: string, call: CallInfo) => ownOrderOf(deps, id, call);

  return {
    async createWorkOrder(req, ctx) {
      const call = callInfo(ctx);
      await call.tenants.require(req.target?.tenantId);
      // The audit entry names the tenant and, once queued, the order (which keeps its action).
      call.audit.tenantId = req.target?.tenantId || undefined;
      const schemas = { request: CreateWorkOrderRequestSchema, response: CreateWorkOrderResponseSchema };
      const res = await idempotent(deps, call, "WorkOrderService/CreateWorkOrder", schemas, req, async () =>
        create(CreateWorkOrderResponseSchema, { workOrder: await queueOrder(deps, req, call) }),
      );
      if (res.workOrder) call.audit.target = `work_order/${res.workOrder.id}`;
      if (res.workOrder) await withPoolWaits(store, [res.workOrder]);
      return { ...res, meta: responseMeta(ctx) };
    },

    async listWorkOrders(req, ctx) {
      const call = callInfo(ctx);
      if (req.nodeId !== "") checkId(req.nodeId, "node_id");
      if (req.tenantId !== "") checkId(req.tenantId, "tenant_id");
      await checkTenantFilter(call, req.tenantId);
      if (req.status !== WorkOrderStatus.UNSPECIFIED && !(req.status in WorkOrderStatus)) {
        throw invalid(`unknown status ${req.status}`, { field: "status" });
      }
      const page = await store.listWorkOrders({
        status: req.status === WorkOrderStatus.UNSPECIFIED ? undefined : req.status,
        nodeId: req.nodeId || undefined,
        tenantId: req.tenantId || undefined,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
        newestFirst: req.newestFirst,
      });
      const shown = await withPoolWaits(store, await visible(call, page.items, (o) => o.target?.tenantId, false));
      return { meta: responseMeta(ctx), workOrders: shown.map((o) => forCaller(call, o)), nextPageToken: page.nextPageToken };
    },

    async getWorkOrder(req, ctx) {
      const call = callInfo(ctx);
      const [order] = await withPoolWaits(store, [await ownOrder(req.id, call)]);
      return { meta: responseMeta(ctx), workOrder: forCaller(call, order!) };
    },

    async claimWorkOrder(req, ctx) {
      const call = callInfo(ctx);
      const order = await ownOrder(req.id, call);
      const claimer = call.principal.kind === "node" ? call.principal.nodeId : undefined;
      if (claimer) await checkPoolClaim(store, order, claimer);
      const claimed = await claimOrder(deps, order, orderTraceOf(call, order), call.logger, claimer);
      return { meta: responseMeta(ctx), workOrder: claimed };
    },

    async cancelWorkOrder(req, ctx) {
      const call = callInfo(ctx);
      const order = await ownOrder(req.id, call);
      if (req.reason.length > 512) throw invalid("reason must be at most 512 characters", { field: "reason" });
      const trace = orderTraceOf(call, order);
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

    async getWorkOrderSecrets(req, ctx) {
      const call = callInfo(ctx);
      const order = await ownOrder(req.id, call);
      if (call.principal.kind !== "node")
        throw forbidden("only the node holding the claim gets an order's secrets", { work_order_id: order.id });
      checkHolder(order, call.principal.nodeId, req.fencingToken, deps.now());
      const secrets = await resolveOrderSecrets(store, deps.keyRing, order);
      // Audited (audit-policy.ts): the entry names the order, whose desired_state.secret_uses lists
      // the values and versions; the values are never on record.
      return {
        meta: responseMeta(ctx),
        env: secrets.env,
        files: secrets.files,
        registries: secrets.registries,
        webhookUrl: secrets.webhookUrl,
      };
    },

    async reportWorkOrderResult(req, ctx) {
      const call = callInfo(ctx);
      const outcome = await reportResult(deps, call, req.id, req.result, req.fencingToken);
      return { meta: responseMeta(ctx), workOrder: outcome.workOrder, duplicate: outcome.duplicate };
    },

    ...workOrderBatches(deps),
  };
}
