// What skippy's calls look like on the wire: Connect JSON by default (the contract's design card
// has agents talk HTTPS JSON), Connect's binary protobuf when configured. The end-to-end suites
// run real agents on the default against a real controller; this test looks at the bytes.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createControllerClients } from "../agent/controller-client.js";
import { loadAgentConfig } from "../agent/config.js";

interface Seen {
  path: string;
  contentType: string;
  authorization: string;
  body: Buffer;
}

let server: http2.Http2Server;
let baseUrl: string;
const seen: Seen[] = [];
const sessions = new Set<http2.ServerHttp2Session>();

beforeAll(async () => {
  server = http2.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const contentType = String(req.headers["content-type"] ?? "");
      seen.push({ path: req.url, contentType, authorization: String(req.headers.authorization ?? ""), body: Buffer.concat(chunks) });
      // An empty HeartbeatResponse in the encoding the call used.
      res.writeHead(200, { "content-type": contentType });
      res.end(contentType === "application/json" ? "{}" : Buffer.alloc(0));
    });
  });
  server.on("session", (s) => sessions.add(s));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(async () => {
  // The clients keep their connections open (as skippy does): close them from this side.
  for (const s of sessions) s.destroy();
  await new Promise((r) => server.close(r));
});

describe("skippy's wire format", () => {
  it("is Connect JSON by default, readable as the contract's JSON names", async () => {
    const cfg = loadAgentConfig(["--node-id", "edge-1", "--token", "tok-123"], {}, () => "");
    if (cfg === "help") throw new Error("unexpected help");
    expect(cfg.wire).toBe("json");
    const clients = createControllerClients({ baseUrl, credential: { token: cfg.token }, wire: cfg.wire });
    await clients.nodes.heartbeat({ nodeId: "edge-1", agentVersion: "0.1.0" });
    const call = seen.at(-1)!;
    expect(call.path).toBe("/v1/skipper.v1.NodeService/Heartbeat");
    expect(call.contentType).toBe("application/json");
    expect(call.authorization).toBe("Bearer tok-123");
    expect(JSON.parse(call.body.toString("utf8"))).toMatchObject({ nodeId: "edge-1", agentVersion: "0.1.0" });
  });

  it("is Connect's binary protobuf with --wire binary, and anything else is refused at start", async () => {
    const cfg = loadAgentConfig(["--node-id", "edge-1", "--token", "tok-123", "--wire", "binary"], {}, () => "");
    if (cfg === "help") throw new Error("unexpected help");
    const clients = createControllerClients({ baseUrl, credential: { token: cfg.token }, wire: cfg.wire });
    await clients.nodes.heartbeat({ nodeId: "edge-1" });
    const call = seen.at(-1)!;
    expect(call.contentType).toBe("application/proto");
    expect(call.body.includes(Buffer.from("edge-1"))).toBe(true);
    expect(() => loadAgentConfig(["--node-id", "edge-1", "--token", "t", "--wire", "xml"], {}, () => "")).toThrow(/json or binary/);
    expect(() => loadAgentConfig(["--node-id", "edge-1", "--token", "t"], { SKIPPY_WIRE: "grpc" }, () => "")).toThrow(/json or binary/);
  });
});
