// The reconciler inside a real controller (HTTP/2 + TLS, file store), with the test playing the
// node's agent over the API: liveness from heartbeat age, work that waits for an offline node,
// convergence statuses, and ExplainResource's chain.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { ResourceService, ExplainStepKind } from "../gen/skipper/v1/resource_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { SnapshotService } from "../gen/skipper/v1/snapshot_service_pb.js";
import { ConvergenceStatus, NodeLiveness, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus } from "../gen/skipper/v1/work_order_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { waitFor } from "./helpers/processes.js";

let tc: TestController;
let token = "";
const NODE = "lv-1";
const TENANT = "lv-t";
const api = () => tc.client(ResourceService, { admin: true });
const asNode = <S extends Parameters<TestController["client"]>[0]>(s: S) => tc.client(s, { token });
const beat = () => asNode(NodeService).heartbeat({ nodeId: NODE, agentVersion: "test", heartbeatIntervalMs: 100n });
const liveness = async () => {
  const n = (await api().getResource({ resourceType: "node", id: NODE })).resource!;
  return n.currentState?.kind.case === "node" ? n.currentState.kind.value.liveness : undefined;
};
const tenantStatus = async () => (await api().getResource({ resourceType: "tenant", id: TENANT })).resource!.convergence?.status;

/**
 * Beats every 50 ms (half the node's interval) until the returned stop is awaited: a live agent.
 * A single beat keeps the node online for only 300 ms (then degraded, offline after 600 ms), so
 * a test that needs it online while it waits for something keeps it beating.
 */
function keepBeating(): () => Promise<void> {
  let on = true;
  const loop = (async () => {
    while (on) {
      await beat();
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return async () => {
    on = false;
    await loop;
  };
}

beforeAll(async () => {
  tc = await startController({ tls: true, livenessCheckMs: 50 });
  token = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: NODE })).token;
  await beat();
});
afterAll(async () => {
  await tc?.stop();
});

describe("reconciler in the controller", () => {
  it("work for a node that goes offline waits, says NODE_OFFLINE, and goes out when it returns", async () => {
    const stopBeating = keepBeating();
    try {
      await api().createResource({
        resourceType: "tenant",
        resource: create(ResourceSchema, {
          id: TENANT,
          resourceType: "tenant",
          desiredState: {
            kind: {
              case: "tenant",
              value: { deploymentPolicy: { targetNodeId: NODE }, compose: { composeFile: "services:\n  app:\n    image: busybox\n" } },
            },
          },
        }),
      });
      await waitFor(
        "the order to be issued",
        async () => ((await tenantStatus()) === ConvergenceStatus.ORDER_IN_FLIGHT ? true : undefined),
        10_000,
        20,
      );
    } finally {
      await stopBeating();
    }
    // No heartbeats: degraded after 3 intervals (300 ms), offline after 6.
    await waitFor("the node to go offline", async () => ((await liveness()) === NodeLiveness.OFFLINE ? true : undefined), 10_000, 20);
    // The event follows the status write.
    const types = await waitFor(
      "the liveness events",
      async () => {
        const t = (await tc.client(EventService, { admin: true }).listEvents({ resourceId: NODE })).events.map((e) => e.type);
        return t.includes("node_offline") ? t : undefined;
      },
      5000,
      20,
    );
    expect(types).toContain("node_degraded");
    await waitFor(
      "the tenant to say NODE_OFFLINE",
      async () => ((await tenantStatus()) === ConvergenceStatus.NODE_OFFLINE ? true : undefined),
      10_000,
      20,
    );
    const pending = await tc
      .client(WorkOrderService, { admin: true })
      .listWorkOrders({ tenantId: TENANT, status: WorkOrderStatus.PENDING });
    expect(pending.workOrders).toHaveLength(1);
    await beat();
    const stopBeatingAgain = keepBeating();
    try {
      expect(await liveness()).toBe(NodeLiveness.ONLINE);
      await waitFor(
        "the tenant to wait on the order again",
        async () => ((await tenantStatus()) === ConvergenceStatus.ORDER_IN_FLIGHT ? true : undefined),
        10_000,
        20,
      );
    } finally {
      await stopBeatingAgain();
    }
    const next = await asNode(NodeService).getNextWorkOrder({ nodeId: NODE });
    expect(next.workOrder?.id).toBe(pending.workOrders[0]!.id);
  });

  it("a failed order backs off (RETRY_BACKOFF), a success converges, and Explain shows the chain", async () => {
    const orders = asNode(WorkOrderService);
    const first = (await asNode(NodeService).getNextWorkOrder({ nodeId: NODE })).workOrder!;
    await orders.claimWorkOrder({ id: first.id });
    await orders.reportWorkOrderResult({ id: first.id, result: { success: false, code: "COMPOSE_FAILED", message: "pull failed" } });
    await waitFor("RETRY_BACKOFF", async () => ((await tenantStatus()) === ConvergenceStatus.RETRY_BACKOFF ? true : undefined), 5000, 20);
    // The snapshot written for the failure shows desired against what runs.
    const failedSnap = (await tc.client(SnapshotService, { admin: true }).getTenantSnapshot({ tenantId: TENANT })).snapshot!;
    const tenantDiff = failedSnap.diffs.find((d) => d.resourceType === "tenant")!;
    expect(tenantDiff.currentChanges.map((c) => c.path)).toEqual([`targets.${NODE}.spec_hash`]);
    expect(failedSnap.resources.map((r) => `${r.resourceType}/${r.id}`)).toContain(`node/${NODE}`);
    const backoff = await api().explainResource({ resourceType: "tenant", id: TENANT });
    expect(backoff.convergence?.message).toContain("COMPOSE_FAILED");
    // The retry comes after the 2 s backoff, by itself.
    const retry = await waitFor(
      "the retry order",
      async () => {
        const o = (await asNode(NodeService).getNextWorkOrder({ nodeId: NODE })).workOrder;
        return o && o.id !== first.id ? o : undefined;
      },
      10_000,
      100,
    );
    expect(retry.metadata?.annotations.reason).toBe("retry");
    await orders.claimWorkOrder({ id: retry.id });
    await orders.reportWorkOrderResult({ id: retry.id, result: { success: true, code: "APPLY_OK", message: "ok" } });
    await waitFor("CONVERGED", async () => ((await tenantStatus()) === ConvergenceStatus.CONVERGED ? true : undefined), 5000, 20);

    const snap = (await tc.client(SnapshotService, { admin: true }).getTenantSnapshot({ tenantId: TENANT })).snapshot!;
    expect(snap.diffs.find((d) => d.resourceType === "tenant")!.currentChanges).toEqual([]);
    expect(new Set(snap.diffs.map((d) => d.resourceType))).toEqual(new Set(snap.resources.map((r) => r.resourceType)));
    const why = await api().explainResource({ resourceType: "tenant", id: TENANT });
    expect(why.convergence?.status).toBe(ConvergenceStatus.CONVERGED);
    const kinds = why.steps.map((s) => ExplainStepKind[s.kind]);
    expect(kinds[0]).toBe("DESIRED");
    expect(kinds.at(-1)).toBe("VERDICT");
    expect(why.steps.filter((s) => s.kind === ExplainStepKind.RESULT).map((s) => s.code)).toEqual(["COMPOSE_FAILED", "APPLY_OK"]);
    expect(why.steps.filter((s) => s.kind === ExplainStepKind.CLAIM).map((s) => s.workOrderId)).toEqual([first.id, retry.id]);
    expect(why.steps.some((s) => s.kind === ExplainStepKind.OBSERVED && s.nodeId === NODE)).toBe(true);
    expect(why.workOrders.map((o) => o.id)).toEqual([retry.id, first.id]);
    const events = why.events.map((e) => e.type);
    for (const t of ["resource_created", "work_order_created", "work_order_failed", "work_order_succeeded", "convergence_changed"])
      expect(events).toContain(t);
  });

  it("a retriable failure retries the same order (retry_pending, then pending again) and converges", async () => {
    await beat();
    const tenant = "lv-retry";
    await api().createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id: tenant,
        resourceType: "tenant",
        desiredState: {
          kind: {
            case: "tenant",
            value: { deploymentPolicy: { targetNodeId: NODE }, compose: { composeFile: "services:\n  b:\n    image: busybox\n" } },
          },
        },
      }),
    });
    const orders = asNode(WorkOrderService);
    const o = await waitFor(
      "the order",
      async () => (await tc.client(WorkOrderService, { admin: true }).listWorkOrders({ tenantId: tenant })).workOrders[0],
      5000,
      20,
    );
    const c1 = (await orders.claimWorkOrder({ id: o.id })).workOrder!;
    const r1 = await orders.reportWorkOrderResult({
      id: o.id,
      result: { success: false, retriable: true, code: "DOCKER_UNAVAILABLE", message: "engine down" },
      fencingToken: c1.claim!.fencingToken,
    });
    expect(r1.workOrder?.status).toBe(WorkOrderStatus.RETRY_PENDING);
    const again = await waitFor(
      "the retry to be pending",
      async () => {
        const w = (await tc.client(WorkOrderService, { admin: true }).getWorkOrder({ id: o.id })).workOrder!;
        return w.status === WorkOrderStatus.PENDING ? w : undefined;
      },
      10_000,
      50,
    );
    expect(again.attempts).toHaveLength(1);
    const c2 = (await orders.claimWorkOrder({ id: o.id })).workOrder!;
    expect(c2.claim?.fencingToken).toBe(2n);
    await orders.reportWorkOrderResult({ id: o.id, result: { success: true, code: "APPLY_OK" }, fencingToken: 2n });
    await waitFor(
      "CONVERGED",
      async () =>
        (await api().getResource({ resourceType: "tenant", id: tenant })).resource!.convergence?.status === ConvergenceStatus.CONVERGED
          ? true
          : undefined,
      5000,
      20,
    );
    expect((await tc.client(WorkOrderService, { admin: true }).listWorkOrders({ tenantId: tenant })).workOrders.map((w) => w.id)).toEqual([
      o.id,
    ]);
    const types = (await tc.client(EventService, { admin: true }).listEvents({ workOrderId: o.id })).events.map((e) => e.type);
    expect(types.filter((t) => t === "work_order_started")).toHaveLength(2);
    expect(types).toContain("work_order_retry_scheduled");
  });

  it("explains a resource nothing converges by itself through the services that use it", async () => {
    await api().createResource({
      resourceType: "resource_limits",
      resource: create(ResourceSchema, {
        id: "lv-lim",
        resourceType: "resource_limits",
        desiredState: { kind: { case: "resourceLimits", value: { cpus: 1 } } },
      }),
    });
    const why = await api().explainResource({ resourceType: "resource_limits", id: "lv-lim" });
    expect(why.convergence?.status).toBe(ConvergenceStatus.CONVERGED);
    expect(why.convergence?.message).toBe("nothing uses it");
  });
});
