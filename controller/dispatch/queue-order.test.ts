// Queueing an ad-hoc work order (dispatch/queue-order.ts), through WorkOrderService.CreateWorkOrder
// over the in-memory transport: a request that fails a check stores nothing, a good one is stored
// pending with its work_order_created event, and an x-idempotency-key retry replays it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService, type CreateWorkOrderRequestSchema } from "../../gen/skipper/v1/work_order_service_pb.js";
import { ResourceSchema } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { startInMemory, type InMemoryController } from "../../test/helpers/in-memory-controller.js";
import { rpcError } from "../../test/helpers/errors.js";

type CreateInit = MessageInitShape<typeof CreateWorkOrderRequestSchema>;

let c: InMemoryController;
const orders = () => c.admin(WorkOrderService);
const command = (...argv: string[]) => ({ kind: { case: "executeCommand" as const, value: { command: { argv } } } });
const echo = (node: string, ...args: string[]): CreateInit => ({
  type: WorkOrderType.EXECUTE_COMMAND,
  target: { nodeId: node },
  action: command("echo", ...args),
});

async function storedOrders(nodeId: string): Promise<WorkOrder[]> {
  return (await c.ctl.store.listWorkOrders({ nodeId, pageSize: 1000 })).items;
}
/** Everything an order leaves behind: the orders stored for the node and every event. */
async function footprint(nodeId: string) {
  return { orders: (await storedOrders(nodeId)).map((o) => o.id), events: (await c.events()).map((e) => e.id) };
}

beforeAll(async () => {
  c = await startInMemory();
  // A node that never reported capabilities: its agent decides which programs run.
  for (const id of ["n-bad", "n-good", "n-idem"]) await c.admin(NodeService).registerNode({ nodeId: id });
  await c.admin(ResourceService).createResource({
    resourceType: "tenant",
    resource: create(ResourceSchema, { id: "shop", resourceType: "tenant", desiredState: { kind: { case: "tenant", value: {} } } }),
  });
  await c.ctl.reconciler.idle();
});
afterAll(async () => {
  await c.close();
});

describe("a request that fails a check", () => {
  it.each<[string, CreateInit, string]>([
    [
      "EXECUTE_COMMAND with an empty argv",
      { type: WorkOrderType.EXECUTE_COMMAND, target: { nodeId: "n-bad" }, action: command() },
      "action.execute_command.command.argv",
    ],
    [
      "EXECUTE_COMMAND naming a tenant",
      { type: WorkOrderType.EXECUTE_COMMAND, target: { nodeId: "n-bad", tenantId: "shop" }, action: command("echo") },
      "target.tenant_id",
    ],
    ["DEPLOY_SERVICE (the reconciler's)", { type: WorkOrderType.DEPLOY_SERVICE, target: { nodeId: "n-bad", tenantId: "shop" } }, "type"],
    ["an action of another type", { type: WorkOrderType.INSPECT, target: { nodeId: "n-bad" }, action: command("echo") }, "action"],
  ])("%s is INVALID_REQUEST and stores no order and no event", async (_what, req, field) => {
    const before = await footprint("n-bad");
    const e = await rpcError(orders().createWorkOrder(req));
    expect(e.code).toBe("INVALID_REQUEST");
    expect(e.details.field).toBe(field);
    expect(await footprint("n-bad")).toEqual(before);
  });

  it("an order for a node never registered is RESOURCE_NOT_FOUND and stores nothing", async () => {
    const before = await footprint("n-ghost");
    expect((await rpcError(orders().createWorkOrder(echo("n-ghost")))).code).toBe("RESOURCE_NOT_FOUND");
    expect(await footprint("n-ghost")).toEqual(before);
  });
});

describe("a good request", () => {
  it("is stored pending, with one work_order_created event that names the program, not its arguments", async () => {
    const created = (await orders().createWorkOrder(echo("n-good", "secret-argument"))).workOrder!;
    expect(created.status).toBe(WorkOrderStatus.PENDING);
    const stored = (await c.ctl.store.getWorkOrder(created.id))!;
    expect(stored.status).toBe(WorkOrderStatus.PENDING);
    expect(stored.target?.nodeId).toBe("n-good");
    expect(stored.metadata?.annotations.reason).toBe("ad_hoc");
    const events = await c.events({ workOrderId: created.id });
    expect(events.map((e) => e.type)).toEqual(["work_order_created"]);
    expect(events[0]!.data).toEqual({ type: "execute_command", reason: "ad_hoc", program: "echo" });
    expect(JSON.stringify(events[0]!.data)).not.toContain("secret-argument");
  });

  it("with the same x-idempotency-key replays the first order and stores no second", async () => {
    const key = { headers: { "x-idempotency-key": "queue-once-1" } };
    const first = (await orders().createWorkOrder(echo("n-idem"), key)).workOrder!;
    const again = (await orders().createWorkOrder(echo("n-idem"), key)).workOrder!;
    expect(again.id).toBe(first.id);
    expect((await storedOrders("n-idem")).map((o) => o.id)).toEqual([first.id]);
    expect((await c.events({ workOrderId: first.id })).map((e) => e.type)).toEqual(["work_order_created"]);
    // The same key with another body is refused, and stores nothing either.
    expect((await rpcError(orders().createWorkOrder(echo("n-idem", "other"), key))).code).toBe("CONFLICT");
    expect((await storedOrders("n-idem")).map((o) => o.id)).toEqual([first.id]);
  });
});

describe("orders queued within one millisecond", () => {
  it("are listed, and taken, in the order they were queued", async () => {
    // A clock that stands still: every order gets the same created_at, as the orders one
    // reconcile pass issues do.
    const still = new Date("2026-11-27T10:00:00.000Z");
    const c2 = await startInMemory({ now: () => still });
    try {
      await c2.admin(NodeService).registerNode({ nodeId: "n-fifo" });
      const queued: string[] = [];
      for (let i = 1; i <= 12; i++) queued.push((await c2.admin(WorkOrderService).createWorkOrder(echo("n-fifo", `${i}`))).workOrder!.id);
      const listed = (await c2.ctl.store.listWorkOrders({ nodeId: "n-fifo", pageSize: 1000 })).items;
      expect(new Set(listed.map((o) => o.createdAt?.seconds))).toEqual(new Set([BigInt(still.getTime() / 1000)]));
      expect(listed.map((o) => o.id)).toEqual(queued);
      expect((await c2.ctl.store.nextPendingWorkOrder("n-fifo"))?.id).toBe(queued[0]);
    } finally {
      await c2.close();
    }
  });
});
