// ExplainResource's causal chain shows a node's newest orders for the tenant that change
// something: not the first page of a long history, and not the read-only orders (read_logs,
// inspect, read_sticker) that a dashboard following logs queues every few seconds; and the
// resource's newest events, however many older ones there are.
import { afterEach, describe, expect, it } from "vitest";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { EventSchema } from "../gen/skipper/v1/event_pb.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { startController, type TestController } from "./helpers/controller.js";
import { res } from "./helpers/resources.js";
import { waitFor } from "./helpers/processes.js";

let tc: TestController | undefined;
afterEach(async () => {
  await tc?.stop();
  tc = undefined;
});

const NODE = "host-1";
const TENANT = "shop";

/** A finished deploy order of the tenant on NODE, created `minutesAgo` minutes ago. */
function oldDeploy(n: number, minutesAgo: number) {
  const at = timestampFromDate(new Date(Date.now() - minutesAgo * 60_000));
  return create(WorkOrderSchema, {
    id: `old-deploy-${String(n).padStart(5, "0")}`,
    resourceType: "work_order",
    schemaVersion: "v1",
    type: WorkOrderType.DEPLOY_SERVICE,
    status: WorkOrderStatus.PENDING,
    target: { nodeId: NODE, tenantId: TENANT },
    requestId: `req-${n}`,
    correlationId: `corr-${n}`,
    createdAt: at,
  });
}

describe("ExplainResource's work orders", () => {
  it("are the newest ones that change something, past a history longer than one page and a stream of log reads", async () => {
    // 1,100 older orders of the tenant on its node, written to the data directory first.
    const dataDir = await mkdtemp(join(tmpdir(), "skipper-explain-"));
    const seed = new FileStore(dataDir);
    await seed.open();
    for (let n = 0; n < 1100; n++) await seed.createWorkOrder(oldDeploy(n, 2000 - n));
    await seed.close();

    tc = await startController({ tls: true, dataDir });
    await tc.client(NodeService, { admin: true }).registerNode({ nodeId: NODE });
    const resources = tc.client(ResourceService, { admin: true });
    await resources.createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, {
        case: "tenant",
        value: {
          displayName: "Shop",
          deploymentPolicy: { targetNodeId: NODE },
          compose: { projectName: TENANT, composeFile: "services:\n  web:\n    image: busybox:stable\n" },
        },
      }),
    });
    // The reconciler's deploy order for the new tenant (the newest deploy of all).
    const orders = tc.client(WorkOrderService, { admin: true });
    const deployId = await waitFor("the tenant's deploy order", async () => {
      const t = (await resources.getResource({ resourceType: "tenant", id: TENANT })).resource;
      const st = t?.currentState?.kind.case === "tenant" ? t.currentState.kind.value : undefined;
      return st?.targets.find((x) => x.nodeId === NODE)?.lastWorkOrderId || undefined;
    });
    // A dashboard following logs: read-only orders after it.
    for (let i = 0; i < 5; i++)
      await orders.createWorkOrder({
        type: WorkOrderType.READ_LOGS,
        target: { nodeId: NODE, tenantId: TENANT },
        action: { kind: { case: "readLogs", value: { tailLines: 10 } } },
      });

    const why = await resources.explainResource({ resourceType: "tenant", id: TENANT });
    const ids = why.workOrders.map((o) => o.id);
    // Newest first: the tenant's own deploy, then the two newest of the old history.
    expect(ids).toEqual([deployId, "old-deploy-01099", "old-deploy-01098"]);
    expect(why.workOrders.every((o) => o.type !== WorkOrderType.READ_LOGS)).toBe(true);
  });

  it("lists the resource's newest events, not the oldest page of a history longer than one page", async () => {
    // 1,200 events of an earlier tenant of the same id, days ago.
    const dataDir = await mkdtemp(join(tmpdir(), "skipper-explain-"));
    const seed = new FileStore(dataDir);
    await seed.open();
    for (let n = 0; n < 1200; n++)
      await seed.appendEvent(
        create(EventSchema, {
          id: `old-event-${String(n).padStart(5, "0")}`,
          type: "resource_updated",
          schemaVersion: "v1",
          timestamp: timestampFromDate(new Date(Date.now() - 3 * 86_400_000 + n * 1000)),
          tenantId: TENANT,
          resourceType: "tenant",
          resourceId: TENANT,
        }),
      );
    await seed.close();

    tc = await startController({ tls: true, dataDir });
    const resources = tc.client(ResourceService, { admin: true });
    await resources.createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, { case: "tenant", value: { displayName: "Shop" } }),
    });
    const why = await resources.explainResource({ resourceType: "tenant", id: TENANT });
    const types = why.events.map((e) => e.type);
    expect(types).toContain("resource_created");
    // Still at most the newest 100, the rest the newest of the old history.
    expect(why.events.length).toBeLessThanOrEqual(100);
    expect(why.events.some((e) => e.id === "old-event-01199")).toBe(true);
    expect(why.events.some((e) => e.id === "old-event-00999")).toBe(false);
  });
});
