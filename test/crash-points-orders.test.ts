// The controller killed by its own crash points on the order path (SKIPPER_CRASH_AT): between a
// deployment and its work order, between an order's finish and its events, and between a
// result and the tenant's target record. A node is played over the API (claim, report with its
// fencing token), so no engine is needed. Each test drives the one step that passes the point,
// waits for the process to die of SIGKILL there, restarts it on the same data and checks that
// what was acknowledged is kept, nothing is left half-done, and every order ends exactly once.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterEach, describe, expect, it } from "vitest";
import type { CrashPointName } from "../common/crash-points.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { DeploymentPhase, ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { crashAt, crashOf, halfWritten } from "./helpers/crash.js";
import { startControllerProcess, stopProcess, waitFor, type ControllerProcess } from "./helpers/processes.js";

const NODE = "orders-crash-node";
const TENANT = "orders-crash-t";
const OK = { success: true, code: "APPLY_OK", message: "crash point test" };

let ctl: ControllerProcess | undefined;
let root: string | undefined;
afterEach(async () => {
  if (ctl) await stopProcess(ctl.child);
  ctl = undefined;
  if (root) await rm(root, { recursive: true, force: true });
});

/** A controller armed at `point` on a fresh data dir, with NODE registered and played over the API. */
async function armed(point: CrashPointName) {
  root = await mkdtemp(join(tmpdir(), "skipper-crash-orders-"));
  const dataDir = join(root, "data");
  ctl = await startControllerProcess({ dataDir, env: crashAt(point) });
  const ended = crashOf(ctl.child);
  const port = Number(new URL(ctl.url).port);
  const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
  const auth: Interceptor = (next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req));
  // The same URL and CA after the restart: this client outlives the process.
  const node = createClient(
    WorkOrderService,
    createConnectTransport({ baseUrl: `${ctl.url}/v1`, httpVersion: "2", nodeOptions: { ca: ctl.ca }, interceptors: [auth] }),
  );
  return { dataDir, port, ended, node };
}

/** Starts the controller again, unarmed, on `dataDir` where its node expects it. */
async function restart(dataDir: string, port: number): Promise<void> {
  ctl = await startControllerProcess({ dataDir, port });
}

/** Stopped (its own writes finished), the data dir holds no temp file, torn or quarantined record. */
async function cleanAfterStop(dataDir: string): Promise<void> {
  await stopProcess(ctl!.child);
  ctl = undefined;
  expect(await halfWritten(dataDir)).toEqual([]);
}

const admin = () => ({
  resources: ctl!.admin(ResourceService),
  orders: ctl!.admin(WorkOrderService),
  events: ctl!.admin(EventService),
});

async function createTenant(): Promise<void> {
  await admin().resources.createResource({
    resourceType: "tenant",
    resource: create(ResourceSchema, {
      id: TENANT,
      resourceType: "tenant",
      desiredState: {
        kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE }, compose: { composeFile: "services: {}\n" } } },
      },
    }),
  });
}

function pendingOrder(): Promise<WorkOrder> {
  return waitFor("the tenant's pending order", async () => {
    const os = (await admin().orders.listWorkOrders({ tenantId: TENANT, status: WorkOrderStatus.PENDING })).workOrders;
    return os[0];
  });
}

async function eventTypes(workOrderId: string): Promise<string[]> {
  return (await admin().events.listEvents({ workOrderId, pageSize: 1000 })).events.map((e) => e.type);
}

async function deployments(): Promise<Resource[]> {
  return (await admin().resources.listResources({ resourceType: "deployment", tenantId: TENANT, pageSize: 1000 })).resources;
}

const phaseOf = (d: Resource) => (d.currentState?.kind.case === "deployment" ? d.currentState.kind.value : undefined);
const targetOf = (t: Resource | undefined) =>
  t?.currentState?.kind.case === "tenant" ? t.currentState.kind.value.targets.find((x) => x.nodeId === NODE) : undefined;

/** The order ran once: one claim, finished, one created/started/succeeded event, its deployment succeeded. */
async function endedOnce(o: WorkOrder): Promise<void> {
  const f = (await admin().orders.getWorkOrder({ id: o.id })).workOrder!;
  expect(f.status).toBe(WorkOrderStatus.SUCCESS);
  expect(f.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([[1n, "finished"]]);
  const types = await eventTypes(o.id);
  for (const t of ["work_order_created", "work_order_started", "work_order_succeeded"])
    expect(
      types.filter((x) => x === t),
      t,
    ).toHaveLength(1);
  expect(types.filter((t) => t === "work_order_failed")).toEqual([]);
  const dep = (await deployments()).find((d) => phaseOf(d)?.workOrderId === o.id);
  expect(phaseOf(dep!)?.phase).toBe(DeploymentPhase.SUCCEEDED);
  expect(types.filter((t) => t === "deployment_succeeded")).toHaveLength(1);
}

/** The tenant's record for NODE carries the order's outcome, and no other order was issued. */
async function recorded(o: WorkOrder): Promise<void> {
  const t = await waitFor("the outcome on the tenant's record", async () => {
    const t = (await admin().resources.getResource({ resourceType: "tenant", id: TENANT })).resource;
    return targetOf(t)?.lastResultCode === "APPLY_OK" ? t : undefined;
  });
  expect(targetOf(t)?.lastWorkOrderId).toBe(o.id);
  expect(t?.lastAppliedState).toBeDefined();
  const all = (await admin().orders.listWorkOrders({ tenantId: TENANT })).workOrders;
  expect(all.map((x) => x.id)).toEqual([o.id]);
}

describe("crash points on the order path", () => {
  it("reconcile.after-deployment: the deployment without an order is failed at restart and one new order runs once", async () => {
    const { dataDir, port, ended, node } = await armed("reconcile.after-deployment");
    // The pass that dies runs after the tenant is stored; its answer may not have gone out.
    const acked = await createTenant().then(
      () => true,
      () => false,
    );
    expect(await ended).toMatchObject({ signal: "SIGKILL", point: "reconcile.after-deployment" });
    await restart(dataDir, port);
    if (
      !acked &&
      !(await admin()
        .resources.getResource({ resourceType: "tenant", id: TENANT })
        .catch(() => undefined))
    )
      await createTenant();
    const o = await pendingOrder();
    await node.claimWorkOrder({ id: o.id });
    await node.reportWorkOrderResult({ id: o.id, fencingToken: 1n, result: OK });
    await recorded(o);
    await endedOnce(o);
    const deps = await deployments();
    expect(deps).toHaveLength(2);
    const unissued = deps.find((d) => phaseOf(d)?.workOrderId !== o.id)!;
    expect(phaseOf(unissued)).toMatchObject({ phase: DeploymentPhase.FAILED, resultCode: "ORDER_NOT_ISSUED" });
    expect(
      (
        await admin()
          .orders.getWorkOrder({ id: phaseOf(unissued)!.workOrderId })
          .catch(() => undefined)
      )?.workOrder,
    ).toBeUndefined();
    const failed = (await admin().events.listEvents({ resourceId: unissued.id })).events.filter((e) => e.type === "deployment_failed");
    expect(failed).toHaveLength(1);
    await cleanAfterStop(dataDir);
  }, 90_000);

  it("dispatch.after-finish: an ad-hoc order's events are recorded once when its node reports again", async () => {
    const { dataDir, port, ended, node } = await armed("dispatch.after-finish");
    const o = (
      await admin().orders.createWorkOrder({
        type: WorkOrderType.INSPECT,
        target: { nodeId: NODE },
        action: { kind: { case: "inspect", value: {} } },
      })
    ).workOrder!;
    await node.claimWorkOrder({ id: o.id });
    const lost = await node.reportWorkOrderResult({ id: o.id, fencingToken: 1n, result: OK }).then(
      () => false,
      () => true,
    );
    expect(lost).toBe(true);
    expect(await ended).toMatchObject({ signal: "SIGKILL", point: "dispatch.after-finish" });
    await restart(dataDir, port);
    // The finish was stored, so the node's repeated report is a duplicate: it records what the crash cut off.
    expect((await admin().orders.getWorkOrder({ id: o.id })).workOrder?.status).toBe(WorkOrderStatus.SUCCESS);
    expect((await eventTypes(o.id)).filter((t) => t === "work_order_succeeded").length).toBeLessThanOrEqual(1);
    expect((await node.reportWorkOrderResult({ id: o.id, fencingToken: 1n, result: OK })).duplicate).toBe(true);
    expect((await node.reportWorkOrderResult({ id: o.id, fencingToken: 1n, result: OK })).duplicate).toBe(true);
    const f = (await admin().orders.getWorkOrder({ id: o.id })).workOrder!;
    expect(f.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([[1n, "finished"]]);
    expect((await eventTypes(o.id)).filter((t) => t === "work_order_succeeded")).toHaveLength(1);
  }, 90_000);

  // After the finish and before its events (dispatch.after-finish), or with the events and the
  // deployment written and the tenant's record not (dispatch.before-target-record): start-up
  // recovery completes the outcome before the node reports again, and nothing runs twice.
  for (const [point, title] of [
    ["dispatch.after-finish", "dispatch.after-finish: a deploy order's outcome is recovered at restart and recorded once"],
    [
      "dispatch.before-target-record",
      "dispatch.before-target-record: the tenant's record gets the result at restart, and nothing runs again",
    ],
  ] as const) {
    it(title, async () => {
      const { dataDir, port, ended, node } = await armed(point);
      await createTenant();
      const o = await pendingOrder();
      await node.claimWorkOrder({ id: o.id });
      await node.reportWorkOrderResult({ id: o.id, fencingToken: 1n, result: OK }).catch(() => undefined);
      expect(await ended).toMatchObject({ signal: "SIGKILL", point });
      await restart(dataDir, port);
      await recorded(o);
      await endedOnce(o);
      expect((await node.reportWorkOrderResult({ id: o.id, fencingToken: 1n, result: OK })).duplicate).toBe(true);
      await endedOnce(o);
      await cleanAfterStop(dataDir);
    }, 90_000);
  }
});
