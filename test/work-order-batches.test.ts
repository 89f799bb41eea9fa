// WorkOrderService.ClaimWorkOrders and ReportWorkOrderResults over the real transport (HTTP/2 +
// TLS, Connect and REST), on the file store and on PostgreSQL: a node claims several of its
// pending orders in one call, each claimed as ClaimNextWorkOrder claims one; a batch of results
// answers every item on its own, as the single call would have, and ends each order once.
import { afterEach, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { PostgresStore } from "../controller/store/postgres/pg-store.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { rawRequest } from "./helpers/https.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";

const started: TestController[] = [];
afterEach(async () => {
  for (const c of started.splice(0).reverse()) await c.stop();
});

const OK = { success: true, code: "INSPECT_OK", message: "ok" };
const url = pgUrl();
const STORES: [string, (() => Promise<PostgresStore>) | undefined][] = [["the file store", undefined]];
if (url) STORES.push(["PostgreSQL", async () => new PostgresStore(await freshDatabase("wo_batches"), { maxConnections: 8 })]);

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

describe.each(STORES)("work order batches on %s", (_name, makeStore) => {
  async function setup(): Promise<{ tc: TestController; token: string }> {
    const tc = await startController({ tls: true, ...(makeStore ? { store: await makeStore() } : {}) });
    started.push(tc);
    const token = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "host-1" })).token;
    return { tc, token };
  }

  it("claims up to max of the node's pending orders, highest priority first, each with its own claim and lease", async () => {
    const { tc, token } = await setup();
    const ids: string[] = [];
    for (let p = 1; p <= 5; p++) ids.push(await queue(tc, "host-1", p));
    const orders = tc.client(WorkOrderService, { token });
    const batch = (await orders.claimWorkOrders({ nodeId: "host-1", max: 3 })).workOrders;
    expect(batch.map((o) => o.id)).toEqual([ids[4], ids[3], ids[2]]);
    for (const o of batch) {
      expect(o.status).toBe(WorkOrderStatus.RUNNING);
      expect(o.claim?.nodeId).toBe("host-1");
      expect(o.claim?.fencingToken).toBe(1n);
      expect(o.claim?.leaseExpiresAt).toBeDefined();
    }
    // The rest (fewer than max), then none.
    const rest = (await orders.claimWorkOrders({ nodeId: "host-1" })).workOrders;
    expect(rest.map((o) => o.id)).toEqual([ids[1], ids[0]]);
    expect((await orders.claimWorkOrders({ nodeId: "host-1" })).workOrders).toEqual([]);
  });

  it("of a batch claim and single claims racing for 5 orders, each order goes to exactly one", async () => {
    const { tc, token } = await setup();
    const ids = new Set<string>();
    for (let p = 1; p <= 5; p++) ids.add(await queue(tc, "host-1", p));
    // Each call on its own client (its own HTTP/2 connection), as separate workers would.
    const [batch, ...singles] = await Promise.all([
      tc.client(WorkOrderService, { token }).claimWorkOrders({ nodeId: "host-1", max: 3 }),
      ...Array.from({ length: 4 }, () => tc.client(NodeService, { token }).claimNextWorkOrder({ nodeId: "host-1" })),
    ]);
    const got = [
      ...(batch as { workOrders: { id: string }[] }).workOrders.map((o) => o.id),
      ...singles.flatMap((s) => ("workOrder" in s && s.workOrder ? [s.workOrder.id] : [])),
    ];
    // Seven claims' worth of room for five orders: every order claimed, none twice.
    expect(got).toHaveLength(5);
    expect(new Set(got)).toEqual(ids);
    for (const id of got) {
      const o = (await tc.client(WorkOrderService, { admin: true }).getWorkOrder({ id })).workOrder!;
      expect(o.status).toBe(WorkOrderStatus.RUNNING);
      expect(o.attempts).toHaveLength(1);
    }
  });

  it("answers each result on its own: accepted, duplicate, a token not held, an unknown order", async () => {
    const { tc, token } = await setup();
    const a = await queue(tc, "host-1", 2);
    const b = await queue(tc, "host-1", 1);
    const orders = tc.client(WorkOrderService, { token });
    expect((await orders.claimWorkOrders({ nodeId: "host-1", max: 2 })).workOrders.map((o) => o.id)).toEqual([a, b]);
    // What the single call answers for b under a token the node does not hold (nothing changes).
    const single = await rpcError(orders.reportWorkOrderResult({ id: b, result: OK, fencingToken: 2n }));
    expect(single.code).toBe("WORK_ORDER_NOT_CLAIMABLE");

    const res = await orders.reportWorkOrderResults({
      items: [
        { workOrderId: a, result: OK, fencingToken: 1n },
        { workOrderId: a, result: OK, fencingToken: 1n },
        { workOrderId: b, result: OK, fencingToken: 2n },
        { workOrderId: "wo-nope", result: OK, fencingToken: 1n },
      ],
    });
    // Each item as the test reads it: which order, its status if accepted, duplicate, error code.
    const seen = res.items.map((i) => [i.workOrderId, i.workOrder?.status, i.duplicate, i.error?.code]);
    expect(seen).toEqual([
      [a, WorkOrderStatus.SUCCESS, false, undefined],
      [a, WorkOrderStatus.SUCCESS, true, undefined],
      [b, undefined, false, single.code],
      ["wo-nope", undefined, false, "RESOURCE_NOT_FOUND"],
    ]);
    expect(res.items[2]?.error?.message).toBe(single.message);

    // a ended once; b is still running under its claim and its holder can finish it.
    const events = (await tc.client(EventService, { admin: true }).listEvents({ workOrderId: a })).events.map((e) => e.type);
    expect(events.filter((t) => t === "work_order_succeeded")).toHaveLength(1);
    const admin = tc.client(WorkOrderService, { admin: true });
    expect((await admin.getWorkOrder({ id: a })).workOrder?.attempts).toHaveLength(1);
    expect((await admin.getWorkOrder({ id: b })).workOrder?.status).toBe(WorkOrderStatus.RUNNING);
    const late = await orders.reportWorkOrderResults({ items: [{ workOrderId: b, result: OK, fencingToken: 1n }] });
    expect(late.items[0]?.workOrder?.status).toBe(WorkOrderStatus.SUCCESS);
  });

  it("refuses more than 100 items, or a max out of range, as INVALID_REQUEST and changes nothing", async () => {
    const { tc, token } = await setup();
    const id = await queue(tc, "host-1");
    const orders = tc.client(WorkOrderService, { token });
    expect((await rpcError(orders.claimWorkOrders({ nodeId: "host-1", max: 101 }))).code).toBe("INVALID_REQUEST");
    expect((await rpcError(orders.claimWorkOrders({ nodeId: "host-1", max: -1 }))).code).toBe("INVALID_REQUEST");
    expect((await tc.client(WorkOrderService, { admin: true }).getWorkOrder({ id })).workOrder?.status).toBe(WorkOrderStatus.PENDING);
    const claimed = (await orders.claimWorkOrders({ nodeId: "host-1", max: 1 })).workOrders[0]!;
    const items = Array.from({ length: 101 }, () => ({ workOrderId: claimed.id, result: OK, fencingToken: 1n }));
    expect((await rpcError(orders.reportWorkOrderResults({ items }))).code).toBe("INVALID_REQUEST");
    expect((await tc.client(WorkOrderService, { admin: true }).getWorkOrder({ id })).workOrder?.status).toBe(WorkOrderStatus.RUNNING);
  });

  it("refuses a node claiming from another node's queue", async () => {
    const { tc } = await setup();
    const other = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "host-2" })).token;
    const id = await queue(tc, "host-1");
    const e = await rpcError(tc.client(WorkOrderService, { token: other }).claimWorkOrders({ nodeId: "host-1" }));
    expect(e.code).toBe("FORBIDDEN");
    expect((await tc.client(WorkOrderService, { admin: true }).getWorkOrder({ id })).workOrder?.status).toBe(WorkOrderStatus.PENDING);
  });

  it("are REST routes derived from the contract", async () => {
    const { tc, token } = await setup();
    const id = await queue(tc, "host-1");
    const ctl = { url: tc.url, ca: tc.ca! } as Parameters<typeof rawRequest>[0];
    const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
    const claim = await rawRequest(ctl, "POST", "/v1/nodes/host-1/work-orders/claim", headers, JSON.stringify({ max: 5 }));
    expect(claim.status).toBe(200);
    const claimed = JSON.parse(claim.body) as { data: { work_orders: { id: string; claim: { fencing_token: string } }[] }; error: unknown };
    expect(claimed.error).toBeNull();
    expect(claimed.data.work_orders.map((o) => o.id)).toEqual([id]);
    const body = {
      items: [
        { work_order_id: id, fencing_token: claimed.data.work_orders[0]?.claim.fencing_token, result: OK },
        { work_order_id: "wo-nope", fencing_token: "1", result: OK },
      ],
    };
    const res = await rawRequest(ctl, "POST", "/v1/work-orders/results", headers, JSON.stringify(body));
    expect(res.status).toBe(200);
    const answer = JSON.parse(res.body) as { data: { items: { work_order?: { status: string }; error?: { code: string } }[] } };
    expect(answer.data.items[0]?.work_order?.status).toBe("WORK_ORDER_STATUS_SUCCESS");
    expect(answer.data.items[0]?.error).toBeUndefined();
    expect(answer.data.items[1]?.error?.code).toBe("RESOURCE_NOT_FOUND");
  });
});
