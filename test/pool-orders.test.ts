// Pool orders through the API, on the in-memory transport: what CreateWorkOrder takes and refuses,
// a node's next order being a pool order it may take (and never one it may not), a claim by id
// checked against the pool, and the wait a pending pool order shows. The processes and real
// agents are pool-orders-e2e.test.ts's.
import { createHash } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ComposeVariant } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { startInMemory, type InMemoryController } from "./helpers/in-memory-controller.js";

const inspect = { kind: { case: "inspect" as const, value: {} } };
const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

describe("pool orders through the API", () => {
  let c: InMemoryController;
  const tokens = new Map<string, string>();

  // Registers `id` with `labels` and has it report (an older agent's fields only: no capability list).
  async function node(id: string, labels: Record<string, string>, docker = true) {
    const token = (await c.admin(NodeService).registerNode({ nodeId: id, labels })).token;
    tokens.set(id, token);
    await c.asNode(NodeService, token).heartbeat({
      nodeId: id,
      agentVersion: "0.0.1",
      capabilities: { dockerAvailable: docker, composeVariant: docker ? ComposeVariant.PLUGIN_V2 : ComposeVariant.NONE },
    });
  }
  const refusal = (p: Promise<unknown>) =>
    p.then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );

  beforeEach(async () => {
    c = await startInMemory();
    await node("web-1", { role: "web" });
    await node("web-2", { role: "web" }, false);
    await node("db-1", { role: "db" });
  });
  afterEach(async () => {
    await c.close();
  });

  it("a pool order names neither a node nor a tenant, and its capabilities are names", async () => {
    const orders = c.admin(WorkOrderService);
    const pool = { nodeSelector: { role: "web" } };
    const both = await refusal(orders.createWorkOrder({ type: WorkOrderType.INSPECT, target: { pool, nodeId: "web-1" }, action: inspect }));
    expect(both?.rawMessage).toMatch(/node_id or target.pool, not both/);
    const tenant = await refusal(
      orders.createWorkOrder({ type: WorkOrderType.INSPECT, target: { pool, tenantId: "t1" }, action: inspect }),
    );
    expect(tenant?.rawMessage).toMatch(/not a tenant/);
    const name = await refusal(
      orders.createWorkOrder({ type: WorkOrderType.INSPECT, target: { pool, requiredCapabilities: ["Compose Deploy"] }, action: inspect }),
    );
    expect(name?.rawMessage).toMatch(/not a capability name/);
  });

  it("an order for one node that lacks a required capability is refused at once, CAPABILITY_MISSING", async () => {
    const orders = c.admin(WorkOrderService);
    const refused = await refusal(
      orders.createWorkOrder({
        type: WorkOrderType.INSPECT,
        target: { nodeId: "web-2", requiredCapabilities: ["compose.deploy"] },
        action: inspect,
      }),
    );
    expect(refused?.rawMessage).toMatch(/lacks the required capabilities compose.deploy/);
    // The older agent's fields imply it on web-1.
    const ok = await orders.createWorkOrder({
      type: WorkOrderType.INSPECT,
      target: { nodeId: "web-1", requiredCapabilities: ["compose.deploy"] },
      action: inspect,
    });
    expect(ok.workOrder?.status).toBe(WorkOrderStatus.PENDING);
  });

  it("only an eligible node is offered a pool order, claims it, and is named by it", async () => {
    const orders = c.admin(WorkOrderService);
    const created = (
      await orders.createWorkOrder({
        type: WorkOrderType.INSPECT,
        target: { pool: { nodeSelector: { role: "web" } }, requiredCapabilities: ["compose.deploy"] },
        action: inspect,
      })
    ).workOrder!;
    expect([created.target?.nodeId, created.wait?.reason, created.wait?.eligibleNodes]).toEqual(["", "WAITING_FOR_CLAIM", 1]);
    // Outside the pool, and in it without the capability: offered nothing, refused by id.
    for (const id of ["db-1", "web-2"]) {
      expect((await c.asNode(NodeService, tokens.get(id)!).getNextWorkOrder({ nodeId: id })).workOrder).toBeUndefined();
      const refused = await refusal(c.asNode(WorkOrderService, tokens.get(id)!).claimWorkOrder({ id: created.id }));
      expect(refused?.rawMessage).toMatch(/may not claim or read pool order/);
    }
    const web1 = c.asNode(NodeService, tokens.get("web-1")!);
    // Its heartbeat's answer counts the pool order it may take (a polling agent then asks for it).
    const beat = {
      nodeId: "web-1",
      agentVersion: "0.0.1",
      capabilities: { dockerAvailable: true, composeVariant: ComposeVariant.PLUGIN_V2 },
    };
    expect((await web1.heartbeat(beat)).pendingWorkOrders).toBe(1);
    const claimed = (await web1.claimNextWorkOrder({ nodeId: "web-1" })).workOrder!;
    expect([claimed.id, claimed.target?.nodeId, claimed.claim?.nodeId]).toEqual([created.id, "web-1", "web-1"]);
    const started = (await c.events({ workOrderId: created.id })).filter((e) => e.type === "work_order_started");
    expect(started.map((e) => e.nodeId)).toEqual(["web-1"]);
    const read = (await orders.getWorkOrder({ id: created.id })).workOrder!;
    expect([read.status, read.wait]).toEqual([WorkOrderStatus.RUNNING, undefined]);
  });

  it("a node outside the pool can neither read a pending pool order nor hear it on its watch", async () => {
    const stop = new AbortController();
    // Each watch's notices, keepalives left out; the first message is the node's own next order (none).
    const watch = (id: string) => {
      const it = c.asNode(NodeService, tokens.get(id)!).watchWorkOrders({ nodeId: id }, { signal: stop.signal })[Symbol.asyncIterator]();
      return async () => {
        for (;;) {
          const m = await it.next();
          if (m.done) throw new Error(`${id}'s watch ended`);
          if (m.value.workOrder) return m.value.workOrder;
        }
      };
    };
    try {
      const outside = watch("db-1");
      const inside = watch("web-1");
      const secret = new TextEncoder().encode("password=hunter2");
      const created = (
        await c.admin(WorkOrderService).createWorkOrder({
          type: WorkOrderType.UPLOAD_FILES,
          target: { pool: { nodeSelector: { role: "web" } } },
          action: { kind: { case: "uploadFiles", value: { files: [{ path: "app/app.conf", content: secret, sha256: sha256(secret) }] } } },
        })
      ).workOrder!;
      // The node the pool admits hears of it, and may read it.
      expect((await inside()).id).toBe(created.id);
      const read = (await c.asNode(WorkOrderService, tokens.get("web-1")!).getWorkOrder({ id: created.id })).workOrder!;
      expect(read.action?.kind.case).toBe("uploadFiles");
      // The node outside reads neither the order nor its action.
      const db1 = c.asNode(WorkOrderService, tokens.get("db-1")!);
      const refused = await refusal(db1.getWorkOrder({ id: created.id }));
      expect([refused?.code, refused?.rawMessage]).toEqual([
        7,
        expect.stringMatching(/may not claim or read pool order.*labels do not match/),
      ]);
      expect((await c.asNode(NodeService, tokens.get("db-1")!).getNextWorkOrder({ nodeId: "db-1" })).workOrder).toBeUndefined();
      // Its watch's next notice is its own order, queued after the pool order: the pool order never came.
      const own = (
        await c.admin(WorkOrderService).createWorkOrder({ type: WorkOrderType.INSPECT, target: { nodeId: "db-1" }, action: inspect })
      ).workOrder!;
      expect((await outside()).id).toBe(own.id);
    } finally {
      stop.abort();
    }
  });

  it("pool orders no node can take do not hide an order behind them", async () => {
    const orders = c.admin(WorkOrderService);
    const stuck = 150;
    for (let i = 0; i < stuck; i++) {
      // Higher priority, so each goes before the one a node can take; none holds proxy.haproxy.
      await orders.createWorkOrder({
        type: WorkOrderType.INSPECT,
        target: { pool: { nodeSelector: {} }, requiredCapabilities: ["proxy.haproxy"] },
        action: inspect,
        priority: 10,
      });
    }
    const takeable = (
      await orders.createWorkOrder({ type: WorkOrderType.INSPECT, target: { pool: { nodeSelector: { role: "web" } } }, action: inspect })
    ).workOrder!;
    const web1 = c.asNode(NodeService, tokens.get("web-1")!);
    expect((await web1.getNextWorkOrder({ nodeId: "web-1" })).workOrder?.id).toBe(takeable.id);
    const claimed = (await web1.claimNextWorkOrder({ nodeId: "web-1" })).workOrder!;
    expect([claimed.id, claimed.target?.nodeId]).toEqual([takeable.id, "web-1"]);
  });

  it("a pool no node can serve waits with NO_ELIGIBLE_NODE, and the listing says so too", async () => {
    const orders = c.admin(WorkOrderService);
    const created = (
      await orders.createWorkOrder({
        type: WorkOrderType.INSPECT,
        target: { pool: { nodeSelector: { role: "cache" } } },
        action: inspect,
      })
    ).workOrder!;
    expect(created.wait?.reason).toBe("NO_ELIGIBLE_NODE");
    expect(created.wait?.message).toContain("3 NOT_IN_POOL");
    const listed = (await orders.listWorkOrders({ status: WorkOrderStatus.PENDING })).workOrders.find((o) => o.id === created.id);
    expect(listed?.wait?.reason).toBe("NO_ELIGIBLE_NODE");
  });
});
