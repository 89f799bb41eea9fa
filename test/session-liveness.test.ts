// Liveness from the session (issue 38, point 6) against a real controller over HTTP/2 + TLS: a
// node on a session is online while the session is open, however long its agent stays quiet; a
// session that ends takes its node offline within 15 s; a peer that vanished without a word (a
// network path that dropped, left by a TCP proxy that freezes) is found by the controller's HTTP/2 pings.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { NodeLiveness, NodeTransport } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { openSession, type TestSession } from "./helpers/session-client.js";
import { startLingeringProxy, type LingeringProxy } from "./helpers/lingering-proxy.js";
import { waitFor } from "./helpers/processes.js";

let tc: TestController;
let proxy: LingeringProxy;

beforeAll(async () => {
  // Pings every 300 ms (unanswered for 300 ms: closed); liveness looked at every 100 ms.
  tc = await startController({ limits: { pingIntervalMs: 300 }, livenessCheckMs: 100 });
  proxy = await startLingeringProxy({ host: "127.0.0.1", port: tc.serving.port });
});
afterAll(async () => {
  await proxy?.close();
  await tc?.stop();
});

const nodeOf = async (nodeId: string) => {
  const r = (await tc.client(ResourceService, { admin: true }).getResource({ resourceType: "node", id: nodeId })).resource;
  return r?.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined;
};
const liveness = (nodeId: string, want: NodeLiveness) => async () => ((await nodeOf(nodeId))?.liveness === want ? true : undefined);
const lastLivenessEvent = async (nodeId: string, type: string) =>
  (await tc.client(EventService, { admin: true }).listEvents({ type, resourceId: nodeId, newestFirst: true, pageSize: 1 })).events[0];

/** A session of `nodeId` that has said hello and sent its full report (the node is online, on a session). */
async function sessionOf(nodeId: string, session: TestSession): Promise<TestSession> {
  session.send({ case: "hello", value: { nodeId, agentVersion: "test", journalWorkOrderIds: [] } });
  const welcome = await session.next("the welcome", (m) => (m.kind.case === "welcome" ? m.kind.value : undefined));
  session.send({
    case: "heartbeat",
    value: { report: { nodeId, agentVersion: "test", heartbeatIntervalMs: welcome.heartbeatIntervalMs } },
  });
  await waitFor(`${nodeId} online`, liveness(nodeId, NodeLiveness.ONLINE), 10_000);
  return session;
}

async function register(nodeId: string): Promise<string> {
  return (await tc.client(NodeService, { admin: true }).registerNode({ nodeId })).token;
}

describe("liveness from the session", () => {
  it("keeps a quiet node on a session online, and takes it offline within 15 s of the session's end", async () => {
    const token = await register("live-quiet");
    const s = await sessionOf("live-quiet", openSession(tc.client(NodeService, { token }), 60_000));
    const node = await nodeOf("live-quiet");
    expect(node?.transport).toBe(NodeTransport.SESSION);
    // The welcome's interval is at least 10 s: a unary agent judged by it would still be online
    // here too, so what this shows is the end: a closed session takes the node offline in seconds.
    const closedAt = Date.now();
    s.close();
    await waitFor("live-quiet offline", liveness("live-quiet", NodeLiveness.OFFLINE), 30_000);
    const took = Date.now() - closedAt;
    expect(took).toBeLessThan(20_000);
    expect((await lastLivenessEvent("live-quiet", "node_offline"))?.data?.cause).toBe("session_ended");
    expect((await lastLivenessEvent("live-quiet", "node_degraded"))?.data?.cause).toBe("session_ended");
    console.log(`node offline ${took} ms after its session closed`);
  }, 60_000);

  it("finds a peer that vanished behind a half-open connection by its unanswered ping, and takes its node offline", async () => {
    const token = await register("live-vanished");
    const auth: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    };
    const baseUrl = `https://127.0.0.1:${proxy.port}/v1`;
    const manager = new Http2SessionManager(baseUrl, {}, { ca: tc.ca });
    const client = createClient(
      NodeService,
      createConnectTransport({ baseUrl, httpVersion: "2", nodeOptions: { ca: tc.ca }, sessionManager: manager, interceptors: [auth] }),
    );
    await sessionOf("live-vanished", openSession(client, 60_000));
    // The network path drops: nothing passes either way, and neither side hears of it.
    expect(proxy.freeze()).toBe(1);
    await waitFor("live-vanished offline", liveness("live-vanished", NodeLiveness.OFFLINE), 30_000);
    // The controller ended the session itself (nothing reached it from the proxy's side).
    expect((await lastLivenessEvent("live-vanished", "node_offline"))?.data?.cause).toBe("session_ended");
    manager.abort();
  }, 60_000);
});
