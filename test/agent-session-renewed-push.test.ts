// A pushed order that its agent renewed before the session heard its ack is the agent's: when that
// session ends (a skippy that lost the stream before the ack's answer settles the ack's fate by a
// unary renewal, or a restarted skippy, while the controller still holds the old session
// half-open), the controller must not release the claim and push the order again (its command
// would run twice). A real controller over HTTP/2 + TLS; the test plays the agent.
import { afterAll, beforeAll, expect, it } from "vitest";
import { NodeService, type SessionResponse } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { openSession } from "./helpers/session-client.js";
import { rawRequest } from "./helpers/https.js";
import { waitFor, type ControllerProcess } from "./helpers/processes.js";

let tc: TestController;
let token = "";
const nodeId = "renewed-push";

beforeAll(async () => {
  tc = await startController({ metricsOpen: true });
  token = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId })).token;
});
afterAll(async () => {
  await tc?.stop();
});

const pushedOf = (m: SessionResponse) => (m.kind.case === "order" ? m.kind.value.workOrder : undefined);

it("a session that ends with a push unacknowledged but renewed elsewhere leaves the claim with its agent", async () => {
  const s = openSession(tc.client(NodeService, { token }), 30_000);
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
  // No ack on the session: the agent renews over the unary call instead (another connection).
  const renewed = await tc
    .client(WorkOrderService, { token })
    .renewWorkOrderLease({ id: pushed.id, fencingToken: pushed.claim!.fencingToken });
  expect(renewed.workOrder?.claim?.fencingToken).toBe(pushed.claim!.fencingToken);
  // The old session goes; the controller releases what it holds unacknowledged, unless renewed.
  s.abort();
  const metrics = async () => (await rawRequest({ url: tc.url, ca: tc.ca ?? "" } as ControllerProcess, "GET", "/metrics")).body;
  const settled = await waitFor("the controller to settle the session's push", async () => {
    const m = await metrics();
    return /skipper_agent_session_events_total\{event="(kept|released)"\} 1/.test(m) ? m : undefined;
  });
  expect(settled).toMatch(/skipper_agent_session_events_total\{event="kept"\} 1/);
  const after = (await admin.getWorkOrder({ id: pushed.id })).workOrder!;
  expect(after.status).toBe(WorkOrderStatus.RUNNING);
  expect(after.claim?.fencingToken).toBe(pushed.claim!.fencingToken);
  expect(after.attempts.map((a) => a.outcome)).toEqual(["running"]);
  // And its result, under the pushed token, ends it once.
  const done = await tc.client(WorkOrderService, { token }).reportWorkOrderResult({
    id: pushed.id,
    fencingToken: pushed.claim!.fencingToken,
    result: { success: true, code: "INSPECT_OK" },
  });
  expect(done.workOrder?.status).toBe(WorkOrderStatus.SUCCESS);
});
