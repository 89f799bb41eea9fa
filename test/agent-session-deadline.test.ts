// An agent's Session stream outlives the listener's request-body deadline (requestBodyMs), which
// ends any other request whose body has not ended: a session's request ends when the agent is
// done. Shown with a short deadline on a real controller over HTTP/2 + TLS, by order of what is
// observed (no fixed delay): a session opens; a unary call whose body never ends is cut by the
// deadline; the session, older than that call, is still answered afterwards.
import http2 from "node:http2";
import { afterAll, beforeAll, expect, it } from "vitest";
import { NodeService, SessionAnswerSubject, type SessionResponse } from "../gen/skipper/v1/node_service_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { openSession } from "./helpers/session-client.js";
import { isStreamedRequest } from "../controller/server/listener.js";

let tc: TestController;
let token: string;

beforeAll(async () => {
  tc = await startController({ limits: { requestBodyMs: 400 } });
  token = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "s-long" })).token;
});
afterAll(async () => {
  await tc?.stop();
});

it("names the RPCs whose request is a stream, under any path prefix, and no other", () => {
  expect(isStreamedRequest("/v1/skipper.v1.NodeService/Session")).toBe(true);
  expect(isStreamedRequest("/skipper.v1.NodeService/Session?x=1")).toBe(true);
  expect(isStreamedRequest("/v1/skipper.v1.NodeService/WatchWorkOrders")).toBe(false);
  expect(isStreamedRequest("/v1/skipper.v1.NodeService/Heartbeat")).toBe(false);
  expect(isStreamedRequest("/Session")).toBe(false);
  expect(isStreamedRequest(undefined)).toBe(false);
});

it("a session is not cut by the request-body deadline that cuts a unary call whose body never ends", async () => {
  const s = openSession(tc.client(NodeService, { token }));
  s.send({ case: "hello", value: { nodeId: "s-long", agentVersion: "test", journalWorkOrderIds: [] } });
  await s.next("the welcome", (m: SessionResponse) => (m.kind.case === "welcome" ? m.kind.value : undefined));

  // A unary call that sends part of a body and never ends it: the deadline closes its stream.
  const conn = http2.connect(tc.url, tc.ca ? { ca: tc.ca } : {});
  const stalled = conn.request({
    ":method": "POST",
    ":path": "/v1/skipper.v1.HealthService/Check",
    "content-type": "application/json",
  });
  stalled.write("{");
  const code = await new Promise<number>((resolve) => stalled.on("close", () => resolve(stalled.rstCode ?? -1)));
  expect(code).toBe(http2.constants.NGHTTP2_CANCEL);
  conn.close();

  // The session, opened before that call, is answered after it was cut.
  s.send({ case: "leaseRenewal", value: { workOrderId: "no-such-order", fencingToken: 1n } });
  const answered = await s.next("the renewal answered", (m: SessionResponse) =>
    m.kind.case === "answer" && m.kind.value.subject === SessionAnswerSubject.LEASE_RENEWAL ? m.kind.value : undefined,
  );
  expect(answered.workOrderId).toBe("no-such-order");
  s.close();
  expect(await s.ended()).toBeUndefined();
});
