// Slow and silent clients: each holds a connection or request open the way an attacker (or a
// broken client) would, and the probe measures how long the controller kept it before closing it
// itself. Nothing here closes from the client side: without the server's limits each would stay
// open for ever. Short mode runs the controller with short limits (same code paths); the full
// run uses the defaults, so it takes as long as the longest default (5 min of idle session).
import http2 from "node:http2";
import net from "node:net";
import tls from "node:tls";
import { join } from "node:path";
import { atMost, exactly, type Figure, type Probe } from "./figures.js";
import { startController, TRUST_ADMIN_TOKEN } from "./controller-process.js";

const SECTION = "slow and silent clients";

interface Limits {
  handshakeMs: number;
  requestIdleMs: number;
  sessionIdleMs: number;
}

const DEFAULTS: Limits = { handshakeMs: 10_000, requestIdleMs: 60_000, sessionIdleMs: 300_000 };
const SHORT: Limits = { handshakeMs: 1000, requestIdleMs: 2000, sessionIdleMs: 3000 };
// How far past its limit a close may come (timers, a busy machine) and still meet the bar.
const SLACK_MS = 3000;

export const slowClientsProbe: Probe = {
  name: "slow-clients",
  async run({ short, workDir, log }) {
    const limits = short ? SHORT : DEFAULTS;
    const args = short ? ["--handshake-timeout", "1s", "--request-idle-timeout", "2s", "--session-idle-timeout", "3s"] : [];
    const ctl = await startController({ dataDir: join(workDir, "data"), args });
    const port = ctl.port;
    log(`limits: handshake ${limits.handshakeMs} ms, request idle ${limits.requestIdleMs} ms, session idle ${limits.sessionIdleMs} ms`);
    const admin = { "x-admin-token": TRUST_ADMIN_TOKEN };
    const [silentTcp, silentTls, h1Body, h2Body, grpcBody, idleSession] = await Promise.all([
      // TCP connection that never starts TLS.
      held((done) => {
        const s = net.connect(port, "127.0.0.1");
        s.on("error", () => undefined);
        s.once("close", done);
      }),
      // TLS done, then nothing at all (no HTTP/2 preface, no request).
      held((done) => {
        const s = tls.connect({ port, host: "127.0.0.1", ca: ctl.ca, servername: "localhost", ALPNProtocols: ["http/1.1"] });
        s.on("error", () => undefined);
        s.once("close", done);
      }),
      // HTTP/1.1: admitted request, body announced and never finished.
      held((done) => {
        const s = tls.connect({ port, host: "127.0.0.1", ca: ctl.ca, servername: "localhost", ALPNProtocols: ["http/1.1"] });
        s.on("error", () => undefined);
        s.once("secureConnect", () =>
          s.write(
            `POST /v1/resources/tenant HTTP/1.1\r\nHost: x\r\nx-admin-token: ${TRUST_ADMIN_TOKEN}\r\nContent-Length: 1000\r\n\r\n{"id":`,
          ),
        );
        s.once("close", done);
      }),
      // HTTP/2: admitted Connect call, body never finished.
      held((done) =>
        stalledStream(
          ctl.url,
          ctl.ca,
          { ":path": "/v1/skipper.v1.ResourceService/ListResources", "content-type": "application/json", ...admin },
          Buffer.from('{"resource'),
          done,
        ),
      ),
      // gRPC: admitted call whose message announces 100 bytes and sends 2.
      held((done) =>
        stalledStream(
          ctl.url,
          ctl.ca,
          { ":path": "/skipper.v1.ResourceService/ListResources", "content-type": "application/grpc", ...admin },
          Buffer.from([0, 0, 0, 0, 100, 1, 2]),
          done,
        ),
      ),
      // HTTP/2 session: one request served, then silence.
      held((done) => {
        const s = http2.connect(ctl.url, { ca: ctl.ca });
        s.on("error", () => undefined);
        const r = s.request({ ":path": "/health" });
        r.on("data", () => undefined);
        r.on("error", () => undefined);
        s.once("close", done);
      }),
    ]);
    const alive = ctl.alive();
    await ctl.stop();
    const bar = (limit: number) => Math.round((limit + SLACK_MS) / 100) / 10;
    const s = (ms: number) => Math.round(ms / 100) / 10;
    const figures: Figure[] = [
      atMost(SECTION, "TCP connection that never starts TLS: kept", s(silentTcp), bar(limits.handshakeMs), "s"),
      atMost(SECTION, "TLS connection that never sends a request: kept", s(silentTls), bar(limits.handshakeMs + limits.requestIdleMs), "s"),
      atMost(SECTION, "HTTP/1.1 body that stalls: kept", s(h1Body), bar(limits.requestIdleMs), "s"),
      atMost(SECTION, "HTTP/2 body that stalls: kept", s(h2Body), bar(limits.requestIdleMs), "s"),
      atMost(SECTION, "gRPC message that stalls: kept", s(grpcBody), bar(limits.requestIdleMs), "s"),
      atMost(SECTION, "idle HTTP/2 session: kept", s(idleSession), bar(limits.sessionIdleMs), "s"),
      exactly(SECTION, "controller down afterwards", alive ? 0 : 1, 0),
    ];
    return figures;
  },
};

/** Milliseconds from `open` until it calls done (the server closed); gives up (Infinity) after 15 min. */
function held(open: (done: () => void) => void): Promise<number> {
  return new Promise((resolve) => {
    const started = performance.now();
    const timer = setTimeout(() => resolve(Infinity), 15 * 60_000);
    open(() => {
      clearTimeout(timer);
      resolve(performance.now() - started);
    });
  });
}

function stalledStream(url: string, ca: string, headers: Record<string, string>, prefix: Buffer, done: () => void): void {
  const s = http2.connect(url, { ca });
  s.on("error", () => undefined);
  const r = s.request({ ":method": "POST", ...headers });
  r.on("error", () => undefined);
  r.on("data", () => undefined);
  r.once("close", () => {
    done();
    s.close();
  });
  r.write(prefix);
}
