// CreateWorkOrder's rules: the order types an operator may queue (their kinds say which, and what
// each one's action must hold: order-kinds.ts), the request's limits, and the order built from a
// request that passed. Pure apart from the facts passed in (the node, the tenant): the service
// looks those up, calls check, then stores what build returns.
import { durationMs, timestampDate } from "@bufbuild/protobuf/wkt";
import type { CreateWorkOrderRequest } from "../../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderType, type WorkOrder, type WorkOrderDesiredState } from "../../gen/skipper/v1/work_order_pb.js";
import { invalid } from "../base/errors.js";
import { pendingOrder } from "../reconcile/plan-deployment.js";
import { checkId } from "../base/id-checks.js";
import { checkSelector } from "../domain/label-selector.js";
import { isCapabilityName } from "../../common/node-capabilities.js";
import { ORDER_KINDS, type OrderType } from "../../common/order-kinds.js";
import { checkActionOf, controllerOrderKind, type AdHocKind } from "./order-kinds.js";

const MAX_TIMEOUT_MS = 24 * 60 * 60 * 1000;

/** Checks the request's shape: type, target ids, action, limits. Throws INVALID_REQUEST. Returns the kind's facts. */
export function checkRequest(req: CreateWorkOrderRequest, now: Date): AdHocKind<OrderType> {
  const kind = controllerOrderKind(req.type);
  if (!kind) throw invalid(`unknown or unsupported work order type ${req.type}`, { field: "type" });
  if (kind.queued !== "on request") {
    throw invalid(`${WorkOrderType[req.type]} orders come from the reconciler: ${kind.instead}`, { field: "type" });
  }
  checkCommon(req, now, kind.tenant);
  checkActionOf(kind, req);
  return kind;
}

/**
 * The checks of an order the controller issues itself (queueControllerOrder): a kind only the
 * controller queues (deliver_webhook, update_agent) is taken here, with the same target, action
 * member and limits as a caller's; its action's content is the controller's own making.
 */
export function checkControllerRequest(req: CreateWorkOrderRequest, now: Date): void {
  const kind = controllerOrderKind(req.type);
  if (!kind) throw invalid(`unknown or unsupported work order type ${req.type}`, { field: "type" });
  if (kind.queued === "on request") {
    checkRequest(req, now);
    return;
  }
  checkCommon(req, now, "none");
}

function checkCommon(req: CreateWorkOrderRequest, now: Date, tenant: "required" | "optional" | "none"): void {
  const action = ORDER_KINDS[req.type as OrderType].action!;
  checkNodeOrPool(req);
  const tenantId = req.target?.tenantId ?? "";
  if (tenant === "required" || tenantId !== "") checkId(tenantId, "target.tenant_id");
  if (tenant === "none" && tenantId !== "")
    throw invalid(`${WorkOrderType[req.type]} orders are for a node, not a tenant`, { field: "target.tenant_id" });
  if (req.action?.kind.case !== action) {
    throw invalid(`a ${WorkOrderType[req.type]} order carries action.${snake(action)}`, {
      field: "action",
      got: snake(req.action?.kind.case ?? ""),
    });
  }
  if (req.timeout) {
    const ms = durationMs(req.timeout);
    if (ms <= 0 || ms > MAX_TIMEOUT_MS) throw invalid("timeout must be positive and at most 24h", { field: "timeout" });
  }
  if (req.expiresAt && timestampDate(req.expiresAt) <= now) throw invalid("expires_at must be in the future", { field: "expires_at" });
  if (req.maxAttempts < 0 || req.maxAttempts > 10) throw invalid("max_attempts must be 0-10", { field: "max_attempts" });
  if (Math.abs(req.priority) > 1_000_000) throw invalid("priority must be within ±1000000", { field: "priority" });
}

// One node (target.node_id), or a pool (target.pool: a selector, no node, no tenant: pool orders
// are for hosts); required capabilities are names, at most 32.
function checkNodeOrPool(req: CreateWorkOrderRequest): void {
  const target = req.target;
  const required = target?.requiredCapabilities ?? [];
  if (required.length > 32) throw invalid("target.required_capabilities holds at most 32 names", { field: "target.required_capabilities" });
  for (const c of required) {
    if (!isCapabilityName(c)) {
      throw invalid(`target.required_capabilities: ${JSON.stringify(c.slice(0, 64))} is not a capability name (e.g. compose.deploy)`, {
        field: "target.required_capabilities",
      });
    }
  }
  if (!target?.pool) {
    checkId(target?.nodeId ?? "", "target.node_id");
    return;
  }
  if (target.nodeId !== "")
    throw invalid("a pool order names no node: set target.node_id or target.pool, not both", { field: "target.node_id" });
  if (target.tenantId !== "")
    throw invalid("a pool order is for hosts, not a tenant's project: name its node instead", { field: "target.tenant_id" });
  checkSelector(target.pool.nodeSelector, "target.pool.node_selector");
}

/** The pending order for a checked request. */
export function buildOrder(
  req: CreateWorkOrderRequest,
  ids: { id: string; requestId: string; correlationId: string; traceparent?: string; now: Date },
  desiredState?: WorkOrderDesiredState,
): WorkOrder {
  return pendingOrder({
    id: ids.id,
    type: req.type,
    target: {
      tenantId: req.target?.tenantId ?? "",
      nodeId: req.target?.nodeId ?? "",
      pool: req.target?.pool,
      requiredCapabilities: req.target?.requiredCapabilities ?? [],
    },
    trace: { requestId: ids.requestId, correlationId: ids.correlationId, traceparent: ids.traceparent ?? "" },
    now: ids.now,
    reason: "ad_hoc",
    desiredState,
    action: req.action,
    maxAttempts: req.maxAttempts || 1,
    priority: req.priority,
    timeout: req.timeout,
    expiresAt: req.expiresAt,
  });
}

function snake(s: string): string {
  return s.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
