// NodeService.ClaimNextWorkOrder over the real transport (HTTP/2 + TLS, Connect and REST): the
// node's next pending order claimed in one call, in priority then age order; none when nothing is
// pending; another node's queue refused; and of concurrent calls, through one controller or two
// sharing a PostgreSQL database, each order goes to exactly one.
import { afterEach, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { PostgresStore } from "../controller/store/postgres/pg-store.js";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { rawRequest } from "./helpers/https.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";

const started: TestController[] = [];
afterEach(async () => {
  for (const c of started.splice(0).reverse()) await c.stop();
});

async function controller(opts: Parameters<typeof startController>[0] = {}): Promise<TestController> {
  const c = await startController({ tls: true, ...opts });
  started.push(c);
  return c;
}

/** Queues an inspect order for `nodeId` with `priority`; its id. */
async function queue(tc: TestController, nodeId: string, priority = 0): Promise<string> {
  const res = await tc.client(WorkOrderService, { admin: true }).createWorkOrder({
    type: WorkOrderType.INSPECT,
    target: { nodeId },
    action: { kind: { case: "inspect", value: {} } },
    priority,
  });
  return res.workOrder!.id;
}

describe("ClaimNextWorkOrder", () => {
  it("claims the node's pending orders one per call, highest priority first then oldest, and answers none when nothing is left", async () => {
    const tc = await controller();
    const nodes = tc.client(NodeService, { admin: true });
    const token = (await nodes.registerNode({ nodeId: "host-1" })).token;
    const low1 = await queue(tc, "host-1", 0);
    const high = await queue(tc, "host-1", 5);
    const low2 = await queue(tc, "host-1", 0);
    const node = tc.client(NodeService, { token });

    const claimed: WorkOrder[] = [];
    for (let i = 0; i < 3; i++) claimed.push((await node.claimNextWorkOrder({ nodeId: "host-1" })).workOrder!);
    expect(claimed.map((o) => o.id)).toEqual([high, low1, low2]);
    for (const o of claimed) {
      expect(o.status).toBe(WorkOrderStatus.RUNNING);
      expect(o.claim?.nodeId).toBe("host-1");
      expect(o.claim?.fencingToken).toBe(1n);
      expect(o.claim?.leaseExpiresAt).toBeDefined();
    }
    expect((await node.claimNextWorkOrder({ nodeId: "host-1" })).workOrder).toBeUndefined();

    // The claim is the ordinary one: its holder reports under it, and the order ends.
    const done = await tc
      .client(WorkOrderService, { token })
      .reportWorkOrderResult({ id: high, result: { success: true, code: "INSPECT_OK", message: "ok" }, fencingToken: 1n });
    expect(done.workOrder?.status).toBe(WorkOrderStatus.SUCCESS);
  });

  it("refuses a node claiming from another node's queue, and the order stays pending", async () => {
    const tc = await controller();
    const nodes = tc.client(NodeService, { admin: true });
    await nodes.registerNode({ nodeId: "host-1" });
    const other = (await nodes.registerNode({ nodeId: "host-2" })).token;
    const id = await queue(tc, "host-1");
    const e = await rpcError(tc.client(NodeService, { token: other }).claimNextWorkOrder({ nodeId: "host-1" }));
    expect(e.code).toBe("FORBIDDEN");
    const order = (await tc.client(WorkOrderService, { admin: true }).getWorkOrder({ id })).workOrder;
    expect(order?.status).toBe(WorkOrderStatus.PENDING);
  });

  it("is a REST route derived from the contract: POST /v1/nodes/{node_id}/work-orders/next/claim", async () => {
    const tc = await controller();
    const token = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "host-1" })).token;
    const id = await queue(tc, "host-1");
    const ctl = { url: tc.url, ca: tc.ca! } as Parameters<typeof rawRequest>[0];
    const post = () =>
      rawRequest(
        ctl,
        "POST",
        "/v1/nodes/host-1/work-orders/next/claim",
        { authorization: `Bearer ${token}`, "content-type": "application/json" },
        "{}",
      );
    const first = await post();
    expect(first.status).toBe(200);
    // The REST envelope: the answer under data, error null.
    const body = JSON.parse(first.body) as { data: { work_order?: { id: string; status: string } }; error: unknown };
    expect(body.error).toBeNull();
    expect(body.data.work_order?.id).toBe(id);
    expect(body.data.work_order?.status).toBe("WORK_ORDER_STATUS_RUNNING");
    const second = JSON.parse((await post()).body) as { data: { work_order?: unknown } };
    expect(second.data.work_order).toBeUndefined();
  });

  it("of 12 concurrent calls for 8 pending orders, 8 get one order each and 4 get none", async () => {
    const tc = await controller();
    const token = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "host-1" })).token;
    const ids = new Set<string>();
    for (let i = 0; i < 8; i++) ids.add(await queue(tc, "host-1"));
    // Each call on its own client (its own HTTP/2 connection), as separate agent processes would.
    const answers = await Promise.all(
      Array.from({ length: 12 }, () => tc.client(NodeService, { token }).claimNextWorkOrder({ nodeId: "host-1" })),
    );
    const got = answers.flatMap((a) => (a.workOrder ? [a.workOrder.id] : []));
    expect(got).toHaveLength(8);
    expect(new Set(got)).toEqual(ids);
  });
});

const url = pgUrl();
describe.skipIf(!url)("ClaimNextWorkOrder on two controllers sharing PostgreSQL", () => {
  it("of 24 concurrent calls through two controllers for 10 orders, each order is claimed exactly once", async () => {
    const db = await freshDatabase("claim_next_two");
    const a = await controller({ store: new PostgresStore(db, { maxConnections: 8 }) });
    const b = await controller({ store: new PostgresStore(db, { maxConnections: 8 }), adminToken: ADMIN_TOKEN });
    const token = (await a.client(NodeService, { admin: true }).registerNode({ nodeId: "host-1" })).token;
    const ids = new Set<string>();
    for (let i = 0; i < 10; i++) ids.add(await queue(i % 2 === 0 ? a : b, "host-1"));
    const answers = await Promise.all(
      Array.from({ length: 24 }, (_, i) => (i % 2 === 0 ? a : b).client(NodeService, { token }).claimNextWorkOrder({ nodeId: "host-1" })),
    );
    const got = answers.flatMap((x) => (x.workOrder ? [x.workOrder.id] : []));
    expect(got).toHaveLength(10);
    expect(new Set(got)).toEqual(ids);
    // Stored as claimed once: one attempt each, under fencing token 1.
    for (const id of ids) {
      const o = (await b.client(WorkOrderService, { admin: true }).getWorkOrder({ id })).workOrder!;
      expect(o.status).toBe(WorkOrderStatus.RUNNING);
      expect(o.attempts).toHaveLength(1);
      expect(o.fencingToken).toBe(1n);
    }
  });
});
