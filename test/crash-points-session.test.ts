// The controller killed by its own crash points on an agent's Session stream (issue 38), on the
// file store and on PostgreSQL: after an order is claimed for a session and before it is pushed
// (session.after-push-claim), after an ack is taken and before it is answered (session.after-ack),
// after a result is recorded and before it is answered (session.after-result). A scripted agent
// (helpers/session-crash.ts: the raw generated client, its journal in memory) plays the node; the
// controller is restarted on the same data where the agent expects it, and every order must run
// once and end once. Then the other side: the agent's stream cut hard at the same three moments.
// Everything is checked through the API, and every wait is for an observed message or state.
import { afterEach, describe, expect, it } from "vitest";
import { SessionAnswerSubject } from "../gen/skipper/v1/node_service_pb.js";
import { DeploymentPhase, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { halfWritten } from "./helpers/crash.js";
import { pgUrl } from "./helpers/postgres.js";
import { stopProcess, waitFor } from "./helpers/processes.js";
import { CrashRig, leftToken, OK, ScriptedAgent, type StoreKind } from "./helpers/session-crash.js";

const { ACK, LEASE_RENEWAL, RESULT } = SessionAnswerSubject;
/** A short lease where a test waits for one to lapse (the restart's grace is one lease too). */
const SHORT_LEASE_MS = 3000;

if (!pgUrl()) console.warn("!!! crash-points-session.test.ts: the PostgreSQL cases are SKIPPED (see test/global-setup.ts)");

let rig: CrashRig | undefined;
afterEach(async () => {
  await rig?.dispose();
  rig = undefined;
});

const phaseOf = (d: Resource) => (d.currentState?.kind.case === "deployment" ? d.currentState.kind.value : undefined);

/** The tenant's one order (waits for the reconciler to issue it). */
function tenantOrder(r: CrashRig, tenantId: string): Promise<WorkOrder> {
  return waitFor("the tenant's order", async () => (await r.admin().orders.listWorkOrders({ tenantId })).workOrders[0]);
}

/** Ended once: the attempts as given, one end event, the deployment and the tenant's record as after one result. */
async function endedOnce(r: CrashRig, tenantId: string, nodeId: string, o: WorkOrder, attempts: [bigint, string][]): Promise<void> {
  const f = await r.order(o.id);
  expect(f.status).toBe(WorkOrderStatus.SUCCESS);
  expect(f.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual(attempts);
  expect(await r.count(o.id, "work_order_started")).toBe(attempts.length);
  expect(await r.count(o.id, "work_order_succeeded")).toBe(1);
  expect(await r.count(o.id, "work_order_failed")).toBe(0);
  const deps = await r.deployments(tenantId);
  expect(deps.map((d) => [phaseOf(d)?.workOrderId, phaseOf(d)?.phase])).toEqual([[o.id, DeploymentPhase.SUCCEEDED]]);
  expect((await r.admin().events.listEvents({ resourceId: deps[0]!.id, type: "deployment_succeeded" })).events).toHaveLength(1);
  const target = await waitFor("the outcome on the tenant's record", async () => {
    const t = await r.tenantRecord(tenantId);
    const x = t?.currentState?.kind.case === "tenant" ? t.currentState.kind.value.targets.find((y) => y.nodeId === nodeId) : undefined;
    return x?.lastResultCode === OK.code ? x : undefined;
  });
  expect(target.lastWorkOrderId).toBe(o.id);
  expect((await r.admin().orders.listWorkOrders({ tenantId })).workOrders.map((x) => x.id)).toEqual([o.id]);
}

/** The controller stopped (its own writes done): on the file store, no temp, torn or quarantined file. */
async function cleanAfterStop(r: CrashRig, store: StoreKind): Promise<void> {
  await stopProcess(r.ctl!.child);
  r.ctl = undefined;
  if (store === "file") expect(await halfWritten(r.dataDir)).toEqual([]);
}

for (const store of ["file", "postgres"] as const) {
  const T = `cs-${store === "file" ? "f" : "p"}`;
  describe.skipIf(store === "postgres" && !pgUrl())(`session crash points, ${store} store`, () => {
    it("session.after-push-claim: the claim of the dead session lapses with its lease, the order is pushed again with a new token and runs once", async () => {
      rig = await CrashRig.create(store);
      const { ended } = await rig.start({ point: "session.after-push-claim", leaseMs: SHORT_LEASE_MS });
      const agent = new ScriptedAgent(`${T}-n1`, await rig.node(`${T}-n1`));
      await agent.connect();
      await rig.tenant(`${T}-t1`, agent.nodeId);
      expect(await ended).toMatchObject({ signal: "SIGKILL", point: "session.after-push-claim" });
      expect(await agent.s!.ended()).toBeDefined();
      expect(agent.s!.received.some((m) => m.kind.case === "order")).toBe(false);
      await rig.start({ leaseMs: SHORT_LEASE_MS });

      // On disk: claimed (token 1) for a session that no longer exists. No controller holds that
      // session to release it, so the claim stands until its lease lapses.
      const o = await tenantOrder(rig, `${T}-t1`);
      expect([o.status, o.claim?.fencingToken]).toEqual([WorkOrderStatus.RUNNING, 1n]);
      await agent.connect();
      const again = await agent.pushed(o.id);
      expect(again.token).toBe(2n);
      expect(await rig.count(o.id, "work_order_lease_expired")).toBe(1);
      expect(await rig.count(o.id, "work_order_claim_released")).toBe(0);
      // The old token is refused; the new one runs the order to its end.
      expect(await agent.ask(RESULT, o.id, 1n)).toMatchObject({ accepted: false, code: "WORK_ORDER_NOT_CLAIMABLE" });
      expect((await rig.order(o.id)).status).toBe(WorkOrderStatus.RUNNING);
      expect(await agent.ask(ACK, o.id, 2n)).toMatchObject({ accepted: true });
      expect(await agent.ask(RESULT, o.id, 2n)).toMatchObject({ accepted: true, duplicate: false });
      await endedOnce(rig, `${T}-t1`, agent.nodeId, o, [
        [1n, "lease_expired"],
        [2n, "finished"],
      ]);
      await agent.close();
      await cleanAfterStop(rig, store);
    }, 120_000);

    it("session.after-ack: the acknowledged claim is the agent's after the restart: its renewals and result with that token are taken, once", async () => {
      rig = await CrashRig.create(store);
      const { ended } = await rig.start({ point: "session.after-ack" });
      const agent = new ScriptedAgent(`${T}-n2`, await rig.node(`${T}-n2`));
      await agent.connect();
      await rig.tenant(`${T}-t2`, agent.nodeId);
      const e = await agent.pushed();
      const lost = await agent.ask(ACK, e.order.id, e.token).then(
        () => false,
        () => true,
      );
      expect(lost).toBe(true);
      expect(await ended).toMatchObject({ signal: "SIGKILL", point: "session.after-ack" });
      await rig.start();

      const id = e.order.id;
      expect([(await rig.order(id)).status, (await rig.order(id)).claim?.fencingToken]).toEqual([WorkOrderStatus.RUNNING, e.token]);
      await agent.connect();
      const renewed = await agent.ask(LEASE_RENEWAL, id, e.token);
      expect(renewed).toMatchObject({ accepted: true });
      expect(renewed.workOrder?.claim?.fencingToken).toBe(e.token);
      await agent.clients.orders.renewWorkOrderLease({ id, fencingToken: e.token });
      const unary = await agent.clients.orders.reportWorkOrderResult({ id, fencingToken: e.token, result: OK });
      expect(unary.duplicate).toBe(false);
      expect(await agent.ask(RESULT, id, e.token)).toMatchObject({ accepted: true, duplicate: true });
      await endedOnce(rig, `${T}-t2`, agent.nodeId, e.order, [[e.token, "finished"]]);
      expect(await rig.count(id, "work_order_claim_released")).toBe(0);
      expect(agent.s!.received.some((m) => m.kind.case === "order")).toBe(false);
      await agent.close();
      await cleanAfterStop(rig, store);
    }, 120_000);

    it("session.after-result: the finish survives kill -9 and the agent's re-sent result is a duplicate; one end", async () => {
      rig = await CrashRig.create(store);
      const { ended } = await rig.start({ point: "session.after-result" });
      const agent = new ScriptedAgent(`${T}-n3`, await rig.node(`${T}-n3`));
      await agent.connect();
      await rig.tenant(`${T}-t3`, agent.nodeId);
      const e = await agent.pushed();
      expect(await agent.ask(ACK, e.order.id, e.token)).toMatchObject({ accepted: true });
      const lost = await agent.ask(RESULT, e.order.id, e.token).then(
        () => false,
        () => true,
      );
      expect(lost).toBe(true);
      expect(await ended).toMatchObject({ signal: "SIGKILL", point: "session.after-result" });
      await rig.start();

      // Durable before any re-send: the finish and its end event are there at start.
      expect((await rig.order(e.order.id)).status).toBe(WorkOrderStatus.SUCCESS);
      expect(await rig.count(e.order.id, "work_order_succeeded")).toBe(1);
      await agent.connect();
      expect(await agent.ask(RESULT, e.order.id, e.token)).toMatchObject({ accepted: true, duplicate: true });
      await endedOnce(rig, `${T}-t3`, agent.nodeId, e.order, [[e.token, "finished"]]);
      await agent.close();
      await cleanAfterStop(rig, store);
    }, 120_000);

    it("the agent's stream cut hard: unacked is released at once, acked is kept until its lease, a result is taken once", async () => {
      rig = await CrashRig.create(store);
      await rig.start({ leaseMs: SHORT_LEASE_MS });

      // Cut after the push, before the ack: released at once, pushed again with the next token.
      const a = new ScriptedAgent(`${T}-c1`, await rig.node(`${T}-c1`));
      await a.connect();
      await rig.tenant(`${T}-ct1`, a.nodeId);
      const p = await a.pushed();
      await a.kill();
      const back = await rig.orderWhen(p.order.id, "the unacked order released", leftToken(p.token));
      expect(back.attempts.map((x) => [x.fencingToken, x.outcome])).toContainEqual([p.token, "released"]);
      expect(await rig.count(p.order.id, "work_order_claim_released")).toBe(1);
      expect(await rig.count(p.order.id, "work_order_lease_expired")).toBe(0);
      await a.connect();
      const p2 = await a.pushed(p.order.id);
      expect(p2.token).toBe(p.token + 1n);
      expect(await a.ask(ACK, p.order.id, p2.token)).toMatchObject({ accepted: true });
      expect(await a.ask(RESULT, p.order.id, p2.token)).toMatchObject({ accepted: true, duplicate: false });
      await endedOnce(rig, `${T}-ct1`, a.nodeId, p.order, [
        [p.token, "released"],
        [p2.token, "finished"],
      ]);
      await a.close();

      // Cut after the ack: the claim is the agent's until its lease lapses (then the next token).
      const b = new ScriptedAgent(`${T}-c2`, await rig.node(`${T}-c2`));
      await b.connect();
      await rig.tenant(`${T}-ct2`, b.nodeId);
      const q = await b.pushed();
      expect(await b.ask(ACK, q.order.id, q.token)).toMatchObject({ accepted: true });
      await b.kill();
      await b.connect();
      const lapsed = await rig.orderWhen(q.order.id, "the acked order's lease to lapse", leftToken(q.token));
      const leaseUntil = q.order.claim!.leaseExpiresAt!;
      const endedAt = lapsed.attempts.find((x) => x.fencingToken === q.token)!.endedAt!;
      expect(endedAt.seconds * 1000n + BigInt(endedAt.nanos) / 1_000_000n).toBeGreaterThanOrEqual(
        leaseUntil.seconds * 1000n + BigInt(leaseUntil.nanos) / 1_000_000n,
      );
      expect(await rig.count(q.order.id, "work_order_claim_released")).toBe(0);
      expect(await rig.count(q.order.id, "work_order_lease_expired")).toBe(1);
      const q2 = await b.pushed(q.order.id);
      expect(q2.token).toBe(q.token + 1n);
      expect(await b.ask(ACK, q.order.id, q2.token)).toMatchObject({ accepted: true });
      expect(await b.ask(RESULT, q.order.id, q2.token)).toMatchObject({ accepted: true });
      await endedOnce(rig, `${T}-ct2`, b.nodeId, q.order, [
        [q.token, "lease_expired"],
        [q2.token, "finished"],
      ]);
      await b.close();

      // Cut right after sending the result (its answer unread): re-sent on a new session, taken once.
      const c = new ScriptedAgent(`${T}-c3`, await rig.node(`${T}-c3`));
      await c.connect();
      await rig.tenant(`${T}-ct3`, c.nodeId);
      const r = await c.pushed();
      expect(await c.ask(ACK, r.order.id, r.token)).toMatchObject({ accepted: true });
      void c.ask(RESULT, r.order.id, r.token).catch(() => undefined);
      await c.kill();
      await c.connect();
      expect(await c.ask(RESULT, r.order.id, r.token)).toMatchObject({ accepted: true });
      await endedOnce(rig, `${T}-ct3`, c.nodeId, r.order, [[r.token, "finished"]]);
      await c.close();
      await cleanAfterStop(rig, store);
    }, 180_000);
  });
}
