// Slow and silent clients are cut off (controller/server/listener.ts). The limits are set short here so
// the test sees them act; each check waits for the server to close, which is the behaviour under
// test, not a delay: without the limit nothing would ever close these.
import net from "node:net";
import tls from "node:tls";
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { ApiErrorSchema } from "../gen/skipper/v1/envelope_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { connectionEvents } from "./helpers/connection-events.js";
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

  it("closes a TLS connection that speaks HTTP/1.1 and never sends a request", async () => {
    const socket = tls.connect({ port, host: "127.0.0.1", ca: tc.ca, servername: "localhost", ALPNProtocols: ["http/1.1"] });
    socket.on("error", () => undefined);
    await new Promise<void>((r) => socket.once("secureConnect", () => r()));
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

describe("caps per client and per node", () => {
  let capped: TestController;
  let watched: TestController;
  beforeAll(async () => {
    capped = await startController({ limits: { maxConnectionsPerAddress: 2 } });
    watched = await startController({ maxWatchStreamsPerNode: 2 });
  });
  afterAll(async () => {
    await capped?.stop();
    await watched?.stop();
  });

  /** A TLS connection: resolves "open" once its handshake is done, "closed" if the server closes it first. */
  const connect = (): Promise<{ outcome: "open" | "closed"; socket: tls.TLSSocket }> =>
    new Promise((resolve) => {
      const socket = tls.connect({ port: Number(new URL(capped.url).port), host: "127.0.0.1", ca: capped.ca, servername: "localhost" });
      socket.on("error", () => undefined);
      socket.once("secureConnect", () => resolve({ outcome: "open", socket }));
      socket.once("close", () => resolve({ outcome: "closed", socket }));
    });

  it("closes connections from one address past its cap, and takes new ones once one closes", async () => {
    const a = await connect();
    const b = await connect();
    expect([a.outcome, b.outcome]).toEqual(["open", "open"]);
    const c = await connect();
    expect(c.outcome).toBe("closed");
    a.socket.destroy();
    await closed(a.socket);
    // The server counts the close when it sees it; a refused attempt is retried until then.
    let d = await connect();
    while (d.outcome === "closed") d = await connect();
    expect(d.outcome).toBe("open");
    b.socket.destroy();
    d.socket.destroy();
    await Promise.all([closed(b.socket), closed(d.socket)]);
  });

  it("refuses a node's watch stream past its cap with RESOURCE_EXHAUSTED, and takes one again once one ends", async () => {
    const token = (await watched.client(NodeService, { admin: true }).registerNode({ nodeId: "watch-cap-1" })).token;
    const nodes = watched.client(NodeService, { token });
    const open = async () => {
      const abort = new AbortController();
      const it = nodes.watchWorkOrders({ nodeId: "watch-cap-1" }, { signal: abort.signal, timeoutMs: 0 })[Symbol.asyncIterator]();
      await it.next(); // the first notice: the stream is open
      return { abort, it };
    };
    const first = await open();
    const second = await open();
    const refused = await open().then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(refused?.code).toBe(Code.ResourceExhausted);
    expect(refused?.findDetails(ApiErrorSchema)[0]?.code).toBe("RESOURCE_EXHAUSTED");
    first.abort.abort();
    await first.it.next().catch(() => undefined);
    // The server lets go of the watch when it sees the cancel; until then a new one is refused.
    let third: Awaited<ReturnType<typeof open>> | undefined;
    while (!third) third = await open().catch(() => undefined);
    second.abort.abort();
    third.abort.abort();
  });
});

describe("connections on their way in (a restart's storm)", () => {
  /** A TCP connection from `localAddress` (an agent's host of its own) that has not begun its TLS handshake. */
  const tcpFrom = async (port: number, localAddress: string) => {
    const raw = net.connect({ port, host: "127.0.0.1", localAddress });
    raw.on("error", () => undefined);
    await new Promise<void>((r) => raw.once("connect", () => r()));
    return raw;
  };
  const h2From = (c: TestController, localAddress: string, all: http2.ClientHttp2Session[]) => {
    // http2.connect hands localAddress on to net.connect; its option types leave it out.
    const s = http2.connect(c.url, { ca: c.ca, localAddress } as http2.SecureClientSessionOptions);
    s.on("error", () => undefined);
    all.push(s);
    return s;
  };

  it("are kept while their TLS handshake runs, however late; past it, one without an admitted call goes after its grace", async () => {
    const events = connectionEvents();
    const c = await startController({ limits: { maxUnvouchedConnections: 1, unvouchedGraceMs: 0 }, connectionEvents: events.options });
    const port = Number(new URL(c.url).port);
    const sessions: http2.ClientHttp2Session[] = [];
    const slow = await tcpFrom(port, "127.0.0.2");
    try {
      // The pool's one connection is an agent slow to finish its handshake: a newcomer from another host waits in line.
      const late = h2From(c, "127.0.0.3", sessions);
      await events.until("held", "127.0.0.3");
      // The slow one was kept: its handshake finishes on the same connection (the server's ticket after it says the server saw it end).
      const secured = tls.connect({ socket: slow, ca: c.ca, servername: "localhost" });
      secured.on("error", () => undefined);
      const gone = closed(secured);
      await new Promise<void>((resolve, reject) => {
        secured.once("session", () => resolve());
        secured.once("close", () => reject(new Error("the connection in its handshake was closed")));
      });
      // Past its handshake and its grace (0) with no admitted call: it gives way to the one waiting, which gets in.
      await gone;
      await new Promise<void>((r) => late.once("remoteSettings", () => r()));
      expect(await admitted(late)).toBe(200);
      expect(events.seen).toEqual(["held 127.0.0.3", "refused:unvouched 127.0.0.2", "let-in 127.0.0.3"]);
    } finally {
      slow.destroy();
      for (const s of sessions) s.destroy();
      await c.stop();
    }
  });

  it("of one address holding several in the pool: its oldest goes after its grace, handshake or not", async () => {
    const c = await startController({ limits: { maxUnvouchedConnections: 2, unvouchedGraceMs: 0 } });
    const port = Number(new URL(c.url).port);
    const sessions: http2.ClientHttp2Session[] = [];
    const [first, second] = [await tcpFrom(port, "127.0.0.2"), await tcpFrom(port, "127.0.0.2")];
    try {
      const gone = closed(first);
      const next = h2From(c, "127.0.0.3", sessions);
      await new Promise<void>((r) => next.once("remoteSettings", () => r()));
      await gone;
      expect(second.destroyed).toBe(false);
    } finally {
      first.destroy();
      second.destroy();
      for (const s of sessions) s.destroy();
      await c.stop();
    }
  });
});

describe("plain HTTP", () => {
  it("closes a connection that sends nothing", async () => {
    const plain = await startController({ tls: false, limits: { handshakeTimeoutMs: 300 } });
    try {
      const socket = net.connect(Number(new URL(plain.url).port), "127.0.0.1");
      socket.on("error", () => undefined);
      await closed(socket);
      expect(socket.destroyed).toBe(true);
    } finally {
      await plain.stop();
    }
  });
});

// The status of an admitted call (the admin token) on `s`: the call that vouches for its connection.
const admitted = (s: http2.ClientHttp2Session) =>
  new Promise<number>((resolve) => {
    const st = s.request({ ":method": "GET", ":path": "/v1/resources?resource_type=tenant", "x-admin-token": ADMIN_TOKEN });
    st.on("response", (h) => resolve(Number(h[":status"])));
    st.on("data", () => undefined);
    st.end();
  });

describe("connections nobody vouched for", () => {
  it("are a bounded pool (the oldest closed as a new one comes) with few streams each; an admitted call takes its connection out, with every stream", async () => {
    const c = await startController({ limits: { maxUnvouchedConnections: 3, unvouchedStreams: 2, unvouchedGraceMs: 0 } });
    const sessions: http2.ClientHttp2Session[] = [];
    const connect = async () => {
      const s = http2.connect(c.url, { ca: c.ca });
      s.on("error", () => undefined);
      await new Promise<void>((r) => s.once("remoteSettings", () => r()));
      sessions.push(s);
      return s;
    };
    try {
      const vouched = await connect();
      expect(vouched.remoteSettings.maxConcurrentStreams).toBe(2);
      // A call with a credential: the connection leaves the pool and may open every stream.
      const raised = new Promise<number | undefined>((r) => vouched.once("remoteSettings", (st) => r(st.maxConcurrentStreams)));
      expect(await admitted(vouched)).toBe(200);
      expect(await raised).toBe(100);
      const [a, b, d] = [await connect(), await connect(), await connect()];
      const [aClosed, bClosed] = [closed(a), closed(b)];
      // The pool holds 3: a fourth closes the oldest of them (a), a fifth the next (b), never the vouched one.
      await connect();
      await aClosed;
      await connect();
      await bClosed;
      expect(vouched.closed || vouched.destroyed).toBe(false);
      expect(d.closed || d.destroyed).toBe(false);
      expect(await admitted(vouched)).toBe(200);
    } finally {
      for (const s of sessions) s.destroy();
      await c.stop();
    }
  });

  it("keep each connection its grace: while every one in a full pool is within it, newcomers wait in line and get in, in order, as the pool's are vouched for", async () => {
    const events = connectionEvents();
    const c = await startController({
      limits: { maxUnvouchedConnections: 3, unvouchedGraceMs: 600_000 },
      connectionEvents: events.options,
    });
    const sessions: http2.ClientHttp2Session[] = [];
    const connect = () => {
      const s = http2.connect(c.url, { ca: c.ca });
      s.on("error", () => undefined);
      sessions.push(s);
      return s;
    };
    try {
      const settled = (s: http2.ClientHttp2Session) => new Promise<void>((r) => s.once("remoteSettings", () => r()));
      const pool = [connect(), connect(), connect()];
      await Promise.all(pool.map(settled));
      // A fourth, a fifth: held unread (no TLS yet), the three kept.
      const late = [connect(), connect()];
      const lateSettled = late.map(settled);
      await events.until("held", "127.0.0.1", 2);
      for (const s of pool) expect(s.closed || s.destroyed).toBe(false);
      // The first of the three vouched for by its admitted call: the first in line takes its place, then the second.
      expect(await admitted(pool[0]!)).toBe(200);
      await lateSettled[0];
      expect(events.seen.filter((e) => e.startsWith("let-in")).length).toBe(1);
      expect(await admitted(pool[1]!)).toBe(200);
      await lateSettled[1];
      for (const s of [...late, pool[2]!]) expect(await admitted(s)).toBe(200);
      // The pool is empty again: a newcomer is let in at once.
      const next = connect();
      await settled(next);
      expect(await admitted(next)).toBe(200);
      expect(events.seen).toEqual(["held 127.0.0.1", "held 127.0.0.1", "let-in 127.0.0.1", "let-in 127.0.0.1"]);
    } finally {
      for (const s of sessions) s.destroy();
      await c.stop();
    }
  });
});
