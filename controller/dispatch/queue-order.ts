// CreateWorkOrder: checks an ad-hoc order against the contract's rules and the facts of its node
// and tenant, resolves a rollback to the spec it restores, stores the order with its
// work_order_created event (one write) and rings the node's stream. Nothing is stored when a check fails.
import { create } from "@bufbuild/protobuf";
import { WorkOrderActionSchema } from "../../gen/skipper/v1/order_action_pb.js";
import { WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { CreateWorkOrderRequest } from "../../gen/skipper/v1/work_order_service_pb.js";
import type { CallInfo, Trace } from "../base/context.js";
import { forbidden, isSkipperError, notFound } from "../base/errors.js";
import { holds } from "../auth/admission.js";
import { permissionName } from "../auth/permissions.js";
import { newWorkOrderId } from "../base/ordered-ids.js";
import { buildEvent, transitionEventId } from "../events/event-recorder.js";
import type { Store } from "../store/store.js";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import type { TargetRecords } from "../reconcile/target-records.js";
import type { OrderFeed } from "./order-feed.js";
import { buildOrder, checkControllerRequest, checkRequest } from "./ad-hoc-order.js";
import { summaryOf } from "./order-kinds.js";
import { checkTargets } from "./node-permits.js";
import { resolveRollback } from "../reconcile/rollback-spec.js";

/** What queueing an order needs. */
export interface QueueDeps {
  store: Store;
  now: () => Date;
  records: TargetRecords;
  feed: OrderFeed;
}

/** Checks, stores and announces an ad-hoc order; a rollback also takes over its target's record. */
export async function queueOrder(deps: QueueDeps, req: CreateWorkOrderRequest, call: CallInfo): Promise<WorkOrder> {
  const { store } = deps;
  const kind = checkRequest(req, deps.now());
  if (!holds(call.principal, kind.permission)) {
    throw forbidden(`queueing a ${WorkOrderType[req.type]} order needs the ${permissionName(kind.permission)} permission`, {
      permission: permissionName(kind.permission),
    });
  }
  const { nodeId, tenantId, tenant } = await checkTarget(store, req, !call.tenants.unrestricted);
  const ids = {
    id: newWorkOrderId(),
    requestId: call.requestId,
    correlationId: call.correlationId,
    traceparent: call.traceparent,
    now: deps.now(),
  };
  const created = createdEvents({ requestId: call.requestId, correlationId: call.correlationId, traceparent: call.traceparent }, "ad_hoc");
  let order: WorkOrder;
  if (req.type === WorkOrderType.ROLLBACK && req.action?.kind.case === "rollback") {
    const requested = req.action.kind.value;
    // Under the tenant's reconcile lock: the target's record names this order as its last, so
    // its outcome (the node runs the restored spec) is what the reconciler sees next.
    order = await deps.records.exclusive(tenantId, async () => {
      const fresh = (await store.getResource("tenant", tenantId)) ?? tenant!;
      const plan = await resolveRollback(store, fresh, nodeId, requested);
      const built = buildOrder(
        { ...req, action: create(WorkOrderActionSchema, { kind: { case: "rollback", value: plan.action } }) },
        ids,
        plan.desiredState,
      );
      const stored = await store.createWorkOrder(built, created);
      await deps.records.pointAt(tenantId, nodeId, stored.id);
      return stored;
    });
  } else {
    order = await store.createWorkOrder(buildOrder(req, ids), created);
  }
  const type = (WorkOrderType[order.type] ?? "").toLowerCase();
  deps.feed.publish(order);
  call.logger.info(
    {
      action: "work_order_created",
      result: "ok",
      node_id: nodeId,
      tenant_id: tenantId,
      work_order_id: order.id,
      metadata: { type, ...summaryOf(order) },
    },
    `${type} order queued`,
  );
  return order;
}

/**
 * Queues an order the controller itself decides on (a release's verification), with a fixed id:
 * the same checks as a caller's order but no caller's permission; queueing an id that exists
 * answers the stored order, so a step retried after a crash issues nothing twice.
 */
export async function queueControllerOrder(deps: QueueDeps, req: CreateWorkOrderRequest, trace: Trace, id: string): Promise<WorkOrder> {
  const { store } = deps;
  const existing = await store.getWorkOrder(id);
  if (existing) return existing;
  checkControllerRequest(req, deps.now());
  await checkTarget(store, req, false);
  const ids = { id, requestId: trace.requestId, correlationId: trace.correlationId, traceparent: trace.traceparent, now: deps.now() };
  const created = createdEvents(trace, "controller");
  let order: WorkOrder;
  try {
    order = await store.createWorkOrder(buildOrder(req, ids), created);
  } catch (e) {
    const raced = isSkipperError(e) && e.code === "CONFLICT" ? await store.getWorkOrder(id) : undefined;
    if (!raced) throw e;
    return raced;
  }
  deps.feed.publish(order);
  return order;
}

// The order's node and tenant exist, and the node permits what the order asks (`scoped`: the
// caller's scope is limited to some tenants).
async function checkTarget(store: Store, req: CreateWorkOrderRequest, scoped: boolean) {
  const nodeId = req.target!.nodeId;
  const tenantId = req.target?.tenantId ?? "";
  // A pool order names no node and no tenant (ad-hoc-order.ts): its nodes are judged at each claim
  // (pool-eligibility.ts), and while none is eligible it waits, saying why (WorkOrder.wait).
  if (req.target?.pool) return { nodeId, tenantId, tenant: undefined };
  const node = await store.getResource("node", nodeId);
  if (!node) throw notFound("node", nodeId, `node ${nodeId} is not registered`);
  const tenant = tenantId === "" ? undefined : await store.getResource("tenant", tenantId);
  if (tenantId !== "" && !tenant) throw notFound("tenant", tenantId);
  checkTargets(req, node, tenant, scoped);
  return { nodeId, tenantId, tenant };
}

// What the created event says of a pool order: its selector and required capabilities.
function poolOf(o: WorkOrder): Record<string, string> {
  const required = o.target?.requiredCapabilities ?? [];
  const pool = o.target?.pool;
  return {
    ...(pool
      ? {
          pool:
            Object.entries(pool.nodeSelector)
              .map(([k, v]) => `${k}=${v}`)
              .sort()
              .join(",") || "*",
        }
      : {}),
    ...(required.length > 0 ? { required_capabilities: required.join(",") } : {}),
  };
}

// The order's work_order_created, written with it (store.ts EventsOf); `reason` says who decided it.
function createdEvents(trace: Trace, reason: "ad_hoc" | "controller"): (o: WorkOrder) => Event[] {
  return (o) => [
    buildEvent({
      id: transitionEventId(o.id, "work_order_created"),
      type: "work_order_created",
      resourceType: "work_order",
      resourceId: o.id,
      workOrderId: o.id,
      tenantId: o.target?.tenantId ?? "",
      nodeId: o.target?.nodeId ?? "",
      requestId: trace.requestId,
      correlationId: trace.correlationId,
      traceparent: trace.traceparent,
      data: { type: (WorkOrderType[o.type] ?? "").toLowerCase(), reason, ...summaryOf(o), ...poolOf(o) },
    }),
  ];
}
