// Reports of observed state (nodes/state-reports.ts), through NodeService.ReportResourceState over
// the in-memory transport: a node reports on itself and on what its own work order touched (the
// order's tenant, deployment and services), nothing else; one bad report refuses the whole batch;
// the tenant's per-node target records are the controller's and survive any report.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { create, toJson, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { v4 as uuidv4 } from "uuid";
import { NodeService, type ResourceStateReportSchema } from "../../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import {
  NodeLiveness,
  ResourceSchema,
  TargetStatusSchema,
  type NodeStatus,
  type Resource,
  type TenantStatus,
} from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { startInMemory, type InMemoryController } from "../../test/helpers/in-memory-controller.js";
import { rpcError } from "../../test/helpers/errors.js";
import { waitFor } from "../../test/helpers/processes.js";

type Reports = MessageInitShape<typeof ResourceStateReportSchema>[];

let c: InMemoryController;
let n1 = "";
let n2 = "";
/** The deploy order the reconciler issued to n1 for tenant shop (service web). */
let order: WorkOrder;

const report = (token: string, nodeId: string, workOrderId: string, reports: Reports) =>
  c.asNode(NodeService, token).reportResourceState({ nodeId, workOrderId, reports });
const tenantReport = (id: string, resultCode = "APPLY_OK") => ({
  resourceType: "tenant",
  id,
  currentState: { kind: { case: "tenant" as const, value: { nodeId: "n1", resultCode } } },
});
const serviceReport = (id: string) => ({
  resourceType: "service",
  id,
  currentState: { kind: { case: "service" as const, value: { nodeId: "n1", state: "running" } } },
});
const nodeReport = (id: string) => ({
  resourceType: "node",
  id,
  currentState: { kind: { case: "node" as const, value: { agentVersion: "reported" } } },
});
const deploymentReport = (id: string) => ({
  resourceType: "deployment",
  id,
  currentState: { kind: { case: "deployment" as const, value: {} } },
});
const versionOf = async (type: "tenant" | "service" | "node" | "deployment", id: string) =>
  (await c.ctl.store.getResource(type, id))?.metadata?.resourceVersion;
const reported = async () => (await c.events()).filter((e) => e.type === "resource_state_reported");

function resource(id: string, kind: "tenant" | "service", value: Record<string, unknown>): Resource {
  return create(ResourceSchema, { id, resourceType: kind, desiredState: { kind: { case: kind, value } } as never });
}

beforeEach(async () => {
  c = await startInMemory();
  n1 = (await c.admin(NodeService).registerNode({ nodeId: "n1" })).token;
  n2 = (await c.admin(NodeService).registerNode({ nodeId: "n2" })).token;
  const rs = c.admin(ResourceService);
  await rs.createResource({ resourceType: "tenant", resource: resource("shop", "tenant", { deploymentPolicy: { targetNodeId: "n1" } }) });
  await rs.createResource({ resourceType: "service", resource: resource("web", "service", { tenantId: "shop", image: "busybox:stable" }) });
  await rs.createResource({ resourceType: "tenant", resource: resource("blog", "tenant", {}) });
  await rs.createResource({
    resourceType: "service",
    resource: resource("other", "service", { tenantId: "blog", image: "busybox:stable" }),
  });
  order = await waitFor(
    "the deploy order for n1",
    async () => (await c.ctl.store.listWorkOrders({ nodeId: "n1" })).items.find((o) => o.desiredState?.serviceIds.includes("web")),
    10_000,
    10,
  );
  // Nothing wakes the reconciler after this: the tenant's records stay as the pass wrote them.
  await c.ctl.reconciler.idle();
});
afterEach(async () => {
  await c.close();
});

describe("what a node may report", () => {
  it("a node reports on itself and on the tenant, deployment and services its own order touched", async () => {
    const deploymentId = order.desiredState!.deploymentId;
    const res = await report(n1, "n1", order.id, [
      nodeReport("n1"),
      tenantReport("shop"),
      deploymentReport(deploymentId),
      serviceReport("web"),
    ]);
    expect(res.resources.map((r) => `${r.resourceType}/${r.id}`)).toEqual([
      "node/n1",
      "tenant/shop",
      `deployment/${deploymentId}`,
      "service/web",
    ]);
    const web = (await c.ctl.store.getResource("service", "web"))!;
    expect(web.currentState?.kind.case === "service" && web.currentState.kind.value.state).toBe("running");
    const events = await reported();
    expect(events.map((e) => e.resourceId)).toEqual(["n1", "shop", deploymentId, "web"]);
    expect(events.every((e) => e.workOrderId === order.id && e.nodeId === "n1" && e.correlationId === order.correlationId)).toBe(true);
  });

  it.each([
    ["another node", () => [nodeReport("n2")], true],
    ["a service of another tenant", () => [serviceReport("other")], true],
    ["a tenant its order did not touch", () => [tenantReport("blog")], true],
    ["a tenant, with no work order named", () => [tenantReport("shop")], false],
    [
      "its order's tenant as run by another node",
      () => [{ ...tenantReport("shop"), currentState: { kind: { case: "tenant" as const, value: { nodeId: "n2" } } } }],
      true,
    ],
    [
      "its order's deployment as applied for another tenant",
      () => [
        {
          resourceType: "deployment",
          id: order.desiredState!.deploymentId,
          lastAppliedState: { kind: { case: "deployment" as const, value: { tenantId: "blog", nodeId: "n1" } } },
        },
      ],
      true,
    ],
  ])("reporting on %s is FORBIDDEN", async (_what, reports, withOrder) => {
    const before = await c.events();
    const e = await rpcError(report(n1, "n1", withOrder ? order.id : "", reports()));
    expect(e.code).toBe("FORBIDDEN");
    expect(await c.events()).toEqual(before);
  });

  it("a node may not report under another node's order, nor for another node", async () => {
    expect((await rpcError(report(n2, "n2", order.id, [tenantReport("shop")]))).code).toBe("FORBIDDEN");
    expect((await rpcError(report(n2, "n1", order.id, [tenantReport("shop")]))).code).toBe("FORBIDDEN");
    expect(await reported()).toEqual([]);
  });
});

describe("a batch of reports", () => {
  it("a forbidden report in a batch writes none of them", async () => {
    const before = { node: await versionOf("node", "n1"), web: await versionOf("service", "web") };
    const e = await rpcError(report(n1, "n1", order.id, [nodeReport("n1"), serviceReport("web"), serviceReport("other")]));
    expect(e.code).toBe("FORBIDDEN");
    expect(e.details.field).toBe("reports[2]");
    expect({ node: await versionOf("node", "n1"), web: await versionOf("service", "web") }).toEqual(before);
    expect(await reported()).toEqual([]);
  });

  it("an invalid report in a batch (no state at all, a status of the wrong kind, one out of bounds) writes none of them", async () => {
    const before = await versionOf("service", "web");
    const empty = await rpcError(report(n1, "n1", order.id, [serviceReport("web"), { resourceType: "tenant", id: "shop" }]));
    expect(empty.code).toBe("INVALID_REQUEST");
    const wrongKind = await rpcError(
      report(n1, "n1", order.id, [
        serviceReport("web"),
        { resourceType: "tenant", id: "shop", currentState: { kind: { case: "service", value: {} } } },
      ]),
    );
    expect(wrongKind.code).toBe("INVALID_REQUEST");
    const tooLong = await rpcError(
      report(n1, "n1", order.id, [
        serviceReport("web"),
        { resourceType: "node", id: "n1", currentState: { kind: { case: "node", value: { agentVersion: "x".repeat(5000) } } } },
      ]),
    );
    expect(tooLong.code).toBe("INVALID_REQUEST");
    expect(await versionOf("service", "web")).toBe(before);
    expect(await reported()).toEqual([]);
  });

  it("a report on a deleted (tombstoned) tenant is written, as a removal's report is", async () => {
    await c.admin(ResourceService).deleteResource({ resourceType: "tenant", id: "shop", cascade: true });
    const before = await c.ctl.store.getResource("tenant", "shop", { includeDeleted: true });
    await report(n1, "n1", order.id, [tenantReport("shop", "REMOVE_OK")]);
    const after = (await c.ctl.store.getResource("tenant", "shop", { includeDeleted: true }))!;
    expect(after.deletion).toBeDefined();
    expect(after.metadata?.resourceVersion).not.toBe(before?.metadata?.resourceVersion);
    expect(after.currentState?.kind.case === "tenant" && after.currentState.kind.value.resultCode).toBe("REMOVE_OK");
  });

  // A resource can be gone though its order still names it (a deployment retired by retention):
  // the batch is refused before any report is written, not half-written.
  it("a report on a resource that no longer exists writes none of the batch", async () => {
    // An order still naming a deployment that is gone (as after retention pruned it).
    const stray = await c.ctl.store.createWorkOrder(
      create(WorkOrderSchema, {
        id: uuidv4(),
        resourceType: "work_order",
        type: WorkOrderType.DEPLOY_SERVICE,
        status: WorkOrderStatus.PENDING,
        target: { tenantId: "shop", nodeId: "n1" },
        requestId: "req-stray",
        correlationId: "req-stray",
        createdAt: timestampNow(),
        desiredState: { deploymentId: "deploy-pruned", tenantId: "shop", serviceIds: ["web"] },
      }),
    );
    const before = await versionOf("service", "web");
    const e = await rpcError(report(n1, "n1", stray.id, [serviceReport("web"), deploymentReport("deploy-pruned")]));
    expect(e.code).toBe("RESOURCE_NOT_FOUND");
    expect(await versionOf("service", "web")).toBe(before);
  });
});

describe("what the controller derives", () => {
  it("survive a tenant state report, whatever targets it carries", async () => {
    const tenantBefore = (await c.ctl.store.getResource("tenant", "shop"))!;
    const targets = tenantBefore.currentState?.kind.case === "tenant" ? tenantBefore.currentState.kind.value.targets : [];
    expect(targets.map((t) => t.nodeId)).toEqual(["n1"]);
    const forged = {
      resourceType: "tenant",
      id: "shop",
      currentState: {
        kind: { case: "tenant" as const, value: { resultCode: "APPLY_OK", targets: [{ nodeId: "forged", appliedHash: "x" }] } },
      },
    };
    await report(n1, "n1", order.id, [forged]);
    const after = (await c.ctl.store.getResource("tenant", "shop"))!;
    const status = after.currentState?.kind.value as TenantStatus;
    expect(after.currentState?.kind.case).toBe("tenant");
    expect(status.resultCode).toBe("APPLY_OK");
    const json = (ts: typeof targets) => ts.map((t) => toJson(TargetStatusSchema, t));
    expect(json(status.targets)).toEqual(json(targets));
  });

  // A node's liveness and last heartbeat come from its heartbeats: a report that replaced them
  // made the next beat record a second node_online and wake a sweep of every tenant.
  it("a node's report on itself keeps the liveness and last heartbeat the controller derived", async () => {
    await c.asNode(NodeService, n1).heartbeat({ nodeId: "n1", agentVersion: "1.0" });
    const before = (await c.ctl.store.getResource("node", "n1"))!.currentState?.kind.value as NodeStatus;
    await report(n1, "n1", "", [nodeReport("n1")]);
    const after = (await c.ctl.store.getResource("node", "n1"))!.currentState?.kind.value as NodeStatus;
    expect(after.liveness).toBe(NodeLiveness.ONLINE);
    expect(after.lastHeartbeatAt).toEqual(before.lastHeartbeatAt);
  });
});
