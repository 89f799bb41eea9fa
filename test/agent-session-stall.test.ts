// A session whose agent stops answering (a frozen process, a half-open connection) is ended when
// the lease of an order pushed on it lapses, instead of being pushed the order again (each push
// would lapse too, an attempt each time). A real controller over HTTP/2 + TLS with a short lease;
// the test plays an agent that acks (or not) and then falls silent.
import { afterAll, beforeAll, expect, it } from "vitest";
import { NodeService, SessionAnswerSubject, type SessionResponse } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { openSession } from "./helpers/session-client.js";
import { rawRequest } from "./helpers/https.js";
import type { ControllerProcess } from "./helpers/processes.js";

let tc: TestController;
const tokens: Record<string, string> = {};

beforeAll(async () => {
  tc = await startController({ leaseMs: 1500, metricsOpen: true });
  for (const nodeId of ["stall-acked", "stall-unacked"])
    tokens[nodeId] = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId })).token;
});
afterAll(async () => {
  await tc?.stop();
});

const pushedOf = (m: SessionResponse) => (m.kind.case === "order" ? m.kind.value.workOrder : undefined);

for (const acked of [true, false]) {
  it(`ends a session whose ${acked ? "acknowledged" : "unacknowledged"} order's lease lapsed, and does not push that order to it again`, async () => {
    const nodeId = acked ? "stall-acked" : "stall-unacked";
    const s = openSession(tc.client(NodeService, { token: tokens[nodeId] }), 30_000);
    s.send({ case: "hello", value: { nodeId, agentVersion: "test" } });
    await s.next("the welcome", (m) => (m.kind.case === "welcome" ? m.kind.value : undefined));
    const admin = tc.client(WorkOrderService, { admin: true });
    const { workOrder } = await admin.createWorkOrder({
      type: WorkOrderType.INSPECT,
      target: { nodeId },
      action: { kind: { case: "inspect", value: {} } },
    });
    const pushed = await s.next("the order pushed", pushedOf);
    expect(pushed.id).toBe(workOrder!.id);
    if (acked) {
      s.send({ case: "ack", value: { workOrderId: pushed.id, fencingToken: pushed.claim!.fencingToken } });
      await s.next("the ack answered", (m) =>
        m.kind.case === "answer" && m.kind.value.subject === SessionAnswerSubject.ACK ? m : undefined,
      );
    }
    // Silent from here: no renewal, no keepalive. The lease lapses, and the session ends.
    expect(await s.ended()).toBeUndefined();
    const after = (await admin.getWorkOrder({ id: pushed.id })).workOrder!;
    expect(after.status).not.toBe(WorkOrderStatus.RUNNING);
    expect(after.attempts.map((a) => a.outcome)).toEqual(["lease_expired"]);
    expect(s.received.filter(pushedOf).length).toBe(1);
    const metrics = await rawRequest({ url: tc.url, ca: tc.ca ?? "" } as ControllerProcess, "GET", "/metrics");
    expect(metrics.body).toMatch(/skipper_agent_session_events_total\{event="ended_stalled"\} [1-9]/);
  });
}
