// serve(): puts a request handler on a port, over TLS (HTTP/2 with HTTP/1.1 fallback) or plain
// HTTP (HTTP/1.1 and h2c on one port), with limits on silent connections, stalled requests and
// streams per connection. main.ts and the tests listen through it; build() (server.ts) never does.
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type tls from "node:tls";
import type { RequestHandler } from "./build.js";
import { rawSocket, VOUCH } from "../boundary/connection-vouch.js";
import { sessionContext, TICKET_LIFETIME_S } from "../tls/session-tickets.js";
import { connectionAdmission, type LineEvent, type RefusedCap } from "./connection-admission.js";
import { SERVICES } from "./wiring/routes.js";

// "/package.Service/Method" of every RPC whose request is a stream (an agent's session): its body
// ends when the caller is done, never by a deadline, so requestBodyMs does not apply to it (the
// idle limit does; each message is bounded where the boundary reads it).
const STREAMED_REQUESTS = new Set(
  SERVICES.flatMap((s) =>
    s.methods
      .filter((m) => m.methodKind === "client_streaming" || m.methodKind === "bidi_streaming")
      .map((m) => `/${s.typeName}/${m.name}`),
  ),
);

/** True when `url` (a request's path, with any prefix such as /v1) names an RPC whose request is a stream. */
export function isStreamedRequest(url: string | undefined): boolean {
  const path = (url ?? "").split("?")[0]!;
  const method = path.lastIndexOf("/");
  const service = method > 0 ? path.lastIndexOf("/", method - 1) : -1;
  return service >= 0 && STREAMED_REQUESTS.has(path.slice(service));
}

/** How long a connection may stay silent or a request stall, and how many streams a connection may hold. */
export interface ConnectionLimits {
  /** A TLS client must finish its handshake within this, a plain-HTTP one send its first bytes (a connection that sends nothing is closed). */
  handshakeTimeoutMs: number;
  /** A request (HTTP/1.1 or an HTTP/2 stream) with no bytes either way for this long is closed: a stalled body, a vanished client. */
  requestIdleMs: number;
  /**
   * A request whose body has not ended this long after it arrived is closed, however its bytes
   * trickle (the idle limit restarts on every byte). Bodies that are read have their own, shorter
   * deadline (body-limits.ts); this also ends those nobody reads (a body sent to a GET route).
   * Not for RPCs whose request is a stream (an agent's session): those end when the caller is done.
   */
  requestBodyMs: number;
  /** An HTTP/2 connection with no stream activity for this long is closed. */
  sessionIdleMs: number;
  /**
   * The idle limit of an RPC whose request is a stream (an agent's session) instead of
   * requestIdleMs: its keepalives come every heartbeat interval, which grows with the fleet (up to
   * 225 s: agent-session.ts); a dead peer is found sooner by the connection's pings.
   */
  streamIdleMs: number;
  /** Every HTTP/2 connection is pinged this often; one that does not answer within pingTimeoutMs is closed. 0: no pings. */
  pingIntervalMs: number;
  pingTimeoutMs: number;
  /** Concurrent streams one HTTP/2 connection may open (SETTINGS_MAX_CONCURRENT_STREAMS). */
  maxConcurrentStreams: number;
  /** Open connections one client address may hold; more are closed as they arrive. 0: no cap. */
  maxConnectionsPerAddress: number;
  /** Open connections in all; more are closed as they arrive. 0: no cap. */
  maxConnections: number;
  /**
   * Open connections that have not yet carried an admitted call (no credential vouched for them):
   * past this, as a new one arrives, room is made by closing the oldest evictable one of the
   * address holding most of them (see unvouchedGraceMs); when none is evictable, the new one
   * waits in line (maxWaitingConnections). 0: no cap (and no line).
   */
  maxUnvouchedConnections: number;
  /**
   * How long a connection in that pool is kept, however many arrive, to make its first admitted
   * call: counted from the end of its TLS handshake (from its arrival without TLS). A connection
   * still in its handshake is not evicted at all while its address holds no other in the pool
   * (handshakeTimeoutMs bounds it); one of an address holding several is evicted this long after
   * its arrival. Evicting a handshake half-way throws away work both sides paid for: in a
   * controller restart's storm handshakes finished seconds late (busy clients, TCP retries), and
   * evicting them before they finished kept every agent out for tens of seconds (bench:fleet).
   */
  unvouchedGraceMs: number;
  /** Concurrent streams an HTTP/2 connection may open before a call on it is admitted (then maxConcurrentStreams). */
  unvouchedStreams: number;
  /**
   * Connections that may wait, accepted but not yet read by TLS, for room in that pool; each is
   * let in, first come first served, as a pool member is vouched for, closes or is evicted. Past
   * this a newcomer is closed. About 2.6 KB of heap, 5 KB of RSS each (waiting-line.ts). 0: no line.
   */
  maxWaitingConnections: number;
  /**
   * How long a connection may wait in that line; then it is closed and its client retries after
   * its backoff. Its TLS handshake (handshakeTimeoutMs) counts from when it is let in.
   */
  connectionWaitMs: number;
}

/**
 * The defaults. A watching agent's stream carries a keepalive every 45 s and a polling agent
 * calls every few seconds, so neither idles out; a request that sends nothing for a minute does.
 * An agent holds one connection; the per-address cap leaves room for a few hundred hosts behind
 * one NAT address (raise it for more) while one client cannot take every socket.
 */
export const DEFAULT_LIMITS: ConnectionLimits = {
  handshakeTimeoutMs: 10_000,
  requestIdleMs: 60_000,
  requestBodyMs: 65_000,
  sessionIdleMs: 300_000,
  streamIdleMs: 600_000,
  pingIntervalMs: 20_000,
  pingTimeoutMs: 10_000,
  maxConcurrentStreams: 100,
  maxConnectionsPerAddress: 512,
  maxConnections: 10_000,
  maxUnvouchedConnections: 256,
  unvouchedGraceMs: 2_000,
  unvouchedStreams: 8,
  // The controller takes ~3.5 ms of CPU per reconnecting agent (bench:fleet): a full line is let
  // in within 30 s at that rate, within 60 s at half of it (a busy host). A waiting connection costs
  // little, and one whose client gave up leaves at once: the bound is for the rest.
  maxWaitingConnections: 8192,
  connectionWaitMs: 60_000,
};

/**
 * HTTP/2 sized for what the controller mostly serves: agents, each on one connection for days,
 * holding a watch stream and making a few small calls whose headers repeat (a bearer token, a
 * content type). Node's defaults are a browser's and a proxy's; these bound what one connection
 * may make the controller hold, and still let admin calls through: a body up to the largest
 * limit (body-limits.ts, 4 MiB) and list answers of megabytes go through flow control, a window
 * at a time, not through these buffers.
 */
const AGENT_SIZED: http2.ServerOptions = {
  // The header list keeps Node's limits (128 pairs, 64 KiB): a smaller one resets the stream of a
  // request with a long URL before the boundary can answer it (414/400 with a reason), and the
  // trust suite's hostile sweep requires an answer for every request. Measured, the smaller limit
  // saved nothing per connection either (stop 34's note).
  // The HPACK table the controller keeps per connection for the headers it sends (Node: 4 KiB):
  // an agent's answers repeat a few short fields.
  maxDeflateDynamicTableSize: 1024,
  settings: {
    // The HPACK table it keeps per connection for the headers it receives (Node: 4 KiB).
    headerTableSize: 1024,
  },
};

export interface ServeOptions {
  host: string;
  port: number;
  /**
   * PEM cert and key; absent means plain HTTP (HTTP/1.1 and h2c on one port). With `clientCa`,
   * clients are asked for a certificate signed by it (enrolled nodes), but one is not required.
   */
  tls?: { cert: string; key: string; clientCa?: string; ticketKey?: TicketKeySource };
  /** Overrides of DEFAULT_LIMITS. */
  limits?: Partial<ConnectionLimits>;
  /** Told of each connection closed on arrival because a connection cap was reached (or the line was full). */
  onRefusedConnection?: (address: string, cap: RefusedCap) => void;
  /** Told of each connection held in line for the unvouched pool, let in, or closed while it waited. */
  onWaitingConnection?: (address: string, event: LineEvent) => void;
}

/**
 * The key that seals TLS session tickets (session-tickets.ts currentTicketKey): asked at start
 * and every TICKET_KEY_CHECK_MS after, so a key replaced on its schedule is taken up. Without
 * one, Node makes a key per process and no session survives a restart.
 */
export type TicketKeySource = () => Promise<Buffer>;

/** How often the ticket key is asked for again. */
export const TICKET_KEY_CHECK_MS = 3600_000;

export interface Serving {
  /** Base URL, e.g. https://127.0.0.1:8443 */
  url: string;
  port: number;
  close(): Promise<void>;
}

/**
 * Connections the kernel may hold accepted for the controller to take up (the system caps it at
 * net.core.somaxconn). Node's default, 511, overflowed when a fleet reconnected at once after a
 * restart: the kernel then drops arrivals silently and each client's TCP retries after 1, 3, 7 s…,
 * the same waits for every client (no jitter), which held the handshakes of connections already
 * let in for seconds. Accepted at once, an arrival is let in, held in line or refused
 * (connection-admission.ts), and a refused client waits its own jittered backoff.
 */
export const LISTEN_BACKLOG = 4096;

/** Listens with `handler` and resolves once the port is bound. */
export async function serve(handler: RequestHandler, opts: ServeOptions): Promise<Serving> {
  const limits = { ...DEFAULT_LIMITS, ...opts.limits };
  const sessions = new Set<http2.ServerHttp2Session>();
  const sockets = new Set<net.Socket>();
  // Until a call on it is admitted, a connection may open few streams (vouchFor raises the limit).
  const vouching = limits.maxUnvouchedConnections > 0;
  const h2Options: http2.ServerOptions = {
    ...AGENT_SIZED,
    settings: {
      ...AGENT_SIZED.settings,
      maxConcurrentStreams: vouching ? Math.min(limits.unvouchedStreams, limits.maxConcurrentStreams) : limits.maxConcurrentStreams,
    },
  };
  const watched = idleLimited(handler, limits.requestIdleMs, limits.streamIdleMs, limits.requestBodyMs);
  const track = sessionTracker(limits, sessions);
  const ticketKey = opts.tls?.ticketKey;
  const secure = opts.tls && tlsServer(opts.tls, ticketKey && (await ticketKey()), limits, h2Options, watched, track);
  // A key that failed to load keeps the one in use (its source says why); the next check tries again.
  const rotation =
    secure && ticketKey
      ? setInterval(
          () =>
            void ticketKey().then(
              (k) => secure.setTicketKeys(k),
              () => undefined,
            ),
          TICKET_KEY_CHECK_MS,
        )
      : undefined;
  rotation?.unref();
  const admission = connectionAdmission(limits, sockets, {
    vouching,
    tlsHandshakes: Boolean(secure),
    // The TLS server takes a connection as the HTTP/2 server takes h2c ones: emitted to it.
    enter: secure ? (s) => secure.emit("connection", s) : plainEntry(limits, h2Options, watched, track),
    onRefusedConnection: opts.onRefusedConnection,
    onWaitingConnection: opts.onWaitingConnection,
  });
  secure?.on("secureConnection", (socket: tls.TLSSocket) => admission.handshaken(rawSocket(socket)));
  // Each TCP connection is accepted unread, and counted before any TLS work is spent on it.
  const server = net.createServer({ pauseOnConnect: true }, admission.arrive);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ port: opts.port, host: opts.host, backlog: LISTEN_BACKLOG }, () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  const host = opts.host.includes(":") ? `[${opts.host}]` : opts.host === "0.0.0.0" ? "127.0.0.1" : opts.host;
  return {
    url: `${opts.tls ? "https" : "http"}://${host}:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        clearInterval(rotation);
        admission.stop();
        server.close(() => resolve());
        for (const s of sessions) s.close();
        for (const s of sockets) s.destroy();
      }),
  };
}

type SessionTracker = (s: http2.ServerHttp2Session) => void;

// Keeps each HTTP/2 session in `sessions` while it is open, closes it once idle, and raises its
// stream limit when a call on it is admitted.
function sessionTracker(limits: ConnectionLimits, sessions: Set<http2.ServerHttp2Session>): SessionTracker {
  return (s) => {
    sessions.add(s);
    const socket = rawSocket(s.socket);
    const vouch = socket?.[VOUCH];
    // Vouched for: the connection leaves the pool and may open every stream it is allowed.
    if (socket && vouch) {
      socket[VOUCH] = () => {
        socket[VOUCH] = undefined;
        vouch();
        if (!s.destroyed && !s.closed) s.settings({ maxConcurrentStreams: limits.maxConcurrentStreams });
      };
    }
    s.setTimeout(limits.sessionIdleMs, () => s.close());
    const pings = pinged(s, limits.pingIntervalMs, Math.min(limits.pingTimeoutMs, limits.pingIntervalMs));
    s.on("close", () => {
      clearInterval(pings);
      sessions.delete(s);
      releaseIdleTimer(s);
    });
  };
}

// Pings `s` every `everyMs` and closes it when an answer does not come within `timeoutMs`: a
// peer that vanished without a word (a host powered off, a network cut, a frozen process) ends
// its agent's session, and so its node's liveness (liveness-view.ts). A peer that pings this side
// itself (skippy does every 30 s while nothing arrives) proves it is there: it is pinged only
// once it has sent no ping for two intervals, so the fleet's pings are not doubled (each costs
// about a fifth of an echo call here). So a vanished peer is found within 3 intervals + timeoutMs
// (70 s by default) at worst, one that never pings within everyMs + timeoutMs (30 s).
function pinged(s: http2.ServerHttp2Session, everyMs: number, timeoutMs: number): NodeJS.Timeout | undefined {
  if (everyMs <= 0) return undefined;
  let heardAt = 0;
  s.on("ping", () => {
    heardAt = performance.now();
  });
  const timer = setInterval(() => {
    if (s.closed || s.destroyed || performance.now() - heardAt < 2 * everyMs) return;
    const deadline = setTimeout(() => s.destroy(), timeoutMs);
    deadline.unref();
    try {
      // Called with the answer, or with an error once the session is gone.
      if (!s.ping(() => clearTimeout(deadline))) clearTimeout(deadline);
    } catch {
      clearTimeout(deadline);
    }
  }, everyMs);
  timer.unref();
  return timer;
}

// Node (20.x) closes a session by marking it destroyed and then calling setTimeout(0), which
// returns at once for a destroyed session: the idle timer stays armed and holds the closed
// session, its socket and TLS state (4-8 KB) until it fires, sessionIdleMs (5 min) later. A fleet
// reconnecting at once (a controller restart) would hold every old connection that long. The
// timer is cleared here; its symbol is Node's own (`timeout`), found by its description.
function releaseIdleTimer(s: http2.ServerHttp2Session): void {
  const key = Object.getOwnPropertySymbols(s).find((k) => k.description === "timeout");
  const timer = key && (s as unknown as Record<symbol, unknown>)[key];
  if (timer) clearTimeout(timer as NodeJS.Timeout);
}

// HTTP/2 over TLS with HTTP/1.1 fallback; with a client CA, clients are asked for a certificate.
// With a ticket key, sessions resume across restarts (session-tickets.ts).
function tlsServer(
  tlsOptions: NonNullable<ServeOptions["tls"]>,
  ticketKeys: Buffer | undefined,
  limits: ConnectionLimits,
  h2Options: http2.ServerOptions,
  watched: RequestHandler,
  track: SessionTracker,
): tls.Server {
  const { clientCa, cert, key } = tlsOptions;
  // Tickets live as long as an agent's connection may (it got its ticket when it connected), in
  // the context of this certificate and client CA only.
  const resumption = {
    ...(ticketKeys ? { ticketKeys } : {}),
    sessionTimeout: TICKET_LIFETIME_S,
    sessionIdContext: sessionContext(cert, clientCa),
  };
  // A certificate that does not verify still connects: the call is refused with a clear
  // UNAUTHORIZED naming the reason, instead of a handshake failure a client cannot read.
  const clientAuth = clientCa ? { requestCert: true, rejectUnauthorized: false, ca: clientCa } : {};
  const h2 = http2.createSecureServer(
    {
      cert,
      key,
      ...clientAuth,
      ...resumption,
      ...h2Options,
      allowHTTP1: true,
      minVersion: "TLSv1.2",
      handshakeTimeout: limits.handshakeTimeoutMs,
    },
    watched,
  );
  h2.on("session", track);
  // An HTTP/1.1 connection over TLS gets none of Node's HTTP/1.1 server timeouts (they are
  // properties of http.Server, not of the HTTP/2 server that hands it over): one that sends no
  // request, or idles between requests, is closed once nothing has moved for requestIdleMs.
  h2.on("secureConnection", (socket: tls.TLSSocket) => {
    if (socket.alpnProtocol !== "h2") socket.setTimeout(limits.requestIdleMs, () => socket.destroy());
  });
  return h2;
}

// Plain HTTP: sniff the HTTP/2 connection preface so one port answers HTTP/1.1 and h2c. Takes
// connections accepted paused (what a held one had sent is in its buffer, read first).
function plainEntry(
  limits: ConnectionLimits,
  h2Options: http2.ServerOptions,
  watched: RequestHandler,
  track: SessionTracker,
): (socket: net.Socket) => void {
  const h1 = http.createServer(watched);
  const h2c = http2.createServer(h2Options, watched);
  h2c.on("session", track);
  return (socket) => {
    // A connection that sends nothing is closed like a TLS one that never starts its handshake.
    socket.setTimeout(limits.handshakeTimeoutMs, () => socket.destroy());
    socket.once("data", (head: Buffer) => {
      socket.setTimeout(0);
      socket.pause();
      socket.unshift(head);
      const isH2 = head.toString("latin1", 0, 14) === "PRI * HTTP/2.0";
      (isH2 ? h2c : h1).emit("connection", socket);
      process.nextTick(() => socket.resume());
    });
    socket.resume();
  };
}

// Closes a request (an HTTP/1.1 connection, or one HTTP/2 stream) once nothing has moved either
// way for `idleMs`: a body that stalls half-way, a client that vanished. Long streams stay open as
// long as something flows (the watch stream's keepalive), but only once their request has ended:
// a request still sending its body `bodyMs` after it arrived is closed whatever it sends.
function idleLimited(handler: RequestHandler, idleMs: number, streamIdleMs: number, bodyMs: number): RequestHandler {
  return (req, res) => {
    const streamed = isStreamedRequest(req.url);
    req.setTimeout(streamed ? streamIdleMs : idleMs, () => {
      const stream = (req as http2.Http2ServerRequest).stream;
      if (stream) stream.close(http2.constants.NGHTTP2_CANCEL);
      else (req as http.IncomingMessage).socket.destroy();
    });
    if (bodyMs > 0 && !streamed) {
      const timer = setTimeout(() => endUnfinished(req, res), bodyMs);
      const clear = () => clearTimeout(timer);
      req.once("end", clear);
      res.once("close", clear);
    }
    handler(req, res);
  };
}

// Ends a request whose body has not ended in time. An HTTP/2 stream whose answer is complete but
// whose trailers have not gone yet is closed only once they have (a reset in between aborts the
// process: see request-gate.ts stopReading).
function endUnfinished(req: http.IncomingMessage | http2.Http2ServerRequest, res: { writableEnded: boolean }): void {
  const stream = (req as http2.Http2ServerRequest).stream;
  if (!stream) {
    if (!(req as http.IncomingMessage).complete) req.socket.destroy();
    return;
  }
  if (stream.closed || stream.destroyed || req.readableEnded) return;
  const close = () => {
    if (!stream.closed && !stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
  };
  if (res.writableEnded && !stream.sentTrailers) stream.once("wantTrailers", () => setImmediate(close));
  else close();
}
