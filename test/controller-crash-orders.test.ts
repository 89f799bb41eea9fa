// The controller killed (SIGKILL) while 50 work orders are in flight, then restarted on the same
// data: agents (played here over the API, each order claimed with its lease and fencing token)
// retry what failed while it was down; every order ends exactly once, none is lost, none has a
// second holder.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { startControllerProcess, waitFor, type ControllerProcess } from "./helpers/processes.js";

const ORDERS = 50;
const NODES = 5;

describe("controller crash with orders in flight", () => {
  let ctl: ControllerProcess;
  let root: string;
  afterAll(async () => {
    await ctl?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  it("every order ends exactly once after a SIGKILL of the controller mid-traffic", async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-crash-orders-"));
    const dataDir = join(root, "data");
    ctl = await startControllerProcess({ dataDir, extraArgs: ["--lease-duration", "60s"] });
    const port = Number(new URL(ctl.url).port);
    const tokens: string[] = [];
    for (let n = 0; n < NODES; n++) tokens.push((await ctl.admin(NodeService).registerNode({ nodeId: `crash-node-${n}` })).token);
    for (let i = 0; i < ORDERS; i++) {
      await ctl.admin(ResourceService).createResource({
        resourceType: "tenant",
        resource: create(ResourceSchema, {
          id: `crash-t-${i}`,
          resourceType: "tenant",
          desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: `crash-node-${i % NODES}` }, compose: { composeFile: "services: {}\n" } } } },
        }),
      });
    }
    // Agents over the API; their clients survive the restart (same URL and CA).
    const agents: Client<typeof WorkOrderService>[] = tokens.map((t) => {
      const auth: Interceptor = (next) => (req) => (req.header.set("authorization", `Bearer ${t}`), next(req));
      return createClient(WorkOrderService, createConnectTransport({ baseUrl: `${ctl.url}/v1`, httpVersion: "2", nodeOptions: { ca: ctl.ca }, interceptors: [auth] }));
    });
    let interrupted = 0;
    const retry = async <T>(fn: () => Promise<T>): Promise<T> => {
      for (let i = 0; ; i++) {
        try {
          return await fn();
        } catch (e) {
          const code = ConnectError.from(e).code;
          if (![Code.Unavailable, Code.Aborted, Code.Unknown, Code.Internal, Code.Canceled, Code.DeadlineExceeded].includes(code) || i > 300) throw e;
          if (i === 0) interrupted++;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    };
    const pending = await waitFor("every tenant's order", async () => {
      const os = (await ctl.admin(WorkOrderService).listWorkOrders({ status: WorkOrderStatus.PENDING, pageSize: 1000 })).workOrders;
      return os.length === ORDERS ? os : undefined;
    });
    // Claim them all (50 leases held), then report results while the controller is killed.
    const claimed: WorkOrder[] = [];
    for (const o of pending) claimed.push((await agents[Number(o.target!.nodeId.split("-").pop())]!.claimWorkOrder({ id: o.id })).workOrder!);
    const reports = claimed.map(async (o, i) => {
      await new Promise((r) => setTimeout(r, i * 8));
      const agent = agents[Number(o.target!.nodeId.split("-").pop())]!;
      return retry(() => agent.reportWorkOrderResult({ id: o.id, result: { success: true, code: "APPLY_OK", message: "crash test" }, fencingToken: o.claim!.fencingToken }));
    });
    await new Promise((r) => setTimeout(r, 150));
    ctl.child.kill("SIGKILL");
    await new Promise((r) => ctl.child.once("exit", r));
    ctl = await startControllerProcess({ dataDir, port, extraArgs: ["--lease-duration", "60s"] });
    const outcomes = await Promise.all(reports);
    // The kill landed mid-traffic: some reports failed and were retried after the restart,
    // and some had been acknowledged before it.
    expect(interrupted).toBeGreaterThan(0);
    expect(interrupted).toBeLessThan(ORDERS);
    expect(outcomes).toHaveLength(ORDERS);

    const finals = (await ctl.admin(WorkOrderService).listWorkOrders({ pageSize: 1000 })).workOrders.filter((o) => claimed.some((c) => c.id === o.id));
    expect(finals).toHaveLength(ORDERS);
    for (const o of finals) {
      expect(o.status, o.id).toBe(WorkOrderStatus.SUCCESS);
      expect(o.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([[1n, "finished"]]);
      const events = (await ctl.admin(EventService).listEvents({ workOrderId: o.id })).events.map((e) => e.type);
      expect(events.filter((t) => t === "work_order_succeeded"), o.id).toHaveLength(1);
      expect(events.filter((t) => t === "work_order_started"), o.id).toHaveLength(1);
    }
    // Nothing was issued twice for a target: one order per tenant.
    const all = (await ctl.admin(WorkOrderService).listWorkOrders({ pageSize: 1000 })).workOrders;
    expect(all).toHaveLength(ORDERS);
  }, 120_000);
});
