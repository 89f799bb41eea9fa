// The byte budget of request streams (stream-budget.ts) against a real controller over HTTP/2 +
// TLS, with a raw HTTP/2 client that frames Session messages itself: a message under way holds
// its bytes against the connection's budget (over it, the session ends RESOURCE_EXHAUSTED), a
// message that stalls half-way ends the session when its deadline passes, and whole messages hold
// nothing between them, however many a session sends.
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { NodeService, SessionRequestSchema } from "../gen/skipper/v1/node_service_pb.js";
import { BodyBudgets, DEFAULT_BODY_LIMITS } from "../controller/boundary/body-limits.js";
import { startController, type TestController } from "./helpers/controller.js";

const KiB = 1024;
let tc: TestController;
let token = "";

beforeAll(async () => {
  // 64 KiB per connection for unfinished messages, which must arrive whole within 1.5 s.
  const admitted = { ...DEFAULT_BODY_LIMITS.admitted, perConnection: 64 * KiB, deadlineMs: 1500 };
  tc = await startController({ bodyBudgets: new BodyBudgets({ ...DEFAULT_BODY_LIMITS, admitted }) });
  token = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "budgeted" })).token;
});
afterAll(async () => {
  await tc?.stop();
});

function envelope(payload: Uint8Array, flags = 0): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

const hello = () =>
  envelope(
    toBinary(
      SessionRequestSchema,
      create(SessionRequestSchema, { kind: { case: "hello", value: { nodeId: "budgeted", agentVersion: "test" } } }),
    ),
  );

/** Opens a raw Session stream; resolves with the end-of-stream error the controller sent (its code), once it ends. */
function rawSession(): {
  stream: http2.ClientHttp2Stream;
  ended: Promise<{ code?: string; message?: string; messages: number }>;
  close(): void;
} {
  const client = http2.connect(tc.url, { ca: tc.ca });
  const stream = client.request({
    ":method": "POST",
    ":path": "/v1/skipper.v1.NodeService/Session",
    "content-type": "application/connect+proto",
    "connect-protocol-version": "1",
    authorization: `Bearer ${token}`,
  });
  const chunks: Buffer[] = [];
  stream.on("data", (c: Buffer) => chunks.push(c));
  const ended = new Promise<{ code?: string; message?: string; messages: number }>((resolve) => {
    stream.on("end", () => {
      const all = Buffer.concat(chunks);
      let i = 0;
      let messages = 0;
      while (i + 5 <= all.length) {
        const flags = all.readUInt8(i);
        const len = all.readUInt32BE(i + 1);
        const body = all.subarray(i + 5, i + 5 + len);
        i += 5 + len;
        if (flags & 0x02) {
          const end = JSON.parse(body.toString("utf8")) as { error?: { code?: string; message?: string } };
          resolve({ ...end.error, messages });
          return;
        }
        messages++;
      }
      resolve({ messages });
    });
  });
  return { stream, ended, close: () => client.close() };
}

describe("the byte budget of request streams", () => {
  it("ends a session whose message under way holds more than the connection's budget, RESOURCE_EXHAUSTED", async () => {
    const s = rawSession();
    s.stream.write(hello());
    // A message that announces 1 MiB (under the 4 MiB cap) and sends 80 KiB of it.
    const head = Buffer.alloc(5);
    head.writeUInt32BE(1024 * KiB, 1);
    s.stream.write(head);
    s.stream.write(Buffer.alloc(80 * KiB, 0x61));
    const end = await s.ended;
    expect(end.code).toBe("resource_exhausted");
    expect(end.message).toContain("budget");
    s.close();
  });

  it("ends a session whose message stalls half-way once its deadline passes", async () => {
    const s = rawSession();
    s.stream.write(hello());
    const head = Buffer.alloc(5);
    head.writeUInt32BE(10 * KiB, 1);
    s.stream.write(head);
    s.stream.write(Buffer.alloc(100, 0x61));
    const end = await s.ended;
    expect(end.code).toBe("invalid_argument");
    expect(end.message).toContain("did not arrive whole within 1500 ms");
    s.close();
  });

  it("holds nothing between whole messages: 20 messages of 10 KiB pass one session within a 64 KiB budget", async () => {
    const s = rawSession();
    s.stream.write(hello());
    // Acks naming no valid order: each is answered with its refusal, and the session goes on.
    const big = envelope(
      toBinary(
        SessionRequestSchema,
        create(SessionRequestSchema, { kind: { case: "ack", value: { workOrderId: "x".repeat(10 * KiB), fencingToken: 1n } } }),
      ),
    );
    for (let i = 0; i < 20; i++) s.stream.write(big);
    s.stream.end();
    const end = await s.ended;
    expect(end.code).toBeUndefined();
    expect(end.messages).toBe(21); // the welcome and 20 answers
    s.close();
  });
});
