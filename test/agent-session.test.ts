// The agent's Session stream (issue 38, the controller's side) against a real controller over
// HTTP/2 + TLS, with the node's token: hello and welcome, orders pushed already claimed, acks,
// results answered on the stream (an order ends once, a stale token is refused and the stream
// stays open), a session cut before its ack releasing the order at once, and a second session of
// the node replacing the first. Every wait is for a message or a state observed.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { NodeService, SessionAnswerSubject, SessionNoticeKind, type SessionResponse } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { ApiErrorSchema } from "../gen/skipper/v1/envelope_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { openSession, type TestSession } from "./helpers/session-client.js";

let tc: TestController;
let orders: ReturnType<typeof tc.client<typeof WorkOrderService>>;
const tokens: Record<string, string> = {};

beforeAll(async () => {
  tc = await startController();
  // One client (one connection) for the admin's calls, polls included.
  orders = tc.client(WorkOrderService, { admin: true });
  for (const nodeId of ["s-flow", "s-stale", "s-cut", "s-twice", "s-cancel", "s-refused", "s-grpc", "s-window", "s-json", "s-gzip"]) {
    tokens[nodeId] = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId })).token;
  }
});
afterAll(async () => {
  await tc?.stop();
});

type Wire = "connect" | "grpc" | "json" | "gzip";
const nodeClient = (nodeId: string, wire: Wire = "connect") =>
  tc.client(NodeService, {
    token: tokens[nodeId],
    grpc: wire === "grpc",
    ...(wire === "json" || wire === "gzip" ? { connect: wire } : {}),
  });
const admin = () => orders;

/** Opens a session of `nodeId` and waits for its welcome. */
async function hello(nodeId: string, wire: Wire = "connect"): Promise<TestSession> {
  const s = openSession(nodeClient(nodeId, wire));
  s.send({ case: "hello", value: { nodeId, agentVersion: "test", journalWorkOrderIds: [] } });
  await s.next("the welcome", (m) => (m.kind.case === "welcome" ? m.kind.value : undefined));
  return s;
}

/** Queues an ad-hoc inspect for `nodeId` (as an admin). */
async function inspectFor(nodeId: string): Promise<WorkOrder> {
  const res = await admin().createWorkOrder({
    type: WorkOrderType.INSPECT,
    target: { nodeId },
    action: { kind: { case: "inspect", value: {} } },
  });
  return res.workOrder!;
}

const pushed = (id: string) => (m: SessionResponse) =>
  m.kind.case === "order" && m.kind.value.workOrder?.id === id ? m.kind.value.workOrder : undefined;
const answer = (subject: SessionAnswerSubject, id: string) => (m: SessionResponse) =>
  m.kind.case === "answer" && m.kind.value.subject === subject && m.kind.value.workOrderId === id ? m.kind.value : undefined;
const eventsOf = async (id: string, type: string) =>
  (await tc.client(EventService, { admin: true }).listEvents({ workOrderId: id, type })).events.length;
const apiCode = (e: unknown) => ConnectError.from(e).findDetails(ApiErrorSchema)[0]?.code;

describe("an agent's session", () => {
  it("is welcomed with its terms, gets an order pushed already claimed, and its ack and result are answered; the order ends once", async () => {
    const s = openSession(nodeClient("s-flow"));
    s.send({ case: "hello", value: { nodeId: "s-flow", agentVersion: "test" } });
    const welcome = await s.next("the welcome", (m) => (m.kind.case === "welcome" ? m.kind.value : undefined));
    expect(welcome.sessionId).not.toBe("");
    expect(welcome.leaseMs).toBe(30_000n);
    expect(welcome.maxInFlight).toBe(1);
    expect(welcome.heartbeatIntervalMs).toBeGreaterThan(0n);

    const order = await inspectFor("s-flow");
    const got = await s.next("the order pushed", pushed(order.id));
    expect(got.status).toBe(WorkOrderStatus.RUNNING);
    expect(got.claim?.nodeId).toBe("s-flow");
    expect(got.claim?.fencingToken).toBe(1n);
    expect(timestampDate(got.claim!.leaseExpiresAt!).getTime()).toBeGreaterThan(Date.now());
    expect((await admin().getWorkOrder({ id: order.id })).workOrder?.status).toBe(WorkOrderStatus.RUNNING);

    s.send({ case: "ack", value: { workOrderId: order.id, fencingToken: 1n } });
    const acked = await s.next("the ack answered", answer(SessionAnswerSubject.ACK, order.id));
    expect(acked).toMatchObject({ accepted: true, fencingToken: 1n });

    // A full heartbeat and a keepalive are taken without an answer (answers come only for refusals).
    s.send({ case: "heartbeat", value: { report: { agentVersion: "test", heartbeatIntervalMs: 10_000n } } });
    s.send({ case: "heartbeat", value: {} });
    const result = { success: true, code: "INSPECT_OK", message: "fine" };
    s.send({ case: "result", value: { workOrderId: order.id, fencingToken: 1n, result } });
    const done = await s.next("the result answered", answer(SessionAnswerSubject.RESULT, order.id));
    expect(done).toMatchObject({ accepted: true, duplicate: false, fencingToken: 1n });
    expect(done.workOrder?.status).toBe(WorkOrderStatus.SUCCESS);
    expect(s.received.some((m) => m.kind.case === "answer" && m.kind.value.subject === SessionAnswerSubject.HEARTBEAT)).toBe(false);
    const node = await tc.controller.store.getResource("node", "s-flow");
    expect(node?.currentState?.kind.case === "node" && node.currentState.kind.value.agentVersion).toBe("test");

    // The same result again (its answer lost, say): a duplicate, and nothing is written twice.
    const before = s.received.length;
    s.send({ case: "result", value: { workOrderId: order.id, fencingToken: 1n, result } });
    const again = await s.next("the repeated result answered", answer(SessionAnswerSubject.RESULT, order.id), before);
    expect(again).toMatchObject({ accepted: true, duplicate: true });
    expect(await eventsOf(order.id, "work_order_succeeded")).toBe(1);
    expect(await eventsOf(order.id, "work_order_started")).toBe(1);
    s.close();
    expect(await s.ended()).toBeUndefined();
  });

  it("refuses a result with a stale token in its answer and stays open; the current token's result is then taken", async () => {
    const s = await hello("s-stale");
    const order = await inspectFor("s-stale");
    const got = await s.next("the order pushed", pushed(order.id));
    const token = got.claim!.fencingToken;
    s.send({ case: "ack", value: { workOrderId: order.id, fencingToken: token } });
    await s.next("the ack answered", answer(SessionAnswerSubject.ACK, order.id));

    const result = { success: true, code: "INSPECT_OK" };
    let from = s.received.length;
    s.send({ case: "result", value: { workOrderId: order.id, fencingToken: token + 5n, result } });
    const refused = await s.next("the stale result refused", answer(SessionAnswerSubject.RESULT, order.id), from);
    expect(refused).toMatchObject({ accepted: false, code: "WORK_ORDER_NOT_CLAIMABLE", fencingToken: token + 5n });
    expect((await admin().getWorkOrder({ id: order.id })).workOrder?.status).toBe(WorkOrderStatus.RUNNING);

    // A malformed result and another node's order are refused the same way.
    from = s.received.length;
    s.send({ case: "result", value: { workOrderId: order.id, fencingToken: token, result: { success: true, code: "lower case" } } });
    expect(await s.next("the bad code refused", answer(SessionAnswerSubject.RESULT, order.id), from)).toMatchObject({
      accepted: false,
      code: "INVALID_REQUEST",
    });
    const other = await inspectFor("s-refused");
    s.send({ case: "leaseRenewal", value: { workOrderId: other.id, fencingToken: 1n } });
    expect(await s.next("another node's order refused", answer(SessionAnswerSubject.LEASE_RENEWAL, other.id))).toMatchObject({
      accepted: false,
      code: "FORBIDDEN",
    });

    // Still open: a renewal and the right result go through.
    s.send({ case: "leaseRenewal", value: { workOrderId: order.id, fencingToken: token } });
    const renewed = await s.next("the renewal answered", answer(SessionAnswerSubject.LEASE_RENEWAL, order.id));
    expect(renewed.accepted).toBe(true);
    from = s.received.length;
    s.send({ case: "result", value: { workOrderId: order.id, fencingToken: token, result } });
    expect(await s.next("the result answered", answer(SessionAnswerSubject.RESULT, order.id), from)).toMatchObject({
      accepted: true,
      duplicate: false,
    });
    expect(await eventsOf(order.id, "work_order_succeeded")).toBe(1);
    s.close();
    await s.ended();
    // The other node's order was never touched.
    expect((await admin().getWorkOrder({ id: other.id })).workOrder?.status).toBe(WorkOrderStatus.PENDING);
  });

  it("cut after a push and before the ack: the order is pending again at once and the next session gets it with a new token", async () => {
    const first = await hello("s-cut");
    const order = await inspectFor("s-cut");
    const got = await first.next("the order pushed", pushed(order.id));
    expect(got.claim?.fencingToken).toBe(1n);
    const cutAt = Date.now();
    first.abort();
    await first.ended();

    // Pending again well before its 30 s lease could lapse: released, not expired.
    let back: WorkOrder | undefined;
    while (!back) {
      const o = (await admin().getWorkOrder({ id: order.id })).workOrder!;
      if (o.status === WorkOrderStatus.PENDING) back = o;
      else {
        expect(Date.now() - cutAt).toBeLessThan(20_000);
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    expect(back.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([[1n, "released"]]);
    expect(await eventsOf(order.id, "work_order_claim_released")).toBe(1);
    expect(await eventsOf(order.id, "work_order_lease_expired")).toBe(0);

    const second = await hello("s-cut");
    const again = await second.next("the order pushed again", pushed(order.id));
    expect(again.claim?.fencingToken).toBe(2n);
    // The first push's token is stale now.
    second.send({ case: "ack", value: { workOrderId: order.id, fencingToken: 1n } });
    expect(await second.next("the stale ack refused", answer(SessionAnswerSubject.ACK, order.id))).toMatchObject({
      accepted: false,
      code: "WORK_ORDER_NOT_CLAIMABLE",
    });
    const from = second.received.length;
    second.send({ case: "ack", value: { workOrderId: order.id, fencingToken: 2n } });
    expect((await second.next("the ack answered", answer(SessionAnswerSubject.ACK, order.id), from)).accepted).toBe(true);

    // Acknowledged, the claim is the agent's: a cut now leaves it running under its lease.
    second.abort();
    await second.ended();
    const third = await hello("s-cut");
    third.send({ case: "result", value: { workOrderId: order.id, fencingToken: 2n, result: { success: true, code: "INSPECT_OK" } } });
    expect(await third.next("the result answered", answer(SessionAnswerSubject.RESULT, order.id))).toMatchObject({
      accepted: true,
      duplicate: false,
    });
    const ended = (await admin().getWorkOrder({ id: order.id })).workOrder!;
    expect(ended.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([
      [1n, "released"],
      [2n, "finished"],
    ]);
    expect(await eventsOf(order.id, "work_order_succeeded")).toBe(1);
    third.close();
    await third.ended();
  });

  it("a second session of the same node ends the first, which is told so; the first's unacknowledged push goes to the second", async () => {
    const first = await hello("s-twice");
    const order = await inspectFor("s-twice");
    await first.next("the order pushed", pushed(order.id));
    const second = openSession(nodeClient("s-twice"));
    second.send({ case: "hello", value: { nodeId: "s-twice", agentVersion: "test" } });
    await second.next("the second welcome", (m) => (m.kind.case === "welcome" ? m.kind.value : undefined));
    const notice = await first.next("the replaced notice", (m) => (m.kind.case === "notice" ? m.kind.value : undefined));
    expect(notice.kind).toBe(SessionNoticeKind.REPLACED);
    expect(await first.ended()).toBeUndefined();
    const again = await second.next("the order pushed to the second", pushed(order.id));
    expect(again.claim?.fencingToken).toBe(2n);
    second.close();
    await second.ended();

    // Sessions replaced or cut give back what they held: more of them, one after another, than a
    // node may hold feed subscriptions at once (4) are each welcomed.
    for (let i = 0; i < 6; i++) {
      const s = await hello("s-twice");
      if (i % 2 === 0) s.abort();
      else s.close();
      await s.ended();
    }
    const last = await hello("s-twice");
    last.close();
    expect(await last.ended()).toBeUndefined();
  });

  it("has one order in flight at a time: the next is claimed and pushed only once the first one's result is answered", async () => {
    const first = await inspectFor("s-window");
    const second = await inspectFor("s-window");
    const s = await hello("s-window");
    const got = await s.next("the first order pushed", pushed(first.id));
    const token = got.claim!.fencingToken;
    s.send({ case: "ack", value: { workOrderId: first.id, fencingToken: token } });
    await s.next("the ack answered", answer(SessionAnswerSubject.ACK, first.id));
    // Acknowledged and running, renewed, and a malformed result refused: the claim is still the
    // agent's, so the second order waits (pending) instead of being claimed while its lease ticks.
    s.send({ case: "leaseRenewal", value: { workOrderId: first.id, fencingToken: token } });
    await s.next("the renewal answered", answer(SessionAnswerSubject.LEASE_RENEWAL, first.id));
    let from = s.received.length;
    s.send({ case: "result", value: { workOrderId: first.id, fencingToken: token, result: { success: true, code: "bad code" } } });
    expect(await s.next("the bad result refused", answer(SessionAnswerSubject.RESULT, first.id), from)).toMatchObject({ accepted: false });
    expect((await admin().getWorkOrder({ id: second.id })).workOrder?.status).toBe(WorkOrderStatus.PENDING);
    expect(s.received.some(pushed(second.id))).toBe(false);

    from = s.received.length;
    s.send({ case: "result", value: { workOrderId: first.id, fencingToken: token, result: { success: true, code: "INSPECT_OK" } } });
    await s.next("the result answered", answer(SessionAnswerSubject.RESULT, first.id), from);
    const next = await s.next("the second order pushed", pushed(second.id));
    expect(next.status).toBe(WorkOrderStatus.RUNNING);
    s.close();
    await s.ended();
  });

  it("hears a cancel of an order it runs as a cancel message", async () => {
    const s = await hello("s-cancel");
    const order = await inspectFor("s-cancel");
    const got = await s.next("the order pushed", pushed(order.id));
    s.send({ case: "ack", value: { workOrderId: order.id, fencingToken: got.claim!.fencingToken } });
    await s.next("the ack answered", answer(SessionAnswerSubject.ACK, order.id));
    await admin().cancelWorkOrder({ id: order.id, reason: "not needed" });
    const cancel = await s.next("the cancel", (m) => (m.kind.case === "cancel" ? m.kind.value : undefined));
    expect(cancel).toMatchObject({ workOrderId: order.id, fencingToken: got.claim!.fencingToken, reason: "not needed" });
    s.close();
    await s.ended();
  });

  it("is refused when its hello names another node or does not come first", async () => {
    const other = openSession(nodeClient("s-refused"));
    other.send({ case: "hello", value: { nodeId: "s-flow" } });
    const e1 = await other.ended();
    expect(ConnectError.from(e1).code).toBe(Code.PermissionDenied);
    expect(apiCode(e1)).toBe("FORBIDDEN");

    const noHello = openSession(nodeClient("s-refused"));
    noHello.send({ case: "heartbeat", value: {} });
    expect(apiCode(await noHello.ended())).toBe("INVALID_REQUEST");

    const twice = await hello("s-refused");
    twice.send({ case: "hello", value: { nodeId: "s-refused" } });
    expect(apiCode(await twice.ended())).toBe("INVALID_REQUEST");
  });

  it("answers a heartbeat or state report only to refuse it, and stays open", async () => {
    const s = await hello("s-refused");
    s.send({ case: "heartbeat", value: { report: { nodeId: "s-flow", agentVersion: "test" } } });
    const beat = await s.next("the heartbeat refused", answer(SessionAnswerSubject.HEARTBEAT, ""));
    expect(beat).toMatchObject({ accepted: false, code: "FORBIDDEN" });
    s.send({ case: "stateReport", value: { workOrderId: "no-such-order", reports: [] } });
    const report = await s.next("the state report refused", answer(SessionAnswerSubject.STATE_REPORT, "no-such-order"));
    expect(report).toMatchObject({ accepted: false, code: "RESOURCE_NOT_FOUND" });
    // Still open: a good beat is taken (and not answered), and a renewal of nothing is answered.
    s.send({ case: "heartbeat", value: { report: { agentVersion: "still-here", heartbeatIntervalMs: 10_000n } } });
    s.send({ case: "leaseRenewal", value: { workOrderId: "no-such-order", fencingToken: 1n } });
    await s.next("the renewal answered", answer(SessionAnswerSubject.LEASE_RENEWAL, "no-such-order"));
    const node = await tc.controller.store.getResource("node", "s-refused");
    expect(node?.currentState?.kind.case === "node" && node.currentState.kind.value.agentVersion).toBe("still-here");
    expect(s.received.filter((m) => m.kind.case === "answer" && m.kind.value.subject === SessionAnswerSubject.HEARTBEAT)).toHaveLength(1);
    s.close();
    expect(await s.ended()).toBeUndefined();
  });

  // gRPC and Connect JSON (skippy's wire) are served by the controller's own Session route; a
  // compressed stream goes through the Connect router. A client cannot tell them apart: the same
  // messages, and a refusal with the same code, ApiError detail and request id.
  it.each([
    ["gRPC", "s-grpc", "grpc"],
    ["Connect JSON", "s-json", "json"],
    ["gzip-compressed Connect (the router's path)", "s-gzip", "gzip"],
  ] as const)("works over %s, and ends a refused session with the error's code, detail and request id", async (_, nodeId, wire) => {
    const s = await hello(nodeId, wire);
    const order = await inspectFor(nodeId);
    const got = await s.next("the order pushed", pushed(order.id));
    s.send({
      case: "result",
      value: { workOrderId: order.id, fencingToken: got.claim!.fencingToken, result: { success: true, code: "INSPECT_OK" } },
    });
    expect(await s.next("the result answered", answer(SessionAnswerSubject.RESULT, order.id))).toMatchObject({ accepted: true });
    // A second hello ends the session with INVALID_REQUEST.
    s.send({ case: "hello", value: { nodeId, agentVersion: "test" } });
    const err = ConnectError.from(await s.ended());
    expect(err.code).toBe(Code.InvalidArgument);
    expect(apiCode(err)).toBe("INVALID_REQUEST");
    expect(err.rawMessage).toContain("one hello");
    // In the response headers and again with the error (the client joins them).
    expect(err.metadata.get("x-request-id")).toMatch(/^[0-9a-f-]{36}(, [0-9a-f-]{36})?$/);
  });
});
