// The front door: a call that is not admitted is refused from its headers, in its own protocol,
// while its body is still unfinished, so an unauthenticated client cannot make the controller hold
// a large message. Each request here announces 4 MiB, sends 1 KiB and never finishes its body;
// the answer must come anyway (there is nothing else that could end the exchange).
import https from "node:https";
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { HealthService } from "../gen/skipper/v1/health_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { ApiErrorSchema } from "../gen/skipper/v1/envelope_pb.js";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";

const ANNOUNCED = 4 * 1024 * 1024;
const SENT = Buffer.alloc(1024, 0x61);

let tc: TestController;
let nodeToken = "";

beforeAll(async () => {
  tc = await startController();
  nodeToken = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "door-1" })).token;
});
afterAll(async () => {
  await tc?.stop();
});

interface Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
  /** The stream's reset code when it closed (the body was never finished, so only the server ended it). */
  rstCode: number | undefined;
}

/** Sends headers and the start of a body over HTTP/2, never ends it, and collects the answer. */
function h2Stalled(path: string, headers: Record<string, string>, prefix: Buffer): Promise<Answer> {
  return h2Exchange(path, headers, (stream) => {
    stream.write(prefix);
    stream.write(SENT);
  });
}

/** Sends a whole request over HTTP/2 and collects the answer. */
function h2Complete(path: string, headers: Record<string, string>, body: Buffer): Promise<Answer> {
  return h2Exchange(path, headers, (stream) => stream.end(body));
}

/** Opens a POST stream, lets `send` write to it, and collects the answer (trailers as headers). */
function h2Exchange(path: string, headers: Record<string, string>, send: (stream: http2.ClientHttp2Stream) => void): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(tc.url, { ca: tc.ca });
    session.on("error", reject);
    const stream = session.request({ ":method": "POST", ":path": path, ...headers });
    let status = 0;
    let responseHeaders: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on("response", (h) => {
      status = Number(h[":status"]);
      responseHeaders = h;
    });
    stream.on("trailers", (t) => {
      responseHeaders = { ...responseHeaders, ...t };
    });
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("error", () => undefined);
    stream.on("close", () => {
      session.close();
      resolve({ status, headers: responseHeaders, body: Buffer.concat(chunks), rstCode: stream.rstCode });
    });
    send(stream);
  });
}

/** A gRPC length prefix that announces a message of `n` bytes. */
function grpcPrefix(n: number): Buffer {
  const b = Buffer.alloc(5);
  b.writeUInt32BE(n, 1);
  return b;
}

describe("calls that are not admitted are refused before their body is read", () => {
  it("gRPC without a credential: UNAUTHENTICATED with the ApiError detail, stream closed", async () => {
    const a = await h2Stalled("/skipper.v1.ResourceService/ListResources", { "content-type": "application/grpc" }, grpcPrefix(ANNOUNCED));
    expect(a.status).toBe(200);
    expect(a.headers["grpc-status"]).toBe("16");
    const trailer = new Headers();
    for (const [k, v] of Object.entries(a.headers)) if (!k.startsWith(":") && typeof v === "string") trailer.set(k, v);
    expect(findTrailerError(trailer)?.findDetails(ApiErrorSchema)[0]?.code).toBe("UNAUTHORIZED");
    // The server told the client to stop sending: RST_STREAM with NO_ERROR after the answer.
    expect(a.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
  });

  it("gRPC with a node token on an admin call: PERMISSION_DENIED", async () => {
    const a = await h2Stalled(
      "/skipper.v1.ResourceService/CreateResource",
      { "content-type": "application/grpc", authorization: `Bearer ${nodeToken}` },
      grpcPrefix(ANNOUNCED),
    );
    expect(a.headers["grpc-status"]).toBe("7");
  });

  it("gRPC-Web without a credential: the status in the headers", async () => {
    const a = await h2Stalled(
      "/v1/skipper.v1.EventService/ListEvents",
      { "content-type": "application/grpc-web+proto" },
      grpcPrefix(ANNOUNCED),
    );
    expect(a.status).toBe(200);
    expect(a.headers["grpc-status"]).toBe("16");
  });

  it("Connect unary JSON with a wrong token: HTTP 401 and a Connect error body", async () => {
    const a = await h2Stalled(
      "/v1/skipper.v1.ResourceService/CreateResource",
      { "content-type": "application/json", "content-length": String(ANNOUNCED), "x-admin-token": "wrong" },
      Buffer.from("{"),
    );
    expect(a.status).toBe(401);
    const body = JSON.parse(a.body.toString("utf8")) as { code: string; details: unknown[] };
    expect(body.code).toBe("unauthenticated");
    expect(body.details.length).toBe(1);
  });

  it("Connect streaming without a credential: an end-of-stream message with the error", async () => {
    const a = await h2Stalled(
      "/v1/skipper.v1.NodeService/WatchWorkOrders",
      { "content-type": "application/connect+json" },
      grpcPrefix(ANNOUNCED),
    );
    expect(a.status).toBe(200);
    expect(a.body[0]).toBe(0b10);
    const end = JSON.parse(a.body.subarray(5).toString("utf8")) as { error: { code: string } };
    expect(end.error.code).toBe("unauthenticated");
  });

  it("REST over HTTP/1.1 without a credential: 401 envelope, and the connection is not kept for the rest of the body", async () => {
    let socketClosed: Promise<void> = Promise.resolve();
    const answer = await new Promise<{ status: number; body: string }>((resolve) => {
      const req = https.request(
        `${tc.url}/v1/resources/tenant`,
        { method: "POST", ca: tc.ca, agent: false, headers: { "content-type": "application/json", "content-length": String(ANNOUNCED) } },
        (res) => {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (c: string) => {
            body += c;
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on("socket", (s) => {
        socketClosed = new Promise((r) => s.once("close", () => r()));
      });
      req.on("error", () => undefined);
      req.write(SENT);
    });
    expect(answer.status).toBe(401);
    // The rest of the body never comes: the server closes the connection (5 s after its answer).
    await socketClosed;
    expect((JSON.parse(answer.body) as { error: { code: string } }).error.code).toBe("UNAUTHORIZED");
  });

  it("REST over HTTP/1.1 from a client that asked to close: the refused upload is read to its end, not reset", async () => {
    // A client without keep-alive sends "connection: close"; the server answers at once and reads
    // the rest of the body, so the client's upload ends without EPIPE or a reset that would lose
    // the answer.
    const body = Buffer.alloc(ANNOUNCED, 0x61);
    const agent = new https.Agent({ ca: tc.ca, keepAlive: false });
    const { hostname, port } = new URL(tc.url);
    const outcome = await new Promise<{ status: number; written: boolean; error?: string }>((resolve) => {
      let status = 0;
      let written = false;
      const req = https.request(
        {
          hostname,
          port,
          path: "/v1/resources/tenant",
          method: "POST",
          agent,
          headers: { "content-type": "application/json", "content-length": String(body.length) },
        },
        (res) => {
          status = res.statusCode ?? 0;
          res.resume();
          res.on("end", () => req.once("close", () => resolve({ status, written })));
        },
      );
      req.on("finish", () => {
        written = true;
      });
      req.on("error", (e) => resolve({ status, written, error: e.message }));
      req.end(body);
    });
    agent.destroy();
    expect(outcome).toEqual({ status: 401, written: true });
  });

  it("a bidirectional stream over HTTP/1.1 is the client's mistake, said as one (400 naming HTTP/2), not a 505", async () => {
    for (const method of ["POST", "DELETE"]) {
      const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = https.request(
          `${tc.url}/v1/skipper.v1.TerminalService/Attach`,
          { method, ca: tc.ca, agent: false, headers: { "content-type": "application/connect+json", "x-admin-token": ADMIN_TOKEN } },
          (res) => {
            let body = "";
            res.setEncoding("utf8");
            res.on("data", (c: string) => {
              body += c;
            });
            res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
          },
        );
        req.on("error", reject);
        req.end();
      });
      expect(answer.status, `${method}: ${answer.body}`).toBeLessThan(500);
      if (method === "POST") expect(answer.body).toMatch(/HTTP\/2/);
    }
  });

  it("admitted calls and the public health check are served as before", async () => {
    const beat = await tc.client(NodeService, { token: nodeToken, grpc: true }).heartbeat({ nodeId: "door-1", agentVersion: "test" });
    expect(beat.serverTime).toBeDefined();
    const listed = await tc.client(ResourceService, { admin: true }).listResources({ resourceType: "node" });
    expect(listed.resources.map((r) => r.id)).toContain("door-1");
    const health = await tc.client(HealthService, { grpc: true }).check({});
    expect(health.status).toBe("ok");
  });
});

describe("request bodies are capped and decoded at the door", () => {
  it("a public call that announces a large message is refused at its prefix, not held", async () => {
    // Nobody vouches for a public caller: its cap is small, and checked against the announced length.
    const a = await h2Stalled("/skipper.v1.HealthService/Check", { "content-type": "application/grpc" }, grpcPrefix(ANNOUNCED));
    expect(a.headers["grpc-status"]).toBe("3");
    expect(trailerError(a)?.code).toBe("INVALID_REQUEST");
    expect(trailerError(a)?.details.limit).toBeLessThan(ANNOUNCED);
    expect(a.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
  });

  it("a refused call whose body has already ended is answered, and the server lives on", async () => {
    // Resetting such a stream between the end of the answer and its trailers aborted the whole
    // process (Node's HTTP/2 assertion in Http2Stream::OnTrailers); the request gate now waits.
    for (const path of ["/skipper.v1.HealthService/Check", "/skipper.v1.ResourceService/ListResources"]) {
      const a = await h2Complete(
        path,
        { "content-type": "application/grpc" },
        Buffer.concat([grpcPrefix(5 * 1024 * 1024), Buffer.alloc(16)]),
      );
      expect(a.headers["grpc-status"]).toBeDefined();
    }
    const health = await tc.client(HealthService, { grpc: true }).check({});
    expect(health.status).toBe("ok");
  });

  it("an admitted call that announces more than the cap is refused at its prefix", async () => {
    const a = await h2Stalled(
      "/skipper.v1.NodeService/Heartbeat",
      { "content-type": "application/grpc", authorization: `Bearer ${nodeToken}` },
      grpcPrefix(ANNOUNCED + 1),
    );
    expect(a.headers["grpc-status"]).toBe("3");
    expect(trailerError(a)?.details.field).toBe("body");
  });

  // Bytes that are not the method's request message, in every encoding: a 4xx with the API's
  // code, never a 5xx (Connect's own decoder calls binary garbage `internal`).
  const garbage = Buffer.from([0xff, 0xff, 0xff, 0x0f, 0x12, 0x67, 0x61, 0x72, 0x62]);
  const enveloped = Buffer.concat([grpcPrefix(garbage.length), garbage]);
  const cases: [string, Record<string, string>, Buffer, (a: Answer) => { status: string | number; code?: string }][] = [
    ["Connect unary binary", { "content-type": "application/proto" }, garbage, connectUnaryError],
    ["Connect unary JSON", { "content-type": "application/json" }, Buffer.from('{"resource_type": 7, '), connectUnaryError],
    [
      "gRPC",
      { "content-type": "application/grpc" },
      enveloped,
      (a) => ({ status: String(a.headers["grpc-status"]), code: trailerError(a)?.code }),
    ],
    [
      "gRPC-Web",
      { "content-type": "application/grpc-web+proto" },
      enveloped,
      (a) => ({ status: String(a.headers["grpc-status"]), code: trailerError(a)?.code }),
    ],
    [
      "gRPC with a truncated message",
      { "content-type": "application/grpc" },
      enveloped.subarray(0, 8),
      (a) => ({ status: String(a.headers["grpc-status"]), code: trailerError(a)?.code }),
    ],
  ];
  for (const [name, headers, body, read] of cases) {
    it(`${name}: INVALID_REQUEST`, async () => {
      const a = await h2Complete(
        "/v1/skipper.v1.ResourceService/ListResources",
        { ...headers, authorization: `Bearer ${ADMIN_TOKEN}` },
        body,
      );
      const got = read(a);
      expect([400, "3"]).toContain(got.status);
      expect(got.code).toBe("INVALID_REQUEST");
    });
  }

  it("a valid message in each encoding still goes through", async () => {
    const a = await h2Complete(
      "/v1/skipper.v1.ResourceService/ListResources",
      { "content-type": "application/json", authorization: `Bearer ${ADMIN_TOKEN}` },
      Buffer.from('{"resource_type": "node"}'),
    );
    expect(a.status).toBe(200);
    expect(a.body.toString("utf8")).toContain("door-1");
  });
});

/** The ApiError of a gRPC answer (trailers-only: in its headers). */
function trailerError(a: Answer): { code: string; details: Record<string, unknown> } | undefined {
  const trailer = new Headers();
  for (const [k, v] of Object.entries(a.headers)) if (!k.startsWith(":") && typeof v === "string") trailer.set(k, v);
  const detail = findTrailerError(trailer)?.findDetails(ApiErrorSchema)[0];
  if (!detail) return undefined;
  return { code: detail.code, details: (detail.details ?? {}) as Record<string, unknown> };
}

function connectUnaryError(a: Answer): { status: number; code?: string } {
  const body = JSON.parse(a.body.toString("utf8")) as { details?: { debug?: { code?: string } }[] };
  return { status: a.status, code: body.details?.[0]?.debug?.code };
}
