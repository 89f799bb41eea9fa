// NodeService: admins register nodes and rotate their tokens; each node heartbeats, asks for its
// next work order and reports observed state, always about itself only.
import type { ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { MetadataSchema, NodeLiveness, NodeStatusSchema, ProjectObservationSchema, ResourceSchema, type ProjectObservation, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { equals } from "@bufbuild/protobuf";
import { callInfo, responseMeta, SCHEMA_VERSION, type CallInfo } from "../context.js";
import { conflict, forbidden, invalid, notFound } from "../errors.js";
import { checkId, checkResourceType } from "../id-checks.js";
import { hashToken, mintNodeToken } from "../auth/tokens.js";
import { recordEvents } from "../events/event-recorder.js";
import { checkSpecKind, checkStatusKind, sameStatus } from "../resources/resource-rules.js";
import { tenantOf } from "../store/tenant-of.js";
import type { ServiceDeps } from "./deps.js";
import { expireOrder, expiredAt } from "../dispatch/order-expiry.js";

// A heartbeat that reports nothing new is written to the node's record at most this often
// (liveness is judged from every beat in memory; the stored time is for people and restarts).
// Each write is fsynced: at 1,000 nodes this is the controller's main idle cost.
const HEARTBEAT_PERSIST_MS = 60_000;
// An open WatchWorkOrders stream gets a keepalive this often when nothing happens: under the 60 s
// idle timeout common to proxies and load balancers, and rare enough to cost little at 1,000 streams.
const WATCH_KEEPALIVE_MS = 45_000;
// A heartbeat event is recorded when what the agent reports changes, or at most this often.
const HEARTBEAT_EVENT_EVERY_MS = 60 * 60 * 1000;

/** Node implementation. */
export function nodeService(deps: ServiceDeps): Partial<ServiceImpl<typeof NodeService>> {
  const { store } = deps;
  const lastHeartbeatEvent = new Map<string, number>();

  function selfOnly(call: CallInfo, nodeId: string): string {
    checkId(nodeId, "node_id");
    if (call.principal.kind === "node" && call.principal.nodeId !== nodeId) {
      throw forbidden(`this token belongs to node ${call.principal.nodeId}, not ${nodeId}`, { node_id: nodeId });
    }
    return nodeId;
  }

  return {
    async registerNode(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = checkId(req.nodeId, "node_id");
      if ((await store.getNodeCredential(nodeId)) && (await store.getResource("node", nodeId))) {
        throw conflict(`node ${nodeId} is already registered; rotate its token with POST /v1/nodes/${nodeId}/token`, { node_id: nodeId });
      }
      let node = await store.getResource("node", nodeId);
      if (!node) {
        const now = timestampFromDate(deps.now());
        node = await store.createResource(
          create(ResourceSchema, {
            id: nodeId,
            resourceType: "node",
            schemaVersion: SCHEMA_VERSION,
            desiredState: { kind: { case: "node", value: { displayName: req.displayName || nodeId, labels: req.labels } } },
            metadata: create(MetadataSchema, { labels: req.labels, requestId: call.requestId, correlationId: call.correlationId }),
            createdAt: now,
            updatedAt: now,
          }),
        );
        await recordEvents(store, [{ type: "resource_created", requestId: call.requestId, correlationId: call.correlationId, resourceType: "node", resourceId: nodeId, nodeId, revision: node.metadata?.resourceVersion }]);
      }
      const token = mintNodeToken(nodeId);
      await store.putNodeCredential({ nodeId, tokenHash: hashToken(token), createdAt: deps.now() });
      await recordEvents(store, [{ type: "node_registered", requestId: call.requestId, correlationId: call.correlationId, resourceType: "node", resourceId: nodeId, nodeId }]);
      return { meta: responseMeta(ctx), node, token };
    },

    async rotateNodeToken(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = checkId(req.nodeId, "node_id");
      if (!(await store.getResource("node", nodeId))) throw notFound("node", nodeId);
      const token = mintNodeToken(nodeId);
      await store.putNodeCredential({ nodeId, tokenHash: hashToken(token), createdAt: deps.now() });
      await recordEvents(store, [{ type: "node_token_rotated", requestId: call.requestId, correlationId: call.correlationId, resourceType: "node", resourceId: nodeId, nodeId }]);
      return { meta: responseMeta(ctx), token };
    },

    async heartbeat(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = selfOnly(call, req.nodeId);
      const now = deps.now();
      let reportChanged = false;
      let projectsChanged = false;
      let cameOnline = false;
      const touchedTenants = new Set<string>();
      await store.updateResource("node", nodeId, (node) => {
        const prev = node.currentState;
        const before = prev?.kind.case === "node" ? prev.kind.value : undefined;
        const projects = req.projectsReported ? req.projects : (before?.projects ?? []);
        projectsChanged = !sameProjects(before?.projects ?? [], projects);
        if (projectsChanged) for (const p of [...(before?.projects ?? []), ...projects]) touchedTenants.add(p.tenantId || p.projectName);
        cameOnline = before?.liveness !== NodeLiveness.ONLINE;
        const status = create(NodeStatusSchema, {
          lastHeartbeatAt: timestampFromDate(now),
          agentVersion: req.agentVersion,
          capabilities: req.capabilities,
          labels: req.labels,
          uptimeSeconds: req.uptimeSeconds,
          liveness: NodeLiveness.ONLINE,
          livenessChangedAt: cameOnline ? timestampFromDate(now) : before?.livenessChangedAt,
          heartbeatIntervalMs: req.heartbeatIntervalMs > 0n ? req.heartbeatIntervalMs : (before?.heartbeatIntervalMs ?? 0n),
          projects,
          processes: req.processes,
        });
        const comparable = before ? { ...before, lastHeartbeatAt: status.lastHeartbeatAt, uptimeSeconds: status.uptimeSeconds } : undefined;
        reportChanged = !comparable || !sameStatus({ $typeName: "skipper.v1.ResourceStatus", kind: { case: "node", value: comparable } }, { $typeName: "skipper.v1.ResourceStatus", kind: { case: "node", value: status } });
        // A beat that changes nothing but the time is stored at most every HEARTBEAT_PERSIST_MS
        // (returning the node unchanged writes nothing); liveness counts every beat.
        const storedAt = before?.lastHeartbeatAt ? timestampDate(before.lastHeartbeatAt).getTime() : 0;
        if (!reportChanged && !cameOnline && now.getTime() - storedAt < HEARTBEAT_PERSIST_MS) return node;
        node.currentState = { $typeName: "skipper.v1.ResourceStatus", kind: { case: "node", value: status } };
        node.updatedAt = timestampFromDate(now);
        return node;
      });
      deps.onHeartbeat?.(nodeId, now, Number(req.heartbeatIntervalMs));
      if (cameOnline) {
        await recordEvents(store, [{ type: "node_online", requestId: call.requestId, correlationId: call.correlationId, resourceType: "node", resourceId: nodeId, nodeId }]);
        // Work that waited for this node (or placement on it) can go now.
        deps.reconciler.enqueueAll();
      } else if (projectsChanged) {
        for (const t of touchedTenants) if (t !== "") deps.reconciler.enqueue(t);
      }
      const last = lastHeartbeatEvent.get(nodeId) ?? 0;
      if (reportChanged || now.getTime() - last >= HEARTBEAT_EVENT_EVERY_MS) {
        lastHeartbeatEvent.set(nodeId, now.getTime());
        await recordEvents(store, [
          {
            type: "node_heartbeat_received",
            requestId: call.requestId,
            correlationId: call.correlationId,
            resourceType: "node",
            resourceId: nodeId,
            nodeId,
            data: {
              agent_version: req.agentVersion,
              changed: reportChanged,
              docker_available: req.capabilities?.dockerAvailable ?? false,
              compose_version: req.capabilities?.composeVersion ?? "",
            },
          },
        ]);
      }
      return {
        meta: responseMeta(ctx),
        serverTime: timestampFromDate(now),
        pendingWorkOrders: await store.countPendingWorkOrders(nodeId),
      };
    },

    async getNextWorkOrder(req, ctx) {
      const nodeId = selfOnly(callInfo(ctx), req.nodeId);
      let workOrder = await store.nextPendingWorkOrder(nodeId);
      // An expired order is failed here rather than handed out for a claim that must refuse it.
      while (workOrder && expiredAt(workOrder, deps.now())) {
        await expireOrder(deps, workOrder, deps.now());
        deps.reconciler.enqueue(workOrder.target?.tenantId ?? "");
        workOrder = await store.nextPendingWorkOrder(nodeId);
      }
      return { meta: responseMeta(ctx), workOrder };
    },

    async *watchWorkOrders(req, ctx) {
      const nodeId = selfOnly(callInfo(ctx), req.nodeId);
      const queue: WorkOrder[] = [];
      let wake: (() => void) | undefined;
      const unsubscribe = deps.feed.subscribe(nodeId, (o) => {
        queue.push(o);
        wake?.();
      });
      try {
        // Subscribed first, then read: an order created in between is sent twice, never missed.
        yield { meta: responseMeta(ctx), workOrder: await store.nextPendingWorkOrder(nodeId), serverTime: timestampFromDate(deps.now()) };
        while (!ctx.signal.aborted) {
          if (queue.length === 0) {
            await new Promise<void>((resolve) => {
              const done = () => {
                clearTimeout(timer);
                ctx.signal.removeEventListener("abort", done);
                wake = undefined;
                resolve();
              };
              const timer = setTimeout(done, WATCH_KEEPALIVE_MS);
              wake = done;
              ctx.signal.addEventListener("abort", done, { once: true });
            });
          }
          if (ctx.signal.aborted) break;
          yield { meta: responseMeta(ctx), workOrder: queue.shift(), serverTime: timestampFromDate(deps.now()) };
        }
      } finally {
        unsubscribe();
      }
    },

    async reportResourceState(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = selfOnly(call, req.nodeId);
      const order = req.workOrderId === "" ? undefined : await store.getWorkOrder(checkId(req.workOrderId, "work_order_id"));
      if (req.workOrderId !== "" && !order) throw notFound("work_order", req.workOrderId);
      if (order && order.target?.nodeId !== nodeId) throw forbidden(`work order ${order.id} belongs to another node`);
      // A node may report on itself and on the resources its own work order touched.
      const allowed = new Set<string>([`node/${nodeId}`]);
      if (order) {
        allowed.add(`tenant/${order.target?.tenantId ?? ""}`);
        allowed.add(`deployment/${order.desiredState?.deploymentId ?? ""}`);
        for (const s of order.desiredState?.serviceIds ?? []) allowed.add(`service/${s}`);
      }
      const updated: Resource[] = [];
      for (const [i, report] of req.reports.entries()) {
        const type = checkResourceType(report.resourceType, `reports[${i}].resource_type`);
        const id = checkId(report.id, `reports[${i}].id`);
        if (!allowed.has(`${type}/${id}`)) {
          throw forbidden(`node ${nodeId} may not report state of ${type} ${id}`, { field: `reports[${i}]` });
        }
        checkStatusKind(type, report.currentState, `reports[${i}].current_state`);
        if (report.lastAppliedState?.kind.case) checkSpecKind(type, report.lastAppliedState, `reports[${i}].last_applied_state`);
        if (!report.currentState?.kind.case && !report.lastAppliedState?.kind.case) {
          throw invalid("a report must carry current_state or last_applied_state", { field: `reports[${i}]` });
        }
      }
      for (const report of req.reports) {
        const type = checkResourceType(report.resourceType);
        const r = await store.updateResource(type, report.id, (cur) => {
          if (report.currentState?.kind.case) {
            // The reconciler's per-node records belong to the controller, not to the report.
            const kept = cur.currentState?.kind.case === "tenant" ? cur.currentState.kind.value.targets : [];
            cur.currentState = report.currentState;
            if (cur.currentState.kind.case === "tenant") cur.currentState.kind.value.targets = kept;
          }
          if (report.lastAppliedState?.kind.case) cur.lastAppliedState = report.lastAppliedState;
          cur.updatedAt = timestampFromDate(deps.now());
          return cur;
        });
        updated.push(r);
        await recordEvents(store, [
          {
            type: "resource_state_reported",
            requestId: call.requestId,
            correlationId: order?.correlationId ?? call.correlationId,
            resourceType: type,
            resourceId: report.id,
            tenantId: tenantOf(r),
            nodeId,
            workOrderId: order?.id,
          },
        ]);
      }
      return { meta: responseMeta(ctx), resources: updated };
    },
  };
}

function sameProjects(a: ProjectObservation[], b: ProjectObservation[]): boolean {
  return a.length === b.length && a.every((p, i) => equals(ProjectObservationSchema, p, b[i]!));
}
