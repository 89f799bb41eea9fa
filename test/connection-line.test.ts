// The line in front of the pool of connections nobody vouched for (controller/server/connection-admission.ts):
// while the pool is full and none of it may be evicted, an arrival is held unread (no TLS work) and
// let in as a member leaves; the line has a cap and a wait bound, and the other caps still hold.
// Each check waits for what the listener tells (connection-events.ts) or the client sees, never a delay.
import net from "node:net";
import http2 from "node:http2";
import { describe, expect, it } from "vitest";
import { connectionEvents } from "./helpers/connection-events.js";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";

const closed = (emitter: { once(event: "close", fn: () => void): unknown }) => new Promise<void>((r) => emitter.once("close", () => r()));
const settled = (s: http2.ClientHttp2Session) => new Promise<void>((r) => s.once("remoteSettings", () => r()));

/** A TLS + HTTP/2 connection from `localAddress` (a host of its own), its errors ignored. */
function h2From(c: TestController, localAddress: string, all: http2.ClientHttp2Session[]): http2.ClientHttp2Session {
  // http2.connect hands localAddress on to net.connect; its option types leave it out.
  const s = http2.connect(c.url, { ca: c.ca, localAddress } as http2.SecureClientSessionOptions);
  s.on("error", () => undefined);
  all.push(s);
  return s;
}

/** A TCP connection from `localAddress` that has sent nothing yet. */
async function tcpFrom(c: TestController, localAddress: string): Promise<net.Socket> {
  const raw = net.connect({ port: Number(new URL(c.url).port), host: "127.0.0.1", localAddress });
  raw.on("error", () => undefined);
  await new Promise<void>((r) => raw.once("connect", () => r()));
  return raw;
}

// The status of an admitted call (the admin token) on `s`: the call that vouches for its connection.
const admitted = (s: http2.ClientHttp2Session) =>
  new Promise<number>((resolve) => {
    const st = s.request({ ":method": "GET", ":path": "/v1/resources?resource_type=tenant", "x-admin-token": ADMIN_TOKEN });
    st.on("response", (h) => resolve(Number(h[":status"])));
    st.on("error", () => resolve(0));
    st.on("data", () => undefined);
    st.end();
  });

// A pool of 2 whose members are never evicted (their grace is long): the third arrival waits.
const POOL = { maxUnvouchedConnections: 2, unvouchedGraceMs: 600_000 };

describe("the line for the unvouched pool", () => {
  it("holds a third connection, which completes its handshake and call once a pool member is vouched for, and another once one closes", async () => {
    const events = connectionEvents();
    const c = await startController({ limits: POOL, connectionEvents: events.options });
    const sessions: http2.ClientHttp2Session[] = [];
    try {
      const [a, b] = [h2From(c, "127.0.0.2", sessions), h2From(c, "127.0.0.3", sessions)];
      await Promise.all([settled(a), settled(b)]);
      const third = h2From(c, "127.0.0.4", sessions);
      const thirdIn = settled(third);
      await events.until("held", "127.0.0.4");
      const fourth = h2From(c, "127.0.0.5", sessions);
      const fourthIn = settled(fourth);
      await events.until("held", "127.0.0.5");
      // a's admitted call takes it out of the pool: the first in line gets in and is served.
      expect(await admitted(a)).toBe(200);
      await thirdIn;
      expect(await admitted(third)).toBe(200);
      // b goes away unvouched: the next in line takes its place.
      b.destroy();
      await fourthIn;
      expect(await admitted(fourth)).toBe(200);
      expect(events.seen).toEqual(["held 127.0.0.4", "held 127.0.0.5", "let-in 127.0.0.4", "let-in 127.0.0.5"]);
    } finally {
      for (const s of sessions) s.destroy();
      await c.stop();
    }
  });

  it("closes a connection that waited past its bound, and lets go of one its client closed", async () => {
    const events = connectionEvents();
    const c = await startController({ limits: { ...POOL, connectionWaitMs: 300 }, connectionEvents: events.options });
    const sessions: http2.ClientHttp2Session[] = [];
    try {
      const pool = [h2From(c, "127.0.0.2", sessions), h2From(c, "127.0.0.3", sessions)];
      await Promise.all(pool.map(settled));
      // Held past 300 ms: closed before its handshake began (no settings ever came).
      const late = h2From(c, "127.0.0.4", sessions);
      await closed(late);
      expect(late.remoteSettings?.maxConcurrentStreams ?? 0).toBe(0);
      await events.until("timed-out", "127.0.0.4");
      // Its client gives up while it waits (after its ClientHello-sized bytes): it leaves the line at once.
      const quitter = await tcpFrom(c, "127.0.0.5");
      quitter.write(Buffer.alloc(300, 0x16));
      await events.until("held", "127.0.0.5");
      quitter.end();
      await events.until("closed", "127.0.0.5");
      for (const s of pool) expect(s.closed || s.destroyed).toBe(false);
      expect(events.seen).toEqual(["held 127.0.0.4", "timed-out 127.0.0.4", "held 127.0.0.5", "closed 127.0.0.5"]);
      for (const s of pool) expect(await admitted(s)).toBe(200);
    } finally {
      for (const s of sessions) s.destroy();
      await c.stop();
    }
  });

  it("refuses a newcomer when the line is full, and one past the per-address cap while it waits", async () => {
    const events = connectionEvents();
    const limits = { ...POOL, maxWaitingConnections: 1, maxConnectionsPerAddress: 2 };
    const c = await startController({ limits, connectionEvents: events.options });
    const sessions: http2.ClientHttp2Session[] = [];
    try {
      const pool = [h2From(c, "127.0.0.2", sessions), h2From(c, "127.0.0.3", sessions)];
      await Promise.all(pool.map(settled));
      const waiting = h2From(c, "127.0.0.2", sessions);
      const waitingIn = settled(waiting);
      await events.until("held", "127.0.0.2");
      // The line (1) is full: closed at once.
      const refused = h2From(c, "127.0.0.4", sessions);
      await closed(refused);
      // 127.0.0.2 holds two (one in the pool, one in line): its third is refused whatever the line.
      const third = h2From(c, "127.0.0.2", sessions);
      await closed(third);
      expect(events.seen).toEqual(["held 127.0.0.2", "refused:unvouched 127.0.0.4", "refused:per-address 127.0.0.2"]);
      // The one waiting gets in once a pool member is vouched for.
      expect(await admitted(pool[1]!)).toBe(200);
      await waitingIn;
      expect(await admitted(waiting)).toBe(200);
    } finally {
      for (const s of sessions) s.destroy();
      await c.stop();
    }
  });

  it("without TLS, hands a held connection's request over as it is let in (HTTP/1.1 and h2c on one port)", async () => {
    const events = connectionEvents();
    const c = await startController({ tls: false, limits: { ...POOL, maxUnvouchedConnections: 1 }, connectionEvents: events.options });
    const sockets: net.Socket[] = [];
    try {
      // The pool's one member has sent nothing yet (its first bytes may take up to handshakeTimeoutMs).
      const first = await tcpFrom(c, "127.0.0.2");
      sockets.push(first);
      const held = await tcpFrom(c, "127.0.0.3");
      sockets.push(held);
      let answer = "";
      held.on("data", (d: Buffer) => {
        answer += d.toString("latin1");
      });
      held.write("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      await events.until("held", "127.0.0.3");
      first.destroy();
      await closed(held);
      expect(answer).toMatch(/^HTTP\/1\.1 200 /);
      expect(events.seen).toEqual(["held 127.0.0.3", "let-in 127.0.0.3"]);
    } finally {
      for (const s of sockets) s.destroy();
      await c.stop();
    }
  });
});
