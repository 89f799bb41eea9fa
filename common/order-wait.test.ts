// The one rule by which the CLI and the dashboard give up on an order they wait for: cancel what
// no node has taken (past the claim deadline, or when the waiter leaves), never what one has.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { WorkOrderSchema, WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { waitForOrder, type OrderCalls } from "./order-wait.js";

// An order API whose reads return `statuses` in turn (the last one repeats); cancels are noted.
function fakeCalls(statuses: WorkOrderStatus[]) {
  const cancels: string[] = [];
  let reads = 0;
  const order = (status: WorkOrderStatus) => create(WorkOrderSchema, { id: "o-1", status });
  const calls: OrderCalls = {
    getWorkOrder: async () => ({ workOrder: order(statuses[Math.min(reads++, statuses.length - 1)]!) }),
    cancelWorkOrder: async (req) => {
      cancels.push(req.reason);
      return { workOrder: order(WorkOrderStatus.CANCELLED) };
    },
  };
  return { calls, cancels, queued: order(WorkOrderStatus.PENDING) };
}

const now = () => Promise.resolve();
const FOREVER = 3_600_000;

describe("waitForOrder", () => {
  it("waits for an order a node took to its end, past the claim deadline, without cancelling it", async () => {
    const { calls, cancels, queued } = fakeCalls([WorkOrderStatus.RUNNING, WorkOrderStatus.RUNNING, WorkOrderStatus.SUCCESS]);
    const running: WorkOrder = { ...queued, status: WorkOrderStatus.RUNNING };
    const end = await waitForOrder(calls, running, { pause: now, claimWithinMs: 0 });
    expect(end).toEqual({ order: expect.objectContaining({ status: WorkOrderStatus.SUCCESS }) });
    expect(cancels).toEqual([]);
  });

  it("cancels an order still pending when its waiter leaves", async () => {
    const { calls, cancels, queued } = fakeCalls([WorkOrderStatus.PENDING]);
    const gone = new Error("left");
    const pause = () => Promise.reject(gone);
    await expect(waitForOrder(calls, queued, { pause, claimWithinMs: FOREVER, leaving: "the view closed" })).rejects.toBe(gone);
    expect(cancels).toEqual(["the view closed"]);
  });

  it("leaves an order a node took running when its waiter leaves", async () => {
    const { calls, cancels, queued } = fakeCalls([WorkOrderStatus.RUNNING]);
    const gone = new Error("left");
    let pauses = 0;
    const pause = () => (pauses++ === 0 ? Promise.resolve() : Promise.reject(gone));
    await expect(waitForOrder(calls, queued, { pause, claimWithinMs: FOREVER })).rejects.toBe(gone);
    expect(cancels).toEqual([]);
  });
});
