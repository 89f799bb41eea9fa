// Ad-hoc orders the CLI queues and waits for (read_logs, execute_command): queued once (one
// attempt: a second would run the command again), then read until the node has finished it.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { CreateWorkOrderRequestSchema } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import type { Clients } from "./connection.js";

const FINISHED = new Set([WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED]);

/** Queues the order and resolves with it once it has finished (asking every quarter second). */
export async function runOrder(clients: Clients, req: MessageInitShape<typeof CreateWorkOrderRequestSchema>): Promise<WorkOrder> {
  const { workOrder } = await clients.orders.createWorkOrder({ maxAttempts: 1, ...req });
  let order = workOrder!;
  while (!FINISHED.has(order.status)) {
    await new Promise((r) => setTimeout(r, 250));
    order = (await clients.orders.getWorkOrder({ id: order.id })).workOrder!;
  }
  return order;
}
