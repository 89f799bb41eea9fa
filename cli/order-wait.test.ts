// runOrder's ends when no node takes the order in time, against a fake work-order API (the real
// path, a beating node that takes nothing, is in test/logs-e2e.test.ts).
import { create } from "@bufbuild/protobuf";
import { ConnectError, Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import type { Clients } from "./connection.js";
import { runOrder } from "./order-wait.js";

// A work-order API holding one order; `onCancel` decides what a cancel does to it.
function fakeOrders(onCancel: (o: WorkOrder) => WorkOrder) {
  let order = create(WorkOrderSchema, { id: "o-1", status: WorkOrderStatus.PENDING });
  const calls: string[] = [];
  const orders = {
    createWorkOrder: async () => (calls.push("create"), { workOrder: order }),
    cancelWorkOrder: async (req: { reason: string }) => {
      calls.push(`cancel: ${req.reason}`);
      order = onCancel(order);
      return { workOrder: order };
    },
    getWorkOrder: async () => (calls.push("get"), { workOrder: order }),
  };
  return { clients: { orders } as unknown as Clients, calls };
}

const REQ = { type: WorkOrderType.EXECUTE_COMMAND, target: { nodeId: "n1" } };

describe("runOrder", () => {
  it("cancels an order not taken within the wait and says it was cancelled", async () => {
    const { clients, calls } = fakeOrders((o) => ({ ...o, status: WorkOrderStatus.CANCELLED }));
    const end = await runOrder(clients, REQ, 0);
    expect(end.untaken).toBe("the node did not take the order within 0s; the order was cancelled");
    expect(end.order.status).toBe(WorkOrderStatus.CANCELLED);
    expect(calls).toEqual(["create", "cancel: the node did not take the order within 0s"]);
  });

  it("says the order is still queued when the cancel fails, naming the order and the error", async () => {
    const { clients } = fakeOrders(() => {
      throw new ConnectError("controller unreachable", Code.Unavailable);
    });
    const end = await runOrder(clients, REQ, 0);
    expect(end.untaken).toBe(
      "the node did not take the order within 0s, and cancelling it failed ([unavailable] controller unreachable): order o-1 is still queued",
    );
    expect(end.order.status).toBe(WorkOrderStatus.PENDING);
  });

  it("waits for an order the node finished just before the cancel reached it, which the cancel refuses", async () => {
    const { clients, calls } = fakeOrders((o) => {
      Object.assign(o, { status: WorkOrderStatus.SUCCESS });
      throw new ConnectError("work order o-1 already finished (success); there is nothing to cancel", Code.FailedPrecondition);
    });
    const end = await runOrder(clients, REQ, 0);
    expect(end.untaken).toBeUndefined();
    expect(end.order.status).toBe(WorkOrderStatus.SUCCESS);
    expect(calls).toEqual(["create", "cancel: the node did not take the order within 0s", "get"]);
  });

  it("waits for an order the node took just before the cancel reached it", async () => {
    let gets = 0;
    const { clients, calls } = fakeOrders((o) => ({ ...o, status: WorkOrderStatus.RUNNING }));
    const get = (clients.orders as unknown as { getWorkOrder: () => Promise<{ workOrder: WorkOrder }> }).getWorkOrder;
    (clients.orders as unknown as { getWorkOrder: () => Promise<{ workOrder: WorkOrder }> }).getWorkOrder = async () => {
      const { workOrder } = await get();
      // The second read finds it done.
      return { workOrder: ++gets >= 2 ? { ...workOrder, status: WorkOrderStatus.SUCCESS } : workOrder };
    };
    const end = await runOrder(clients, REQ, 0);
    expect(end.untaken).toBeUndefined();
    expect(end.order.status).toBe(WorkOrderStatus.SUCCESS);
    expect(calls.filter((c) => c.startsWith("cancel"))).toHaveLength(1);
  });
});
