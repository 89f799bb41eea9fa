// Ad-hoc orders the CLI queues and waits for (read_logs, execute_command): queued once (one
// attempt: a second would run the command again), then read until the node has finished it. Only
// a node whose agent beats can take one: nodeSilence() says which, and an order no node has
// taken within CLAIM_WITHIN_MS is cancelled (it would otherwise run later, for nobody) and the
// wait ends with the reason.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { NodeLiveness } from "../gen/skipper/v1/resource_pb.js";
import type { CreateWorkOrderRequestSchema } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import type { Clients } from "./connection.js";

const FINISHED = new Set([WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED]);
/** How long a queued order may wait for its node to take it. */
export const CLAIM_WITHIN_MS = 60_000;

/** Why the node cannot take an order now ("offline, last heartbeat …"), or undefined when its agent beats. */
export async function nodeSilence(clients: Clients, nodeId: string): Promise<string | undefined> {
  const n = (await clients.resources.getResource({ resourceType: "node", id: nodeId })).resource;
  const st = n?.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
  if (st?.liveness === NodeLiveness.ONLINE || st?.liveness === NodeLiveness.DEGRADED) return undefined;
  return st?.lastHeartbeatAt
    ? `offline since its last heartbeat at ${timestampDate(st.lastHeartbeatAt).toISOString()}`
    : "offline: its agent has never sent a heartbeat";
}

/** What runOrder ended with: the finished order, or the one no node took in time. */
export interface OrderEnd {
  order: WorkOrder;
  /**
   * Set when nobody took the order within the wait: why, in a sentence, and what became of the
   * order (cancelled, or still queued when the cancel itself failed).
   */
  untaken?: string;
}

/** Queues the order and resolves once it has finished (asking every quarter second), or was not taken in time. */
export async function runOrder(
  clients: Clients,
  req: MessageInitShape<typeof CreateWorkOrderRequestSchema>,
  claimWithinMs = CLAIM_WITHIN_MS,
): Promise<OrderEnd> {
  const { workOrder } = await clients.orders.createWorkOrder({ maxAttempts: 1, ...req });
  let order = workOrder!;
  const deadline = Date.now() + claimWithinMs;
  while (!FINISHED.has(order.status)) {
    if (order.status === WorkOrderStatus.PENDING && Date.now() >= deadline) {
      const reason = `the node did not take the order within ${claimWithinMs / 1000}s`;
      let after: WorkOrder;
      try {
        after = (await clients.orders.cancelWorkOrder({ id: order.id, reason })).workOrder ?? order;
      } catch (e) {
        // Refused because the node took (or even finished) it meanwhile: wait for it after all.
        const now = await clients.orders.getWorkOrder({ id: order.id }).then(
          (r) => r.workOrder,
          () => undefined,
        );
        if (now && now.status !== WorkOrderStatus.PENDING) {
          order = now;
          continue;
        }
        // Not cancelled: say so, since the order may still run when the node comes back.
        const why = e instanceof Error ? e.message : String(e);
        return { order, untaken: `${reason}, and cancelling it failed (${why}): order ${order.id} is still queued` };
      }
      if (after.status === WorkOrderStatus.CANCELLED) return { order: after, untaken: `${reason}; the order was cancelled` };
      if (after.status === WorkOrderStatus.PENDING) return { order: after, untaken: `${reason}; order ${order.id} is still queued` };
      // Taken at the last moment: wait for it after all.
      order = after;
      continue;
    }
    await new Promise((r) => setTimeout(r, 250));
    order = (await clients.orders.getWorkOrder({ id: order.id })).workOrder!;
  }
  return { order };
}
