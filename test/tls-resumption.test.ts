// What one connection costs, against a real controller (HTTP/2 + TLS, file store): an agent's TLS
// session outlives a controller restart (controller/tls/session-tickets.ts; the agent's
// resumingConnector offers it), for a token and for a client certificate alike; and the HTTP/2
// settings sized for agents (controller/server/listener.ts) still carry admin work: a list of
// 1,000 resources, a request body near the largest limit.
import { stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import type tls from "node:tls";
import { create } from "@bufbuild/protobuf";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resumingConnector } from "../agent/controller-client.js";
import { newKeyRequest } from "../agent/identity.js";
import { DEFAULT_BODY_LIMITS } from "../controller/boundary/body-limits.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";

type Credential = { token: string } | { certPem: string; keyPem: string };

/**
 * An agent-like client of `tc`: Connect JSON over HTTP/2 through the agent's own connector
 * (shared across controllers, as an agent keeps it across reconnects), with the TLS sockets it
 * made kept for the test to look at.
 */
function agentClient(tc: TestController, connect: ReturnType<typeof resumingConnector>, credential: Credential) {
  const sockets: tls.TLSSocket[] = [];
  const bearer: Interceptor = (next) => (req) => {
    if ("token" in credential) req.header.set("authorization", `Bearer ${credential.token}`);
    return next(req);
  };
  const cert = "certPem" in credential ? { cert: credential.certPem, key: credential.keyPem } : {};
  const transport = createConnectTransport({
    baseUrl: `${tc.url}/v1`,
    httpVersion: "2",
    useBinaryFormat: false,
    interceptors: [bearer],
    nodeOptions: {
      ca: tc.ca,
      ...cert,
      createConnection: (authority: URL, options: object) => {
        const s = connect(authority, options) as tls.TLSSocket;
        sockets.push(s);
        return s;
      },
    },
  });
  return { nodes: createClient(NodeService, transport), sockets };
}

const beat = (nodeId: string) => ({ nodeId, agentVersion: "test", heartbeatIntervalMs: 10_000n });

describe("TLS session resumption across a controller restart", () => {
  const running: TestController[] = [];
  const start = async (dataDir?: string) => {
    const tc = await startController({ tls: true, dataDir });
    running.push(tc);
    return tc;
  };
  // Stops `tc` keeping its data directory, and starts a controller on it again.
  const restart = async (tc: TestController) => {
    await tc.stop({ keep: true });
    running.splice(running.indexOf(tc), 1);
    return start(tc.dataDir);
  };
  afterAll(async () => {
    for (const tc of running) await tc.stop();
  });

  it("an agent resumes its session with the restarted controller; without the stored ticket key it makes a full handshake", async () => {
    const first = await start();
    const { token } = await first.client(NodeService, { admin: true }).registerNode({ nodeId: "resume-token" });
    const connect = resumingConnector();
    const before = agentClient(first, connect, { token });
    await before.nodes.heartbeat(beat("resume-token"));
    expect(before.sockets.map((s) => s.isSessionReused())).toEqual([false]);
    const keyFile = join(first.dataDir, "tls", "ticket.key");
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600);

    const second = await restart(first);
    const after = agentClient(second, connect, { token });
    await after.nodes.heartbeat(beat("resume-token"));
    expect(after.sockets.map((s) => s.isSessionReused())).toEqual([true]);

    // The key is what carries the sessions over: a new one (the file gone) resumes none of them.
    await unlink(keyFile);
    const third = await restart(second);
    const fresh = agentClient(third, connect, { token });
    await fresh.nodes.heartbeat(beat("resume-token"));
    expect(fresh.sockets.map((s) => s.isSessionReused())).toEqual([false]);
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
  });

  it("an enrolled node's resumed session still carries its certificate: it is admitted as its node, by TLS alone", async () => {
    const first = await start();
    const { token: enrollmentToken } = await first.client(EnrollmentService, { admin: true }).createEnrollmentToken({});
    const request = await newKeyRequest("resume-cert");
    const enrolled = await first.client(EnrollmentService).enrollNode({ enrollmentToken, nodeId: "resume-cert", csrPem: request.csrPem });
    const credential = { certPem: enrolled.certificatePem, keyPem: request.keyPem };
    const connect = resumingConnector();
    await agentClient(first, connect, credential).nodes.heartbeat(beat("resume-cert"));

    const second = await restart(first);
    const after = agentClient(second, connect, credential);
    await after.nodes.heartbeat(beat("resume-cert"));
    expect(after.sockets.map((s) => s.isSessionReused())).toEqual([true]);
    // Admitted as resume-cert, not as any node: another node's heartbeat is refused.
    expect((await rpcError(after.nodes.heartbeat(beat("someone-else")))).code).toBe("FORBIDDEN");
  });
});

describe("admin calls under the agent-sized HTTP/2 settings", () => {
  let tc: TestController;
  beforeAll(async () => {
    tc = await startController({ tls: true });
  });
  afterAll(async () => {
    await tc?.stop();
  });

  it("a list of 1,000 resources comes back whole, over Connect and over gRPC", async () => {
    const api = tc.client(ResourceService, { admin: true });
    const ids = Array.from({ length: 1000 }, (_, i) => `limits-${String(i).padStart(4, "0")}`);
    for (let i = 0; i < ids.length; i += 50) {
      await Promise.all(
        ids.slice(i, i + 50).map((id) =>
          api.createResource({
            resourceType: "resource_limits",
            resource: create(ResourceSchema, {
              id,
              resourceType: "resource_limits",
              desiredState: { kind: { case: "resourceLimits", value: { cpus: 1, memoryBytes: 64n << 20n } } },
              metadata: { labels: { bench: "list", filler: "x".repeat(60) } },
            }),
          }),
        ),
      );
    }
    for (const grpc of [false, true]) {
      const listed = await tc
        .client(ResourceService, { admin: true, grpc })
        .listResources({ resourceType: "resource_limits", pageSize: 1000 });
      expect(listed.resources.map((r) => r.id)).toEqual(ids);
    }
  });

  it("a request body just under the largest limit is read whole; one just over it is refused by the limit", async () => {
    const api = tc.client(ResourceService, { admin: true });
    const max = DEFAULT_BODY_LIMITS.admitted.maxBytes;
    const tenant = (composeFile: string) =>
      api.createResource({
        resourceType: "tenant",
        resource: create(ResourceSchema, {
          id: "big-body",
          resourceType: "tenant",
          desiredState: { kind: { case: "tenant", value: { compose: { composeFile } } } },
        }),
      });
    // Read whole and decoded: the answer is about the compose file, which is over its own cap.
    const near = await rpcError(tenant(`# ${"x".repeat(max - 4096)}\nservices: {}\n`));
    expect([near.code, near.message]).toEqual(["INVALID_REQUEST", expect.stringContaining("larger than 512 KiB")]);
    const over = await rpcError(tenant(`# ${"x".repeat(max)}\nservices: {}\n`));
    expect([over.code, over.details.field, over.details.limit]).toEqual(["INVALID_REQUEST", "body", max]);
  });
});
