// Ad-hoc orders the CLI queues and waits for (read_logs, execute_command): queued once (one
// attempt: a second would run the command again), then waited for by the rule the dashboard
// shares (common/order-wait.ts: an order no node has taken within CLAIM_WITHIN_MS is cancelled,
// one a node took is waited for to its end). Only a node whose agent beats can take one:
// nodeSilence() says which.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { NodeLiveness } from "../gen/skipper/v1/resource_pb.js";
import type { CreateWorkOrderRequestSchema } from "../gen/skipper/v1/work_order_service_pb.js";
import { CLAIM_WITHIN_MS, waitForOrder, type WaitEnd } from "../common/order-wait.js";
import type { Clients } from "./connection.js";

/** Why the node cannot take an order now ("offline, last heartbeat …"), or undefined when its agent beats. */
export async function nodeSilence(clients: Clients, nodeId: string): Promise<string | undefined> {
  const n = (await clients.resources.getResource({ resourceType: "node", id: nodeId })).resource;
  const st = n?.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
  if (st?.liveness === NodeLiveness.ONLINE || st?.liveness === NodeLiveness.DEGRADED) return undefined;
  return st?.lastHeartbeatAt
    ? `offline since its last heartbeat at ${timestampDate(st.lastHeartbeatAt).toISOString()}`
    : "offline: its agent has never sent a heartbeat";
}

/** The nodes a tenant runs on (its current targets), sorted: where its orders are asked. */
export async function tenantNodes(clients: Clients, tenant: string): Promise<string[]> {
  const t = (await clients.resources.getResource({ resourceType: "tenant", id: tenant })).resource;
  const st = t?.currentState?.kind.case === "tenant" ? t.currentState.kind.value : undefined;
  return [...new Set((st?.targets ?? []).map((x) => x.nodeId))].sort();
}

/** Queues the order (one attempt) and waits for its end by the shared rule (common/order-wait.ts). */
export async function runOrder(
  clients: Clients,
  req: MessageInitShape<typeof CreateWorkOrderRequestSchema>,
  claimWithinMs = CLAIM_WITHIN_MS,
): Promise<WaitEnd> {
  const { workOrder } = await clients.orders.createWorkOrder({ maxAttempts: 1, ...req });
  return waitForOrder(clients.orders, workOrder!, {
    claimWithinMs,
    pause: (ms) => new Promise((r) => setTimeout(r, ms)),
    leaving: "the command line stopped waiting for the order",
  });
}
