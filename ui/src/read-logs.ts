// Reading a tenant's logs through the API, as `skipper logs` does: which nodes run the tenant
// (with their liveness and the services seen there), and one read_logs order per node, queued
// once and read until the node has finished it. The controller never reaches into a host: the
// node's agent reads its engine and reports the lines, capped, secret values blanked.
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { NodeLiveness } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import { CLAIM_WITHIN_MS, waitForOrder } from "../../common/order-wait.js";
import type { Api } from "./api.js";
import { mergeContainerLogs, type ShownLine } from "./log-lines.js";

/** A node the tenant runs on, as the logs view needs it. */
export interface LogTarget {
  nodeId: string;
  /** Its agent is not beating: OFFLINE, or never heard from (no liveness yet, or no node). */
  offline: boolean;
  lastHeartbeat: Date | undefined;
  /** The tenant's compose services the node last reported. */
  services: string[];
}

/** What one node answered: its lines, or why there are none. */
export type NodeAnswer =
  | { kind: "lines"; lines: ShownLine[]; truncated: boolean }
  | { kind: "failed"; code: string; message: string }
  | { kind: "no-answer"; orderId: string; cancelled: boolean };

export interface LogsRequest {
  tenantId: string;
  nodeId: string;
  services: string[];
  tailLines: number;
  since: Date | undefined;
}

/**
 * How long a node has to take the order before it is cancelled and the node said not to answer
 * (the rule the CLI shares, common/order-wait.ts: one a node took is waited for to its end).
 */
export const ANSWER_WITHIN_MS = CLAIM_WITHIN_MS;

/** The nodes the tenant runs on, sorted, each with its liveness and the tenant's services there. */
export async function logTargets(api: Api, tenantId: string): Promise<LogTarget[]> {
  const t = (await api.resources.getResource({ resourceType: "tenant", id: tenantId })).resource;
  const st = t?.currentState?.kind.case === "tenant" ? t.currentState.kind.value : undefined;
  const ids = [...new Set((st?.targets ?? []).map((x) => x.nodeId))].sort();
  return Promise.all(
    ids.map(async (nodeId) => {
      const n = (await api.resources.getResource({ resourceType: "node", id: nodeId })).resource;
      const ns = n?.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
      const services = (ns?.projects ?? []).filter((p) => p.tenantId === tenantId).flatMap((p) => p.services.map((s) => s.service));
      return {
        nodeId,
        // Only a node whose agent is beating (if late) can answer; one gone silent, or never heard
        // from, would leave the order waiting for ANSWER_WITHIN_MS.
        offline: ns?.liveness !== NodeLiveness.ONLINE && ns?.liveness !== NodeLiveness.DEGRADED,
        lastHeartbeat: ns?.lastHeartbeatAt ? timestampDate(ns.lastHeartbeatAt) : undefined,
        services: [...new Set(services)].sort(),
      };
    }),
  );
}

/**
 * Queues a read_logs order (one attempt) and waits for its end. An order no node took within
 * ANSWER_WITHIN_MS, or when `signal` aborts, is cancelled so that it does not run later for nobody.
 * A refused call (a viewer's FORBIDDEN) throws the ConnectError.
 */
export async function readNodeLogs(api: Api, req: LogsRequest, signal: AbortSignal): Promise<NodeAnswer> {
  const { workOrder } = await api.orders.createWorkOrder(
    {
      type: WorkOrderType.READ_LOGS,
      maxAttempts: 1,
      target: { tenantId: req.tenantId, nodeId: req.nodeId },
      action: {
        kind: {
          case: "readLogs",
          value: { services: req.services, tailLines: req.tailLines, since: req.since ? timestampFromDate(req.since) : undefined },
        },
      },
    },
    { signal },
  );
  const { order, untaken } = await waitForOrder(api.orders, workOrder!, {
    pause: (ms) => pause(ms, signal),
    signal,
    leaving: "the dashboard stopped waiting for the logs",
  });
  if (untaken !== undefined) return { kind: "no-answer", orderId: order.id, cancelled: order.status === WorkOrderStatus.CANCELLED };
  if (order.status !== WorkOrderStatus.SUCCESS)
    return { kind: "failed", code: order.result?.code || WorkOrderStatus[order.status] || "FAILED", message: order.result?.message ?? "" };
  const logs = order.result?.details?.logs ?? [];
  return { kind: "lines", lines: mergeContainerLogs(logs), truncated: logs.some((c) => c.truncated) };
}

/** Resolves after `ms`, or rejects at once when `signal` aborts. */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", stop);
      resolve();
    }, ms);
    const stop = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener("abort", stop, { once: true });
  });
}
