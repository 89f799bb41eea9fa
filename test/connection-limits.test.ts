// Slow and silent clients are cut off (controller/listener.ts). The limits are set short here so
// the test sees them act; each check waits for the server to close, which is the behaviour under
// test, not a delay: without the limit nothing would ever close these.
import net from "node:net";
import tls from "node:tls";
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";

let tc: TestController;
let port = 0;

beforeAll(async () => {
  tc = await startController({ limits: { handshakeTimeoutMs: 300, requestIdleMs: 500, sessionIdleMs: 700 } });
  port = Number(new URL(tc.url).port);
});
afterAll(async () => {
  await tc?.stop();
});

const closed = (emitter: { once(event: "close", fn: () => void): unknown }) => new Promise<void>((r) => emitter.once("close", () => r()));

describe("connection limits", () => {
  it("closes a connection that never starts its TLS handshake", async () => {
    const socket = net.connect(port, "127.0.0.1");
    socket.on("error", () => undefined);
    await closed(socket);
    expect(socket.destroyed).toBe(true);
  });

  it("resets an admitted HTTP/2 call whose body stalls", async () => {
    const session = http2.connect(tc.url, { ca: tc.ca });
    session.on("error", () => undefined);
    const stream = session.request({
      ":method": "POST",
      ":path": "/skipper.v1.ResourceService/ListResources",
      "content-type": "application/grpc",
      "x-admin-token": ADMIN_TOKEN,
    });
    stream.on("error", () => undefined);
    stream.write(Buffer.from([0, 0, 0, 0, 100, 1, 2])); // announces 100 bytes, sends 2
    await closed(stream);
    expect(stream.rstCode).toBe(http2.constants.NGHTTP2_CANCEL);
    session.destroy();
  });

  it("closes an admitted HTTP/1.1 request whose body stalls", async () => {
    const socket = tls.connect({ port, host: "127.0.0.1", ca: tc.ca, servername: "localhost", ALPNProtocols: ["http/1.1"] });
    socket.on("error", () => undefined);
    await new Promise<void>((r) => socket.once("secureConnect", () => r()));
    socket.write(`POST /v1/resources/tenant HTTP/1.1\r\nHost: x\r\nx-admin-token: ${ADMIN_TOKEN}\r\nContent-Length: 1000\r\n\r\n{"id":`);
    let answer = "";
    socket.on("data", (d: Buffer) => {
      answer += d.toString("utf8");
    });
    await closed(socket);
    expect(answer).toBe(""); // cut off, not answered: the body never came
  });

  it("closes an HTTP/2 connection that has been idle, after serving it", async () => {
    const session = http2.connect(tc.url, { ca: tc.ca });
    session.on("error", () => undefined);
    const stream = session.request({ ":path": "/health" });
    stream.on("data", () => undefined);
    await closed(stream);
    expect(stream.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
    await closed(session);
    expect(session.closed || session.destroyed).toBe(true);
  });
});
