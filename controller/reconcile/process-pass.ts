// One pass of the process reconciler over every process resource: read what it needs (the
// resources, the nodes, the tenants' declared modules, the orders the statuses name), plan each
// (plan-processes.ts, pure), then act: queue the plan's orders under their fixed ids (the queue
// function is dispatch's, handed in at wiring: a repeated pass gets the order it made back), and
// write the status with one process_status_changed event per node whose reason changed, in the
// same store write. The status is written only when it changed. A crash between the orders and
// the status is safe: the next pass derives the same ids. An order dispatch refuses (a domain
// error: the node was disabled meanwhile, ...) fails that node's plan alone (FAILED, a backoff):
// the status of the others is written all the same, so one node never freezes the resource.
import { create, equals } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { v4 as uuidv4 } from "uuid";
import type { Logger } from "../../common/logging/logger.js";
import { isFinishedStatus } from "../../common/order-status.js";
import { ProcessModuleReason, ProcessModuleStatusSchema, type ProcessModuleStatus } from "../../gen/skipper/v1/process_pb.js";
import { NodeLiveness, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { CreateWorkOrderRequestSchema, type CreateWorkOrderRequest } from "../../gen/skipper/v1/work_order_service_pb.js";
import type { Trace } from "../base/context.js";
import { isSkipperError } from "../base/errors.js";
import { buildEvent } from "../events/event-recorder.js";
import { writeStatus } from "../resources/status-write.js";
import { scannedResources } from "../store/each-page.js";
import type { Store } from "../store/store.js";
import { nodeLabels } from "./placement.js";
import {
  msOf,
  orderNotQueued,
  planProcess,
  type ProcessDesired,
  type ProcessNodeView,
  type ProcessOrder,
  type ProcessOrderView,
  type ProcessPlan,
} from "./plan-processes.js";

export interface ProcessPassDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  /** Queues a controller's order under `id` (dispatch/queue-order.ts queueControllerOrder). */
  queueOrder: (req: CreateWorkOrderRequest, trace: Trace, id: string) => Promise<WorkOrder>;
  backoffMs: number;
  backoffCapMs: number;
}

/** Plans and acts on every process resource; answers the earliest backoff's end, if any. */
export async function runProcessPass(deps: ProcessPassDeps): Promise<number | undefined> {
  const all = await scannedResources(deps.store, { resourceType: "process", includeDeleted: true });
  // A deleted resource is planned until every node it was on has stopped the module.
  const live = all.filter((r) => r.desiredState?.kind.case === "process" && (!r.deletion || statusOf(r).nodes.length > 0));
  if (live.length === 0) return undefined;
  const nodes = (await scannedResources(deps.store, { resourceType: "node" })).filter((n) => !n.deletion);
  const claimed = await tenantModules(deps.store);
  let wakeAt: number | undefined;
  for (const r of live) {
    try {
      const at = await passOne(deps, r, nodes, claimed);
      if (at !== undefined) wakeAt = Math.min(wakeAt ?? at, at);
    } catch (e) {
      deps.logger.warn(
        { action: "process_reconcile", result: "error", err: e, metadata: { process_id: r.id } },
        `process ${r.id}: pass failed`,
      );
    }
  }
  return wakeAt;
}

async function passOne(
  deps: ProcessPassDeps,
  r: Resource,
  nodes: readonly Resource[],
  claimed: ReadonlyMap<string, string>,
): Promise<number | undefined> {
  if (r.desiredState?.kind.case !== "process") return undefined;
  const spec = r.desiredState.kind.value;
  const status = statusOf(r);
  const module = spec.spec?.module ?? "";
  const desired: ProcessDesired = {
    id: r.id,
    createdAtMs: msOf(r.createdAt),
    spec,
    status,
    deleted: !!r.deletion,
    claimedBy: claimed.get(module),
  };
  const orders = await ordersOf(deps.store, status);
  const times = { nowMs: deps.now().getTime(), backoffMs: deps.backoffMs, backoffCapMs: deps.backoffCapMs };
  const plan = planProcess(
    desired,
    nodes.map((n) => nodeView(n, module)),
    orders,
    times,
  );
  if (plan.orders.length === 0 && equals(ProcessModuleStatusSchema, status, plan.status)) return plan.wakeAtMs;
  const trace: Trace = { requestId: uuidv4(), correlationId: r.metadata?.correlationId || uuidv4() };
  for (const o of [...plan.orders]) {
    try {
      await deps.queueOrder(orderRequest(desired, o), trace, o.id);
    } catch (e) {
      // Only a refusal fails the node; anything else (the store unavailable) fails the pass as
      // before, and the next one queues the same ids again.
      if (!isSkipperError(e) || e.code === "UNAVAILABLE" || e.code === "INTERNAL_ERROR") throw e;
      deps.logger.warn(
        { action: "process_order_queued", result: "error", err: e, node_id: o.nodeId, work_order_id: o.id, metadata: { process_id: r.id } },
        `process ${r.id}: order for ${o.nodeId} not queued`,
      );
      orderNotQueued(plan, desired, o.nodeId, `${e.code}: ${e.message}`, times);
    }
  }
  await saveStatus(deps, r.id, plan, trace);
  for (const o of plan.orders)
    deps.logger.info(
      {
        action: "process_order_queued",
        result: "ok",
        node_id: o.nodeId,
        work_order_id: o.id,
        metadata: { process_id: r.id, module, kind: o.kind },
      },
      `process ${r.id}: ${o.kind === "deploy" ? "deploy_process" : "control_process"} queued on ${o.nodeId}`,
    );
  return plan.wakeAtMs;
}

// The status and its transitions' events, one write.
async function saveStatus(deps: ProcessPassDeps, id: string, plan: ProcessPlan, trace: Trace): Promise<void> {
  await deps.store.updateResource(
    "process",
    id,
    (cur) => writeStatus(cur, { case: "process", value: plan.status }, trace, timestampFromDate(deps.now())),
    undefined,
    (written) =>
      plan.transitions.map((t) =>
        buildEvent({
          type: "process_status_changed",
          ...trace,
          resourceType: "process",
          resourceId: id,
          nodeId: t.nodeId,
          revision: written.metadata?.resourceVersion,
          data: {
            from: ProcessModuleReason[t.from] ?? String(t.from),
            to: ProcessModuleReason[t.to] ?? String(t.to),
            version: t.version,
            message: t.message,
          },
        }),
      ),
  );
}

function orderRequest(d: ProcessDesired, o: ProcessOrder): CreateWorkOrderRequest {
  const target = { nodeId: o.nodeId };
  if (o.kind === "deploy")
    return create(CreateWorkOrderRequestSchema, {
      type: WorkOrderType.DEPLOY_PROCESS,
      target,
      action: { kind: { case: "deployProcess", value: { spec: d.spec.spec } } },
    });
  return create(CreateWorkOrderRequestSchema, {
    type: WorkOrderType.CONTROL_PROCESS,
    target,
    action: { kind: { case: "controlProcess", value: { module: d.spec.spec?.module ?? "", operation: o.operation } } },
  });
}

function nodeView(n: Resource, module: string): ProcessNodeView {
  const spec = n.desiredState?.kind.case === "node" ? n.desiredState.kind.value : undefined;
  const st = n.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
  return {
    id: n.id,
    labels: nodeLabels(n),
    reachable: st?.liveness === NodeLiveness.ONLINE || st?.liveness === NodeLiveness.DEGRADED,
    disabled: spec?.disabled ?? false,
    allowedSources: st?.capabilities?.allowedProcessSources ?? [],
    observedAtMs: msOf(st?.lastHeartbeatAt),
    process: st?.processes.find((p) => p.module === module),
  };
}

async function ordersOf(store: Store, status: ProcessModuleStatus): Promise<Map<string, ProcessOrderView>> {
  const out = new Map<string, ProcessOrderView>();
  for (const n of status.nodes) {
    if (!n.workOrderId || out.has(n.workOrderId)) continue;
    const o = await store.getWorkOrder(n.workOrderId);
    if (!o) continue;
    out.set(o.id, {
      id: o.id,
      open: !isFinishedStatus(o.status),
      deploy: o.type === WorkOrderType.DEPLOY_PROCESS,
      succeeded: o.status === WorkOrderStatus.SUCCESS,
      code: o.result?.code ?? WorkOrderStatus[o.status] ?? "",
      message: o.result?.message ?? "",
      finishedAtMs: msOf(o.finishedAt),
      process: o.result?.details?.process,
    });
  }
  return out;
}

// Module name -> the tenant that declares it.
async function tenantModules(store: Store): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const t of await scannedResources(store, { resourceType: "tenant" })) {
    if (t.deletion || t.desiredState?.kind.case !== "tenant") continue;
    for (const p of t.desiredState.kind.value.processes) if (p.spec?.module) out.set(p.spec.module, t.id);
  }
  return out;
}

function statusOf(r: Resource): ProcessModuleStatus {
  return r.currentState?.kind.case === "process" ? r.currentState.kind.value : create(ProcessModuleStatusSchema);
}
