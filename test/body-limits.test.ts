// Request bodies cost the controller a bounded amount on every protocol (controller/boundary/body-limits.ts):
// the open enrollment route takes the small open cap on REST as on gRPC, a body that does not end
// within its deadline is refused however it trickles, and the bytes unfinished bodies hold are
// reserved against budgets shared by REST, Connect and gRPC. Each check waits for the server's
// answer, which is the behaviour under test.
import http2 from "node:http2";
import https from "node:https";
import tls from "node:tls";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BodyBudget, BodyBudgets, DEFAULT_BODY_LIMITS } from "../controller/boundary/body-limits.js";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";

describe("body budget pools", () => {
  it("refuses a take that would pass the connection's, the address's or the total pool, and frees on release", () => {
    const budget = new BodyBudget({ perConnection: 10, perAddress: 15, total: 20 });
    const c1 = {};
    const c2 = {};
    const a = budget.reserve(c1, "10.0.0.1");
    expect(a.take(8)).toBe(true);
    expect(a.take(3)).toBe(false);
    expect(a.refusedBy).toBe("connection");
    const b = budget.reserve(c2, "10.0.0.1");
    expect(b.take(8)).toBe(false);
    expect(b.refusedBy).toBe("address");
    expect(b.take(7)).toBe(true);
    const c = budget.reserve({}, "10.0.0.2");
    expect(c.take(6)).toBe(false);
    expect(c.refusedBy).toBe("total");
    expect(budget.held()).toBe(15);
    a.release();
    a.release();
    expect(budget.held()).toBe(7);
    expect(c.take(6)).toBe(true);
    b.release();
    c.release();
    expect(budget.held()).toBe(0);
  });
});

const OPEN_CAP = 16 * 1024;

describe("request bodies on a real controller (HTTP/2 + TLS)", () => {
  let tc: TestController;
  beforeAll(async () => {
    const limits = {
      open: { ...DEFAULT_BODY_LIMITS.open, maxBytes: OPEN_CAP, deadlineMs: 800, perConnection: 40 * 1024, perAddress: 40 * 1024 },
      admitted: { ...DEFAULT_BODY_LIMITS.admitted, deadlineMs: 800 },
    };
    tc = await startController({ bodyBudgets: new BodyBudgets(limits), limits: { requestBodyMs: 1500 } });
  });
  afterAll(async () => {
    await tc?.stop();
  });

  function open(): http2.ClientHttp2Session {
    const session = http2.connect(tc.url, { ca: tc.ca });
    session.on("error", () => undefined);
    return session;
  }

  interface Answer {
    status: number;
    headers: http2.IncomingHttpHeaders;
    body: string;
    rstCode?: number;
  }

  /** Sends `head` (and `body` unless `hold`, which leaves the stream open) and resolves with the answer. */
  function send(
    session: http2.ClientHttp2Session,
    headers: http2.OutgoingHttpHeaders,
    body: Buffer | string,
    hold = false,
  ): { answer: Promise<Answer>; stream: http2.ClientHttp2Stream } {
    const stream = session.request(headers);
    const answer = new Promise<Answer>((resolve) => {
      let status = 0;
      let head: http2.IncomingHttpHeaders = {};
      let text = "";
      stream.on("response", (h) => {
        status = Number(h[":status"]);
        head = h;
      });
      stream.on("data", (d: Buffer) => {
        text += d.toString("utf8");
      });
      stream.on("error", () => undefined);
      stream.on("close", () => resolve({ status, headers: head, body: text, rstCode: stream.rstCode }));
    });
    if (hold) stream.write(body);
    else stream.end(body);
    return { answer, stream };
  }

  const enroll = { ":method": "POST", ":path": "/v1/enroll", "content-type": "application/json" };

  it("refuses an enrollment body over the open cap on the REST route (413), as on the RPC path", async () => {
    const session = open();
    const big = JSON.stringify({ token: "x".repeat(OPEN_CAP + 10) });
    const rest = await send(session, enroll, big).answer;
    expect(rest.status).toBe(413);
    expect(JSON.parse(rest.body).error).toMatchObject({ code: "INVALID_REQUEST", details: { field: "body", limit: OPEN_CAP } });
    const rpc = await send(session, { ...enroll, ":path": "/v1/skipper.v1.EnrollmentService/EnrollNode" }, big).answer;
    expect(rpc.status).toBe(400);
    expect(JSON.parse(rpc.body)).toMatchObject({ code: "invalid_argument" });
    session.destroy();
  });

  it("answers 408 to a body that trickles past its deadline, however often a byte arrives", async () => {
    const session = open();
    const { answer, stream } = send(session, enroll, '{"token":', true);
    // A byte more often than any idle limit: only an overall deadline ends this.
    const trickle = setInterval(() => stream.write(" "), 100);
    const got = await answer;
    clearInterval(trickle);
    expect(got.status).toBe(408);
    expect(JSON.parse(got.body).error).toMatchObject({ code: "INVALID_REQUEST", details: { field: "body", deadline_ms: 800 } });
    session.destroy();
  });

  it("over HTTP/1.1 too: a body past its deadline is answered 408 and the connection closed, not kept for the rest", async () => {
    const socket = tls.connect({
      port: Number(new URL(tc.url).port),
      host: "127.0.0.1",
      ca: tc.ca,
      servername: "localhost",
      ALPNProtocols: ["http/1.1"],
    });
    socket.on("error", () => undefined);
    await new Promise<void>((r) => socket.once("secureConnect", () => r()));
    let answer = "";
    socket.on("data", (d: Buffer) => {
      answer += d.toString("utf8");
    });
    const closed = new Promise<void>((r) => socket.once("close", () => r()));
    socket.write('POST /v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"token":');
    await closed;
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
  });

  it("refuses with RESOURCE_EXHAUSTED once unfinished open bodies hold the budget, on every protocol, and takes calls again when they go", async () => {
    const session = open();
    // Three stalled enrollments of 15 KiB each: the third passes the 40 KiB per-connection pool.
    const held = [0, 1].map(() => send(session, enroll, "x".repeat(15 * 1024), true));
    // Their bytes reach the server before the next call does: a ping's answer comes after them.
    await new Promise<void>((r) => session.ping(() => r()));
    const rest = await send(session, enroll, "x".repeat(15 * 1024)).answer;
    expect(rest.status).toBe(429);
    expect(rest.headers["retry-after"]).toBe("1");
    expect(JSON.parse(rest.body).error).toMatchObject({ code: "RESOURCE_EXHAUSTED", details: { budget: "connection" } });
    const grpcBody = Buffer.alloc(5 + 15 * 1024);
    grpcBody.writeUInt32BE(15 * 1024, 1);
    const grpc = await send(
      session,
      { ":method": "POST", ":path": "/skipper.v1.EnrollmentService/EnrollNode", "content-type": "application/grpc" },
      grpcBody,
    ).answer;
    expect(grpc.headers["grpc-status"]).toBe("8"); // RESOURCE_EXHAUSTED
    for (const h of held) h.stream.close();
    await Promise.all(held.map((h) => h.answer));
    // Released: the same call now reaches the RPC (an enrollment without a valid token).
    const after = await send(session, enroll, JSON.stringify({ token: "nope" })).answer;
    expect(after.status).not.toBe(429);
    expect(JSON.parse(after.body).error.code).not.toBe("RESOURCE_EXHAUSTED");
    session.destroy();
  });

  it("closes a request to a body-less route whose body never ends", async () => {
    const session = open();
    const { answer, stream } = send(session, { ":method": "GET", ":path": "/v1/resources", "x-admin-token": ADMIN_TOKEN }, "x", true);
    const trickle = setInterval(() => stream.write(" "), 100);
    const got = await answer;
    clearInterval(trickle);
    // Answered, and the stream ended by the server although the client kept sending.
    expect(got.status).toBe(200);
    expect(stream.closed).toBe(true);
    session.destroy();
  });

  it("gives a body's budget back when the client resets its stream mid-body", async () => {
    const session = open();
    const held = [0, 1].map(() => send(session, enroll, "x".repeat(15 * 1024), true));
    await new Promise<void>((r) => session.ping(() => r()));
    for (const h of held) h.stream.close(http2.constants.NGHTTP2_CANCEL);
    await Promise.all(held.map((h) => h.answer));
    // The address's pool (40 KiB here) takes a 30 KiB body again once the resets are seen; with
    // the reservation kept by a reset it never would.
    const other = open();
    for (;;) {
      const got = await send(other, enroll, JSON.stringify({ token: "x".repeat(15 * 1024) })).answer;
      if (got.status !== 429) {
        expect(JSON.parse(got.body).error.code).not.toBe("RESOURCE_EXHAUSTED");
        break;
      }
    }
    session.destroy();
    other.destroy();
  });
});

describe("compressed and encoded requests on a real controller: a client's mistake is 4xx, never 5xx", () => {
  let tc: TestController;
  beforeAll(async () => {
    tc = await startController();
  });
  afterAll(async () => {
    await tc?.stop();
  });
  const call = async (path: string, init: { method?: string; headers?: Record<string, string>; body?: Uint8Array | string } = {}) => {
    const session = http2.connect(tc.url, { ca: tc.ca });
    session.on("error", () => undefined);
    try {
      const stream = session.request({ ":method": init.method ?? "POST", ":path": path, "x-admin-token": ADMIN_TOKEN, ...init.headers });
      const chunks: Buffer[] = [];
      let head: http2.IncomingHttpHeaders = {};
      let trailers: http2.IncomingHttpHeaders = {};
      stream.on("response", (h) => {
        head = h;
      });
      stream.on("trailers", (t) => {
        trailers = t;
      });
      stream.on("data", (d: Buffer) => chunks.push(d));
      await new Promise<void>((resolve) => {
        stream.on("close", () => resolve());
        stream.on("error", () => undefined);
        stream.end(init.body);
      });
      const text = Buffer.concat(chunks).toString("utf8");
      return { status: Number(head[":status"]), grpc: String(head["grpc-status"] ?? trailers["grpc-status"] ?? ""), text };
    } finally {
      session.destroy();
    }
  };
  const list = "/v1/skipper.v1.ResourceService/ListResources";
  const envelope = (flags: number, payload: Buffer) => {
    const prefix = Buffer.alloc(5);
    prefix[0] = flags;
    prefix.writeUInt32BE(payload.length, 1);
    return Buffer.concat([prefix, payload]);
  };

  it("an unknown content-encoding is INVALID_REQUEST (400), not UNIMPLEMENTED (501)", async () => {
    const got = await call(list, { headers: { "content-type": "application/json", "content-encoding": "zstd" }, body: "{}" });
    expect(got.status).toBe(400);
    expect(got.text).toContain("use gzip, br or identity");
  });

  it("a body that is not the gzip or brotli it says is INVALID_REQUEST on Connect and gRPC", async () => {
    const connect = await call(list, { headers: { "content-type": "application/json", "content-encoding": "br" }, body: "garbage" });
    expect([connect.status, connect.text]).toEqual([400, expect.stringContaining("not valid brotli")]);
    const grpc = await call("/skipper.v1.ResourceService/ListResources", {
      headers: { "content-type": "application/grpc", "grpc-encoding": "br" },
      body: envelope(1, Buffer.from("hello")),
    });
    expect(grpc.grpc).toBe("3"); // INVALID_ARGUMENT, not INTERNAL
  });

  it("compressed bodies that are what they say are served, over Connect and gRPC", async () => {
    const connect = await call(list, {
      headers: { "content-type": "application/json", "content-encoding": "gzip" },
      body: gzipSync(Buffer.from('{"resource_type":"tenant"}')),
    });
    expect(connect.status).toBe(200);
    const grpc = await call("/skipper.v1.ResourceService/ListResources", {
      headers: { "content-type": "application/grpc", "grpc-encoding": "gzip" },
      body: envelope(1, gzipSync(Buffer.alloc(0))),
    });
    expect(grpc.grpc).toBe("0");
  });

  it("the same front door serves HTTP/1.1 (a compressed Connect call answered, a bad one refused)", async () => {
    const post = (body: Buffer, encoding: string) =>
      new Promise<number>((resolve, reject) => {
        const r = https.request(
          `${tc.url}${list}`,
          {
            method: "POST",
            ca: tc.ca,
            headers: { "content-type": "application/json", "content-encoding": encoding, "x-admin-token": ADMIN_TOKEN },
          },
          (res) => {
            res.resume();
            res.on("end", () => resolve(res.statusCode ?? 0));
          },
        );
        r.on("error", reject);
        r.end(body);
      });
    expect(await post(gzipSync(Buffer.from("{}")), "gzip")).toBe(200);
    expect(await post(Buffer.from("{}"), "zstd")).toBe(400);
  });

  it("a Connect GET with a broken base64 message or an unknown compression is 400, not 500 or 501", async () => {
    const get = (q: string) => call(`/v1/skipper.v1.ResourceService/GetResource?connect=v1&${q}`, { method: "GET" });
    expect((await get("encoding=proto&base64=1&message=!!!")).status).toBe(400);
    expect((await get("encoding=json&compression=zstd&message=abc")).status).toBe(400);
  });

  it("a Connect GET whose message is not a valid request is 400 invalid_argument, in either encoding", async () => {
    const get = (q: string) => call(`/v1/skipper.v1.ResourceService/GetResource?connect=v1&${q}`, { method: "GET" });
    // A field number 0 (base64url) and a varint that overflows (raw bytes, percent-encoded).
    for (const q of [
      "encoding=proto&base64=1&message=AAAA",
      "encoding=proto&message=%FF%FF%FF%0F%12%01",
      "encoding=json&message=%7Bnope",
    ]) {
      const res = await get(q);
      expect(res.status, q).toBe(400);
      expect((JSON.parse(res.text) as { code: string }).code, q).toBe("invalid_argument");
    }
    // A good one still passes: a proto GetResource for a kind and id that do not exist is NOT_FOUND.
    const good = Buffer.from([0x0a, 0x06, ...Buffer.from("tenant"), 0x12, 0x04, ...Buffer.from("nope")]).toString("base64url");
    expect((await get(`encoding=proto&base64=1&message=${good}`)).status).toBe(404);
  });
});
