// Where a service's secret ends up after a few applies (issue 17): only in the resource that holds
// it and in the orders still to run, never in deployments, finished orders, idempotency records,
// events or snapshots; the views (explain, snapshots, events) and a node's result message show it
// redacted; and a rollback to an earlier deployment still runs with the real value.
import { filesHolding } from "./helpers/files.js";
import { randomUUID } from "node:crypto";
import { relative } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { SnapshotService } from "../gen/skipper/v1/snapshot_service_pb.js";
import { WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { startInMemory, type InMemoryController } from "./helpers/in-memory-controller.js";
import { waitFor } from "./helpers/processes.js";
import { createClient } from "@connectrpc/connect";

const NODE = "n-secrets";
const TENANT = "shop-secrets";
const PASSWORD = `pw-${randomUUID()}`;
const URL_PASSWORD = `up-${randomUUID()}`;
const APPLIES = 3;

let c: InMemoryController;
let token: string;
const deployments: string[] = [];

const service = (mode: string) =>
  create(ResourceSchema, {
    id: "api",
    resourceType: "service",
    desiredState: {
      kind: {
        case: "service",
        value: {
          tenantId: TENANT,
          image: "nginx:1.27",
          env: { DB_PASSWORD: PASSWORD, DATABASE_URL: `postgres://app:${URL_PASSWORD}@db:5432/app`, MODE: mode },
        },
      },
    },
  });

/** Every file under `dir` that contains `needle`, relative to `dir`, sorted. */
async function filesWith(dir: string, needle: string): Promise<string[]> {
  return (await filesHolding(dir, [needle])).map((h) => relative(dir, h.path)).sort();
}

/** Claims and finishes `order` as its node would, reporting the deployment it applied and a chatty message. */
async function runAsNode(order: WorkOrder): Promise<void> {
  const orders = c.asNode(WorkOrderService, token);
  const claimed = (await orders.claimWorkOrder({ id: order.id })).workOrder!;
  // The claimed order carries what the node needs to run it: the real values.
  expect(JSON.stringify(claimed.desiredState?.composeProject)).toContain(PASSWORD);
  const ds = claimed.desiredState!;
  if (ds.deploymentId !== "") {
    await c.asNode(NodeService, token).reportResourceState({
      nodeId: NODE,
      workOrderId: order.id,
      reports: [
        {
          resourceType: "deployment",
          id: ds.deploymentId,
          lastAppliedState: { kind: { case: "deployment", value: { tenantId: TENANT, nodeId: NODE, composeProject: ds.composeProject } } },
        },
      ],
    });
  }
  await orders.reportWorkOrderResult({
    id: order.id,
    fencingToken: claimed.fencingToken,
    result: {
      success: true,
      code: "APPLY_OK",
      message: `connected to postgres://app:${URL_PASSWORD}@db:5432/app with DB_PASSWORD=${PASSWORD}`,
    },
  });
}

beforeAll(async () => {
  c = await startInMemory();
  token = (await c.admin(NodeService).registerNode({ nodeId: NODE })).token;
  await c.admin(ResourceService).createResource({
    resourceType: "tenant",
    resource: create(ResourceSchema, {
      id: TENANT,
      resourceType: "tenant",
      desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE } } } },
    }),
  });
  await c.admin(ResourceService).createResource({ resourceType: "service", resource: service("m0") });
  // A few applies, each of a changed service, with an idempotency key, run to success by the node.
  const apply = createClient(DeploymentService, c.ctl.transport);
  for (let i = 1; i <= APPLIES; i++) {
    if (i > 1)
      await c.admin(ResourceService).updateResource({ resourceType: "service", id: "api", desiredState: service(`m${i}`).desiredState });
    const res = await apply.apply(
      { tenantId: TENANT, nodeId: NODE },
      { headers: { "x-admin-token": "t-admin", "x-idempotency-key": `apply-${i}` } },
    );
    deployments.push(res.deployment!.id);
    await runAsNode(res.workOrder!);
    await c.ctl.reconciler.idle();
  }
  // One more change whose order no node has claimed yet.
  await c.admin(ResourceService).updateResource({ resourceType: "service", id: "api", desiredState: service("m-last").desiredState });
  await apply.apply({ tenantId: TENANT, nodeId: NODE }, { headers: { "x-admin-token": "t-admin" } });
  await c.ctl.reconciler.idle();
});
afterAll(async () => {
  await c?.close();
});

describe("a service's secret after a few applies", () => {
  it("is on disk only in the service resource and the order still to run", async () => {
    const pending = (await c.ctl.store.listWorkOrders({ tenantId: TENANT, pageSize: 100 })).items.filter((o) => o.finishedAt === undefined);
    expect(pending).toHaveLength(1);
    const expected = ["resources/services/api.json", `work-orders/${pending[0]!.id}.json`].sort();
    // The write-ahead log holds a write's text until its segment is checkpointed, seconds later
    // (write-ahead-log.ts MAX_AGE_MS): wait for that, then nothing but the two records may hold it.
    await waitFor("the log to let go of older writes", async () =>
      (await filesWith(c.dataDir, PASSWORD)).some((p) => p.startsWith("wal/")) ? undefined : true,
    );
    const [holding, holdingUrl] = [await filesWith(c.dataDir, PASSWORD), await filesWith(c.dataDir, URL_PASSWORD)];
    expect(holding.map((p) => p.replace(/^work-orders\/.*\//, "work-orders/"))).toEqual(expected);
    expect(holdingUrl).toEqual(holding);
    // What did not hold it: APPLIES deployments, their finished orders, idempotency records, events, snapshots.
    expect(await filesWith(c.dataDir, "[REDACTED]")).not.toHaveLength(0);
  });

  it("is redacted in explain, the snapshot and the result message", async () => {
    const why = await c.admin(ResourceService).explainResource({ resourceType: "service", id: "api" });
    const snapshot = await c.admin(SnapshotService).getTenantSnapshot({ tenantId: TENANT });
    const first = (await c.ctl.store.getResource("deployment", deployments[0]!))!.desiredState?.kind;
    const order = await c.admin(WorkOrderService).getWorkOrder({ id: first?.case === "deployment" ? first.value.workOrderId : "" });
    for (const shown of [why, snapshot, order]) {
      const text = JSON.stringify(shown, (_k, v) => (typeof v === "bigint" ? v.toString() : v));
      expect(text).not.toContain(PASSWORD);
      expect(text).not.toContain(URL_PASSWORD);
    }
    expect(order.workOrder?.result?.message).toBe("connected to postgres://app:[REDACTED]@db:5432/app with DB_PASSWORD=[REDACTED]");
  });

  it("comes back in a rollback to the first deployment, whose spec hash is the one deployed", async () => {
    const first = (await c.ctl.store.getResource("deployment", deployments[0]!))!;
    const spec = first.desiredState?.kind.case === "deployment" ? first.desiredState.kind.value : undefined;
    const { workOrder } = await c.admin(WorkOrderService).createWorkOrder({
      type: WorkOrderType.ROLLBACK,
      target: { nodeId: NODE, tenantId: TENANT },
      action: { kind: { case: "rollback", value: { deploymentId: first.id } } },
    });
    const queued = (await c.ctl.store.getWorkOrder(workOrder!.id))!;
    expect(queued.desiredState?.composeProject?.composeFile).toContain(PASSWORD);
    expect(queued.desiredState?.composeProject?.composeFile).toContain("MODE: m0");
    expect(queued.desiredState?.specHash).toBe(spec?.specHash);
  });
});
