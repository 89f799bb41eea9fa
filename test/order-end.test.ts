// Every way an order ends goes through one owner (controller/reconcile/order-end.ts): each end
// writes its own events once, however often it is replayed, and start-up recovery replays an end
// a crash cut short as the same end (a superseded order stays superseded, not a failure).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createLogger } from "../common/logging/logger.js";
import { recoverOrderOutcomes } from "../controller/dispatch/order-outcome.js";
import { expirePendingOrder, recordOrderEnd, supersedeOrder, type OrderEnd, type OrderEndDeps } from "../controller/reconcile/order-end.js";
import { planDeployment } from "../controller/reconcile/plan-deployment.js";
import type { RenderedProject } from "../controller/reconcile/render-project.js";
import { TargetRecords, tenantStatusOf } from "../controller/reconcile/target-records.js";
import { SnapshotWriter } from "../controller/snapshots/snapshot-writer.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { ComposeProjectSchema, DeploymentPhase } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderResultSchema, WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { tenant } from "./store-conformance.js";

const TENANT = "t-end";
const NODE = "n-end";
const T0 = new Date("2030-01-02T03:00:00Z");
const TRACE = { requestId: "r-end", correlationId: "c-end" };
const LEASE_MS = 60_000;

let dir: string;
let store: FileStore;
let deps: OrderEndDeps;
let closeLog: () => void;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "skipper-order-end-"));
  store = new FileStore(dir);
  await store.open();
  await store.createResource(tenant(TENANT));
  const log = createLogger({ service: "t", stdout: false, level: "silent" });
  closeLog = log.close;
  deps = { store, records: new TargetRecords(store), snapshots: new SnapshotWriter(store, log.logger) };
});

afterEach(async () => {
  await deps.snapshots.flush();
  await store.close();
  closeLog();
  await rm(dir, { recursive: true, force: true });
});

// A deploy order with its deployment, pending, as a pass issues them.
async function pendingDeploy(id: string, expiresAt?: Date): Promise<WorkOrder> {
  const rendered = {
    project: create(ComposeProjectSchema, { projectName: "p" }),
    specHash: `hash-${id}`,
    serviceIds: [],
    composeServices: {},
    deleteVolumes: [],
    secretUses: [],
    registrySecretIds: [],
    processes: [],
    routes: [],
    fromServices: false,
  } satisfies RenderedProject;
  const ids = { tenantId: TENANT, nodeId: NODE, workOrderId: id, ...TRACE, now: T0 };
  const plan = planDeployment({ ...ids, deploymentId: `dep-${id}`, rendered, reason: "test" });
  if (expiresAt) plan.workOrder.expiresAt = timestampFromDate(expiresAt);
  await store.createResource(plan.deployment);
  return store.createWorkOrder(plan.workOrder);
}

async function finished(order: WorkOrder, success: boolean): Promise<WorkOrder> {
  const claimed = await store.claimWorkOrder(order.id, NODE, T0, LEASE_MS);
  const result = create(WorkOrderResultSchema, { success, retriable: false, code: success ? "APPLY_OK" : "APPLY_FAILED", message: "m" });
  const out = await store.finishWorkOrder(order.id, NODE, result, T0, claimed.claim?.fencingToken);
  return out.workOrder;
}

// Each end, made the way its caller makes it; those the lifecycle makes are recorded by it.
const ENDS: Record<OrderEnd, { make: (o: WorkOrder) => Promise<WorkOrder>; events: string[] }> = {
  succeeded: { make: (o) => finished(o, true), events: ["work_order_succeeded", "deployment_succeeded"] },
  failed: { make: (o) => finished(o, false), events: ["work_order_failed", "deployment_failed"] },
  cancelled: { make: (o) => store.cancelWorkOrder(o.id, "stop", "r-cancel", T0), events: ["work_order_cancelled", "deployment_failed"] },
  expired: { make: (o) => expirePendingOrder(deps, o, new Date(T0.getTime() + 2000)), events: ["work_order_failed", "deployment_failed"] },
  superseded: { make: (o) => supersedeOrder(store, o, T0, TRACE), events: ["work_order_cancelled", "deployment_superseded"] },
};

async function endEvents(orderId: string): Promise<string[]> {
  const page = await store.listEvents({ workOrderId: orderId, pageSize: 100 });
  return page.items.map((e) => e.type).sort();
}

async function deploymentOf(orderId: string) {
  const d = await store.getResource("deployment", `dep-${orderId}`);
  return d?.currentState?.kind.case === "deployment" ? d.currentState.kind.value : undefined;
}

describe("an order's end", () => {
  for (const [end, how] of Object.entries(ENDS) as [OrderEnd, (typeof ENDS)[OrderEnd]][]) {
    it(`${end}: writes its events once, however often it is recorded again`, async () => {
      const order = await pendingDeploy(`o-${end}`, new Date(T0.getTime() + 1000));
      const done = await how.make(order);
      await recordOrderEnd(deps, done, TRACE);
      await recordOrderEnd(deps, done, TRACE);
      expect(await endEvents(order.id)).toEqual([...how.events].sort());
      const phase =
        { succeeded: DeploymentPhase.SUCCEEDED, superseded: DeploymentPhase.SUPERSEDED }[end as string] ?? DeploymentPhase.FAILED;
      expect((await deploymentOf(order.id))?.phase).toBe(phase);
      // Superseded is not a failure: the order is CANCELLED, its code SUPERSEDED.
      if (end === "superseded") expect([done.status, done.result?.code]).toEqual([WorkOrderStatus.CANCELLED, "SUPERSEDED"]);
    });
  }

  it("superseded and cut short by a crash: recovered at start as superseded, not as a failure of its target", async () => {
    const order = await pendingDeploy("o-cut");
    // The transition stored, nothing after it (what a crash between the two writes leaves).
    const result = create(WorkOrderResultSchema, { success: false, code: "SUPERSEDED", message: "newer" });
    await store.supersedeWorkOrder(order.id, result, T0, WorkOrderStatus.CANCELLED);
    expect((await deploymentOf(order.id))?.phase).toBe(DeploymentPhase.PENDING);

    expect(await recoverOrderOutcomes(deps)).toBe(1);

    expect(await endEvents(order.id)).toEqual(["deployment_superseded", "work_order_cancelled"]);
    expect((await deploymentOf(order.id))?.phase).toBe(DeploymentPhase.SUPERSEDED);
    expect(tenantStatusOf(await store.getResource("tenant", TENANT)).targets).toEqual([]);
    // Settled: a second start finds nothing to replay.
    expect(await recoverOrderOutcomes(deps)).toBe(0);
  });
});
