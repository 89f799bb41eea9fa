// A node's failed result as the controller keeps it: an agent older than result.cause reports a
// held port the old way (COMPOSE_FAILED, retriable, the cause only in the command's stderr); the
// controller reads the cause itself, does not retry it, and puts it in the order, its events and
// the tenant's verdict, first.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { FailureReason } from "../gen/skipper/v1/failure_cause_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { waitFor } from "./helpers/processes.js";
import { res } from "./helpers/resources.js";

const STDERR = `Creating shop_web_1 ... error

ERROR: for web  Cannot start service web: driver failed programming external connectivity on endpoint shop_web_1 (ab12): Error starting userland proxy: listen tcp4 127.0.0.1:28932: bind: address already in use
ERROR: Encountered errors while bringing up the project.`;

let tc: TestController;
let nodeToken = "";

beforeAll(async () => {
  tc = await startController({ tls: true, reconcileIntervalMs: 200 });
  nodeToken = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "cause-node" })).token;
});
afterAll(async () => {
  await tc?.stop();
});

describe("a failure reported without its cause", () => {
  it("is given one by the controller, is not retried, and its cause leads the order, events and verdict", async () => {
    const rs = tc.client(ResourceService, { admin: true });
    await rs.createResource({
      resourceType: "tenant",
      resource: res("tenant", "cause-shop", { case: "tenant", value: { deploymentPolicy: { targetNodeId: "cause-node" } } }),
    });
    await rs.createResource({
      resourceType: "service",
      resource: res("service", "cause-web", { case: "service", value: { tenantId: "cause-shop", image: "busybox:stable" } }),
    });
    const admin = tc.client(WorkOrderService, { admin: true });
    const order = await waitFor("the deploy order", async () =>
      (await admin.listWorkOrders({ tenantId: "cause-shop" })).workOrders.find((o) => o.type === WorkOrderType.DEPLOY_SERVICE),
    );
    expect(order.maxAttempts).toBeGreaterThan(1);
    const wo = tc.client(WorkOrderService, { token: nodeToken });
    const claimed = (await wo.claimWorkOrder({ id: order.id })).workOrder!;
    const done = await wo.reportWorkOrderResult({
      id: order.id,
      fencingToken: claimed.claim?.fencingToken ?? 0n,
      result: {
        success: false,
        retriable: true,
        code: "COMPOSE_FAILED",
        message: "compose up failed (exit 1): Encountered errors while bringing up the project.",
        details: { command: { program: "docker-compose", exitCode: 1, stderr: STDERR } },
      },
    });
    const headline = "port 127.0.0.1:28932 is already in use";
    expect(done.workOrder?.status).toBe(WorkOrderStatus.FAILED);
    expect(done.workOrder?.result?.retriable).toBe(false);
    expect(done.workOrder?.result?.cause).toMatchObject({ reason: FailureReason.PORT_IN_USE, summary: headline });

    const events = (await tc.client(EventService, { admin: true }).listEvents({ workOrderId: order.id })).events;
    expect(events.find((e) => e.type === "work_order_failed")?.data).toMatchObject({ reason: "port_in_use", cause: headline });
    const tenant = await waitFor("the tenant's verdict", async () => {
      const t = (await rs.getResource({ resourceType: "tenant", id: "cause-shop" })).resource!;
      return t.convergence?.status === ConvergenceStatus.ORDER_FAILED ? t : undefined;
    });
    expect(tenant.convergence?.message).toMatch(/^port 127\.0\.0\.1:28932 is already in use \(COMPOSE_FAILED\)/);
    const st = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value : undefined;
    expect(st?.targets[0]?.lastFailureCause?.reason).toBe(FailureReason.PORT_IN_USE);
    expect((await admin.listWorkOrders({ tenantId: "cause-shop" })).workOrders).toHaveLength(1);
  });
});
