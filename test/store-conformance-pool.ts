// The part of the store conformance suite about pool orders (WorkOrderTarget.pool): listed while
// they wait for a node, claimed by exactly one of concurrent claimers, the claimer recorded in
// target.node_id, and back to the pool (node_id empty) when a claim lapses or is released.
// store-conformance.ts calls it for every backend.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  WorkOrderResultSchema,
  WorkOrderSchema,
  WorkOrderStatus,
  WorkOrderTargetSchema,
  type WorkOrder,
} from "../gen/skipper/v1/work_order_pb.js";
import type { Store } from "../controller/store/store.js";
import { isSkipperError } from "../controller/base/errors.js";

const T0 = Date.parse("2026-11-22T10:00:00.000Z");
const at = (offsetMs: number) => new Date(T0 + offsetMs);

function poolOrder(id: string, offsetMs = 0, priority = 0): WorkOrder {
  return create(WorkOrderSchema, {
    id,
    resourceType: "work_order",
    schemaVersion: "v1",
    status: WorkOrderStatus.PENDING,
    target: { nodeId: "", pool: { nodeSelector: { role: "web" } }, requiredCapabilities: ["compose.deploy"] },
    priority,
    requestId: `req-${id}`,
    correlationId: `corr-${id}`,
    createdAt: timestampFromDate(at(offsetMs)),
  });
}

const ids = (orders: WorkOrder[]) => orders.map((o) => o.id);

/** Defines the pool-order cases over the suite's current store. */
export function describePoolConformance(current: () => Store, reopen: () => Promise<boolean>): void {
  describe("pool orders", () => {
    it("pending pool orders are listed highest priority then oldest, and only while no node holds them", async () => {
      const store = current();
      await store.createWorkOrder(poolOrder("pool-b", 2));
      await store.createWorkOrder(poolOrder("pool-a", 1));
      await store.createWorkOrder(poolOrder("pool-hi", 3, 5));
      const own = poolOrder("own-1");
      own.target = create(WorkOrderTargetSchema, { nodeId: "node-1" });
      await store.createWorkOrder(own);
      expect(ids(await store.pendingPoolOrders(10))).toEqual(["pool-hi", "pool-a", "pool-b"]);
      expect(ids(await store.pendingPoolOrders(2))).toEqual(["pool-hi", "pool-a"]);
      // Nor is a pool order any node's own pending order.
      expect((await store.nextPendingWorkOrder("node-1"))?.id).toBe("own-1");
      expect(await store.countPendingWorkOrders("node-2")).toBe(0);
      await store.claimWorkOrder("pool-hi", "node-2", at(10));
      expect(ids(await store.pendingPoolOrders(10))).toEqual(["pool-a", "pool-b"]);
      if (!(await reopen())) return;
      expect(ids(await current().pendingPoolOrders(10))).toEqual(["pool-a", "pool-b"]);
    });

    it("a page of pending pool orders resumes after a given order, even one claimed since", async () => {
      const store = current();
      // Two priorities, equal creation times broken by id: the order is (priority desc, created_at, id).
      for (const [id, offset, priority] of [
        ["pg-a", 1, 0],
        ["pg-b", 1, 0],
        ["pg-c", 2, 0],
        ["pg-h1", 5, 3],
        ["pg-h2", 6, 3],
      ] as const) {
        await store.createWorkOrder(poolOrder(id, offset, priority));
      }
      const first = await store.pendingPoolOrders(2);
      expect(ids(first)).toEqual(["pg-h1", "pg-h2"]);
      expect(ids(await store.pendingPoolOrders(2, first[1]))).toEqual(["pg-a", "pg-b"]);
      const a = (await store.getWorkOrder("pg-a"))!;
      await store.claimWorkOrder("pg-a", "node-1", at(10));
      // The cursor need not be pending still: only its priority, created_at and id count.
      expect(ids(await store.pendingPoolOrders(10, a))).toEqual(["pg-b", "pg-c"]);
      expect(ids(await store.pendingPoolOrders(10, (await store.getWorkOrder("pg-c"))!))).toEqual([]);
      // Paging the whole list one at a time meets each pending pool order once.
      const seen: string[] = [];
      for (let page = await store.pendingPoolOrders(1); page.length > 0; page = await store.pendingPoolOrders(1, page[0])) {
        seen.push(page[0]!.id);
      }
      expect(seen).toEqual(["pg-h1", "pg-h2", "pg-b", "pg-c"]);
    });

    it("a claim records the claiming node in target.node_id, keeps the pool, and its result ends it once", async () => {
      const store = current();
      await store.createWorkOrder(poolOrder("pool-c"));
      const claimed = await store.claimWorkOrder("pool-c", "node-7", at(10));
      expect(claimed.target?.nodeId).toBe("node-7");
      expect(claimed.target?.pool?.nodeSelector).toEqual({ role: "web" });
      expect(claimed.target?.requiredCapabilities).toEqual(["compose.deploy"]);
      expect(claimed.claim?.nodeId).toBe("node-7");
      const ok = create(WorkOrderResultSchema, { success: true, code: "INSPECT_OK" });
      const done = await store.finishWorkOrder("pool-c", "node-7", ok, at(20), claimed.fencingToken);
      expect(done.workOrder.status).toBe(WorkOrderStatus.SUCCESS);
      expect(done.workOrder.target?.nodeId).toBe("node-7");
      const again = await store.finishWorkOrder("pool-c", "node-7", ok, at(21), claimed.fencingToken);
      expect(again.duplicate).toBe(true);
      expect((await store.getWorkOrder("pool-c"))?.attempts).toHaveLength(1);
    });

    it("of 20 concurrent claims by different nodes exactly one wins, and the order names that node", async () => {
      const store = current();
      await store.createWorkOrder(poolOrder("pool-race"));
      const results = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) => store.claimWorkOrder("pool-race", `node-${i}`, at(10 + i))),
      );
      const won = results.filter((r): r is PromiseFulfilledResult<WorkOrder> => r.status === "fulfilled");
      const lost = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
      expect(won).toHaveLength(1);
      for (const r of lost) expect(isSkipperError(r.reason) && r.reason.code).toBe("WORK_ORDER_NOT_CLAIMABLE");
      const stored = await store.getWorkOrder("pool-race");
      expect(stored?.target?.nodeId).toBe(won[0]!.value.target?.nodeId);
      expect(stored?.attempts.map((a) => a.nodeId)).toEqual([won[0]!.value.claim?.nodeId]);
      expect(stored?.fencingToken).toBe(1n);
    });

    it("a lapsed or released claim puts the order back in its pool, for another node with the next token", async () => {
      const store = current();
      await store.createWorkOrder(poolOrder("pool-l"));
      await store.claimWorkOrder("pool-l", "node-1", at(0), 1000);
      const back = await store.expireWorkOrderLease("pool-l", at(1000));
      expect(back.status).toBe(WorkOrderStatus.PENDING);
      expect(back.target?.nodeId).toBe("");
      expect(ids(await store.pendingPoolOrders(10))).toContain("pool-l");
      const second = await store.claimWorkOrder("pool-l", "node-2", at(1001), 1000);
      expect(second.target?.nodeId).toBe("node-2");
      expect(second.claim?.fencingToken).toBe(2n);
      const released = await store.releaseWorkOrderClaim("pool-l", "node-2", 2n, at(1002));
      expect(released.target?.nodeId).toBe("");
      const third = await store.claimWorkOrder("pool-l", "node-3", at(1003));
      expect(third.attempts.map((a) => [a.nodeId, a.outcome])).toEqual([
        ["node-1", "lease_expired"],
        ["node-2", "released"],
        ["node-3", "running"],
      ]);
      // The first claimer's late result is refused: the order is another node's now.
      const late = store.finishWorkOrder(
        "pool-l",
        "node-1",
        create(WorkOrderResultSchema, { success: true, code: "INSPECT_OK" }),
        at(1004),
        1n,
      );
      await expect(late).rejects.toSatisfy((e: unknown) => isSkipperError(e) && e.code === "FORBIDDEN");
    });
  });
}
