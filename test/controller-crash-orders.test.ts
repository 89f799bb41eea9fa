// The controller killed (SIGKILL) while 50 work orders are in flight, then restarted on the same
// data: agents (played here over the API, each order claimed with its lease and fencing token)
// retry what failed while it was down; every order ends exactly once, none is lost, none has a
// second holder. The kill moments come from observed progress (acknowledged results, observed
// lease expiries and monitor sweeps), never from elapsed time, so a slow machine cannot move them.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { startControllerProcess, waitFor, type ControllerProcess } from "./helpers/processes.js";

const ORDERS = 50;
const NODES = 5;
// Results are reported by this many concurrent senders, one report in flight each. The
// controller is killed right after the KILL_AFTER-th acknowledgement: the other senders' reports
// are then in flight (stored or not, unanswered), and the killing sender's next one meets the
// dead controller, whatever the machine's speed.
const REPORTERS = 10;
const KILL_AFTER = 20;

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
          desiredState: {
            kind: {
              case: "tenant",
              value: { deploymentPolicy: { targetNodeId: `crash-node-${i % NODES}` }, compose: { composeFile: "services: {}\n" } },
            },
          },
        }),
      });
    }
    // Agents over the API; their clients survive the restart (same URL and CA).
    const agents: Client<typeof WorkOrderService>[] = tokens.map((t) => {
      const auth: Interceptor = (next) => (req) => (req.header.set("authorization", `Bearer ${t}`), next(req));
      return createClient(
        WorkOrderService,
        createConnectTransport({ baseUrl: `${ctl.url}/v1`, httpVersion: "2", nodeOptions: { ca: ctl.ca }, interceptors: [auth] }),
      );
    });
    // Set at the kill; `back` resolves once the controller listens again.
    let killedYet = false;
    let restarted!: () => void;
    const back = new Promise<void>((r) => (restarted = r));
    let interrupted = 0;
    const retry = async <T>(fn: () => Promise<T>): Promise<T> => {
      for (let i = 0; ; i++) {
        try {
          return await fn();
        } catch (e) {
          const code = ConnectError.from(e).code;
          if (
            !killedYet ||
            ![Code.Unavailable, Code.Aborted, Code.Unknown, Code.Internal, Code.Canceled, Code.DeadlineExceeded].includes(code) ||
            i > 300
          )
            throw e;
          if (i === 0) interrupted++;
          // Nothing answers until the restart; after it, a short pause between tries.
          await back;
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
    for (const o of pending)
      claimed.push((await agents[Number(o.target!.nodeId.split("-").pop())]!.claimWorkOrder({ id: o.id })).workOrder!);
    // The kill comes right after the KILL_AFTER-th acknowledged result, in the same tick (no
    // other report is sent in between), with the other senders' reports in flight.
    const acknowledged: string[] = [];
    let ackedBeforeKill: string[] = [];
    const killed = new Promise((r) => ctl.child.once("exit", r));
    const queue = [...claimed];
    const report = async (o: WorkOrder) => {
      const agent = agents[Number(o.target!.nodeId.split("-").pop())]!;
      const res = await retry(() =>
        agent.reportWorkOrderResult({
          id: o.id,
          result: { success: true, code: "APPLY_OK", message: "crash test" },
          fencingToken: o.claim!.fencingToken,
        }),
      );
      acknowledged.push(o.id);
      if (acknowledged.length === KILL_AFTER) {
        killedYet = true;
        ctl.child.kill("SIGKILL");
        ackedBeforeKill = [...acknowledged];
      }
      return res;
    };
    const senders = Promise.all(
      Array.from({ length: REPORTERS }, async () => {
        const out = [];
        for (let o = queue.shift(); o; o = queue.shift()) out.push(await report(o));
        return out;
      }),
    );
    // A report that fails before the kill fails the test here rather than waiting for a restart.
    await Promise.race([killed, senders.then(() => Promise.reject(new Error("every result was reported before the kill")))]);
    ctl = await startControllerProcess({ dataDir, port, extraArgs: ["--lease-duration", "60s"] });
    restarted();
    const outcomes = (await senders).flat();
    // The kill landed mid-traffic: some reports failed and were retried after the restart (at
    // least the killing sender's next one), and some had been acknowledged before it.
    expect(ackedBeforeKill).toHaveLength(KILL_AFTER);
    expect(interrupted).toBeGreaterThan(0);
    expect(interrupted).toBeLessThanOrEqual(ORDERS - KILL_AFTER);
    expect(outcomes).toHaveLength(ORDERS);

    const finals = (await ctl.admin(WorkOrderService).listWorkOrders({ pageSize: 1000 })).workOrders.filter((o) =>
      claimed.some((c) => c.id === o.id),
    );
    expect(finals).toHaveLength(ORDERS);
    // Every result acknowledged before the kill survived it.
    for (const id of ackedBeforeKill) expect(finals.find((o) => o.id === id)?.status, id).toBe(WorkOrderStatus.SUCCESS);
    for (const o of finals) {
      expect(o.status, o.id).toBe(WorkOrderStatus.SUCCESS);
      expect(o.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([[1n, "finished"]]);
      const events = (await ctl.admin(EventService).listEvents({ workOrderId: o.id })).events.map((e) => e.type);
      expect(
        events.filter((t) => t === "work_order_succeeded"),
        o.id,
      ).toHaveLength(1);
      expect(
        events.filter((t) => t === "work_order_started"),
        o.id,
      ).toHaveLength(1);
    }
    // Nothing was issued twice for a target: one order per tenant.
    const all = (await ctl.admin(WorkOrderService).listWorkOrders({ pageSize: 1000 })).workOrders;
    expect(all).toHaveLength(ORDERS);
  }, 120_000);

  it("leases that lapsed while it was down get one lease of grace: live holders keep their orders, a gone one loses its order to a new claim", async () => {
    await ctl?.stop();
    root = await mkdtemp(join(tmpdir(), "skipper-crash-leases-"));
    const dataDir = join(root, "data");
    const lease = ["--lease-duration", "6s"];
    ctl = await startControllerProcess({ dataDir, extraArgs: lease });
    const port = Number(new URL(ctl.url).port);
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: "lease-node" })).token;
    const auth: Interceptor = (next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req));
    const agent = createClient(
      WorkOrderService,
      createConnectTransport({ baseUrl: `${ctl.url}/v1`, httpVersion: "2", nodeOptions: { ca: ctl.ca }, interceptors: [auth] }),
    );
    const n = 6;
    for (let i = 0; i < n; i++) {
      await ctl.admin(ResourceService).createResource({
        resourceType: "tenant",
        resource: create(ResourceSchema, {
          id: `lease-t-${i}`,
          resourceType: "tenant",
          desiredState: {
            kind: {
              case: "tenant",
              value: { deploymentPolicy: { targetNodeId: "lease-node" }, compose: { composeFile: "services: {}\n" } },
            },
          },
        }),
      });
    }
    const pending = await waitFor("every tenant's order", async () => {
      const os = (await ctl.admin(WorkOrderService).listWorkOrders({ status: WorkOrderStatus.PENDING, pageSize: 100 })).workOrders;
      return os.length === n ? os : undefined;
    });
    const claimed: WorkOrder[] = [];
    for (const o of pending) claimed.push((await agent.claimWorkOrder({ id: o.id })).workOrder!);
    const lapseAt = Math.max(...claimed.map((o) => timestampDate(o.claim!.leaseExpiresAt!).getTime()));
    // A canary shows when the lease monitor has swept after the restart: a pending order for a
    // node without an agent that expires when the leases lapse, while the controller is down,
    // so only a sweep of the restarted controller can fail it (EXPIRED).
    await ctl.admin(NodeService).registerNode({ nodeId: "lease-canary" });
    const canary = (
      await ctl.admin(WorkOrderService).createWorkOrder({
        type: WorkOrderType.INSPECT,
        target: { nodeId: "lease-canary" },
        action: { kind: { case: "inspect", value: {} } },
        expiresAt: timestampFromDate(new Date(lapseAt)),
      })
    ).workOrder!;
    // Down for longer than a lease: every lease lapses meanwhile (seen on the clock against the
    // leases' own expiry times).
    ctl.child.kill("SIGKILL");
    await new Promise((r) => ctl.child.once("exit", r));
    const killedAt = Date.now();
    await waitFor("every lease to lapse", async () => (Date.now() > lapseAt ? true : undefined), 30_000, 50);
    ctl = await startControllerProcess({ dataDir, port, extraArgs: lease });
    const [alive, gone] = [claimed.slice(0, n / 2), claimed.slice(n / 2)];
    // Live holders renew within the grace, though not at once (agents renew every third of a
    // lease): here once the monitor has swept the lapsed leases at least once.
    const expired = await waitFor(
      "a lease-monitor sweep after the restart",
      async () => {
        const o = (await ctl.admin(WorkOrderService).getWorkOrder({ id: canary.id })).workOrder!;
        return o.status === WorkOrderStatus.FAILED ? o : undefined;
      },
      30_000,
      50,
    );
    expect(expired.result?.code).toBe("EXPIRED");
    expect(timestampDate(expired.finishedAt!).getTime()).toBeGreaterThanOrEqual(killedAt);
    for (const o of alive) await agent.renewWorkOrderLease({ id: o.id, fencingToken: o.claim!.fencingToken });
    const keep = setInterval(
      () => alive.forEach((o) => void agent.renewWorkOrderLease({ id: o.id, fencingToken: o.claim!.fencingToken }).catch(() => undefined)),
      2000,
    );
    try {
      // The others' holders never come back: after the grace their orders are pending again.
      const again = await waitFor(
        "the gone holders' orders to be pending again",
        async () => {
          const os = await Promise.all(gone.map(async (o) => (await ctl.admin(WorkOrderService).getWorkOrder({ id: o.id })).workOrder!));
          return os.every((o) => o.status === WorkOrderStatus.PENDING) ? os : undefined;
        },
        30_000,
        100,
      );
      expect(again.every((o) => o.attempts.map((a) => a.outcome).join() === "lease_expired")).toBe(true);
      for (const o of alive)
        expect((await ctl.admin(WorkOrderService).getWorkOrder({ id: o.id })).workOrder!.status).toBe(WorkOrderStatus.RUNNING);
      // A new holder takes each of them (token 2) and finishes it; the old holder's late result is refused.
      for (const o of gone) {
        const c = (await agent.claimWorkOrder({ id: o.id })).workOrder!;
        expect(c.claim?.fencingToken).toBe(2n);
        await agent.reportWorkOrderResult({
          id: o.id,
          fencingToken: 2n,
          result: { success: true, code: "APPLY_OK", message: "new holder" },
        });
        const late = await agent
          .reportWorkOrderResult({
            id: o.id,
            fencingToken: 1n,
            result: { success: false, code: "COMPOSE_FAILED", message: "stale holder" },
          })
          .then(
            () => undefined,
            (e: unknown) => ConnectError.from(e),
          );
        expect(late?.code).toBe(Code.FailedPrecondition);
      }
      for (const o of alive)
        await agent.reportWorkOrderResult({
          id: o.id,
          fencingToken: 1n,
          result: { success: true, code: "APPLY_OK", message: "kept its lease" },
        });
    } finally {
      clearInterval(keep);
    }
    for (const o of claimed) {
      const f = (await ctl.admin(WorkOrderService).getWorkOrder({ id: o.id })).workOrder!;
      expect(f.status, o.id).toBe(WorkOrderStatus.SUCCESS);
      const expected = alive.includes(o)
        ? [[1n, "finished"]]
        : [
            [1n, "lease_expired"],
            [2n, "finished"],
          ];
      expect(f.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual(expected);
      const events = (await ctl.admin(EventService).listEvents({ workOrderId: o.id })).events.map((e) => e.type);
      expect(
        events.filter((t) => t === "work_order_succeeded" || t === "work_order_failed"),
        o.id,
      ).toEqual(["work_order_succeeded"]);
    }
  }, 90_000);
});
