// bench:fleet's load process: simulated agents on sessions (NodeService.Session), each on a TLS +
// HTTP/2 connection of its own from a loopback address of its own (sim-fleet.ts hostAddress). A
// lean client: node:http2 speaking Connect's streaming framing with JSON messages (what skippy
// speaks by default), no Connect client per agent, so ten thousand of them fit in one process
// while the server side is the real one. Each agent, as skippy on a session does:
//
//   connect (offering the TLS session last handed out) -> hello -> welcome -> one full heartbeat
//   report -> a keepalive every welcome.heartbeat_interval_ms (or the interval new terms give), and
//   an HTTP/2 ping every 30 s (skippy's connection pings while nothing arrives)
//   the session or connection lost: wait (capped exponential backoff with full jitter, 0.5 s
//   doubling to 30 s: common/backoff.ts, as session-loop.ts waits; it starts over after a session
//   that lived 30 s), then connect again; forever, until the load process is told to stop
//
// Told what to do by JSON lines on stdin, it answers each with one JSON line on stdout:
//
//   {"do":"up","width":n}        starts every agent, n connecting at once; answers once all are
//                                welcomed (or after timeoutMs, default 600 s)
//   {"do":"down"}                answers once no agent holds a session (the server went)
//   {"do":"back","timeoutMs":t}  answers once every agent is welcomed again, with when the last
//                                one was (Date.now()), or after t
//   {"do":"counts"}              what the agents have seen so far
//
// Usage: session-fleet-load <config.json> with {url, ca, nodes: [{nodeId, token}]}.
import { readFileSync } from "node:fs";
import http2 from "node:http2";
import net from "node:net";
import { createInterface } from "node:readline";
import tls from "node:tls";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { create, fromJsonString, toJsonString } from "@bufbuild/protobuf";
import { Backoff } from "../common/backoff.js";
import { SessionRequestSchema, SessionResponseSchema } from "../gen/skipper/v1/node_service_pb.js";
import { hostAddress } from "./sim-fleet.js";

interface Config {
  url: string;
  ca: string;
  nodes: { nodeId: string; token: string }[];
}
const config = JSON.parse(readFileSync(process.argv[2]!, "utf8")) as Config;
const url = new URL(config.url);
const PATH = "/v1/skipper.v1.NodeService/Session";
// One TLS context for every agent (each skippy has one of its own on its own host): made per
// connection, as tls.connect({ca}) does, it took a quarter of this process's CPU in a storm
// (parsing the CA and building a store each time), which slowed every agent's handshake.
const secureContext = tls.createSecureContext({ ca: config.ca });
/** A session that lived this long starts the backoff over (session-loop.ts LIVED_LONG_MS). */
const LIVED_LONG_MS = 30_000;
/** skippy pings its controller connection this often while nothing arrives (agent/controller-client.ts). */
const PING_MS = 30_000;

/** What the agents have seen: sessions welcomed and lost, connections that failed, why (first of each). */
const counts = { welcomes: 0, lost: 0, connectFailures: 0, endedByServer: 0, reconnects: 0, keepalives: 0 };
const firstErrors = new Map<string, string>();
/** How often the load process tells its progress (stderr) while it waits. */
const PROGRESS_MS = 5000;
// Connection attempts since the last progress line: how many resumed their TLS session or made a
// full handshake; times (ms) from the attempt to its TLS handshake's end, from there to the
// welcome, and from the attempt to its failure. With this process's own CPU and its longest event
// loop delay they show when the load process, not the server, is what holds the agents back.
const attempts = { resumed: 0, full: 0, toTls: [] as number[], tlsToWelcome: [] as number[], toFailure: [] as number[] };
const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();
let cpuBefore = process.cpuUsage();
let cpuSince = performance.now();

/** Count, median, 90th percentile and maximum of `a` (ms). */
function spread(a: number[]): number[] | undefined {
  if (!a.length) return undefined;
  a.sort((x, y) => x - y);
  const at = (q: number) => Math.round(a[Math.min(a.length - 1, Math.floor(a.length * q))]!);
  return [a.length, at(0.5), at(0.9), at(1)];
}

/** The figures above as JSON, starting them over. */
function attemptFigures(): string {
  const c = process.cpuUsage();
  const cpuPercent = Math.round((c.user - cpuBefore.user + c.system - cpuBefore.system) / 10 / (performance.now() - cpuSince));
  [cpuBefore, cpuSince] = [c, performance.now()];
  const out = {
    loadCpuPercent: cpuPercent,
    loopDelayMaxMs: Math.round(loopDelay.max / 1e6),
    resumed: attempts.resumed,
    fullHandshakes: attempts.full,
    toTlsMs: spread(attempts.toTls),
    tlsToWelcomeMs: spread(attempts.tlsToWelcome),
    toFailureMs: spread(attempts.toFailure),
  };
  loopDelay.reset();
  [attempts.toTls, attempts.tlsToWelcome, attempts.toFailure] = [[], [], []];
  return JSON.stringify(out);
}

/** One Connect streaming envelope: flags (0), length, the message's JSON. */
function envelope(kind: Parameters<typeof create<typeof SessionRequestSchema>>[1]): Buffer {
  const body = Buffer.from(toJsonString(SessionRequestSchema, create(SessionRequestSchema, kind)));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}
const KEEPALIVE = envelope({ kind: { case: "heartbeat", value: {} } });

let upCount = 0;
let lastWelcomeAt = 0;
let changed: (() => void) | undefined;
const tell = () => {
  const w = changed;
  changed = undefined;
  w?.();
};

/** One connection attempt: its TCP socket, its session once connected, when it began and its TLS ended. */
interface Attempt {
  raw: net.Socket;
  session?: http2.ClientHttp2Session;
  t0: number;
  tTls: number;
}

class Agent {
  private ticket: Buffer | undefined;
  private attempt: Attempt | undefined;
  private keepalive: NodeJS.Timeout | undefined;
  private pinger: NodeJS.Timeout | undefined;
  private readonly backoff = new Backoff();
  private up = false;
  private welcomedAt = 0;
  private gone = true;
  private readonly hello: Buffer;
  private readonly report: Buffer;

  constructor(
    readonly nodeId: string,
    private readonly token: string,
    private readonly address: string,
  ) {
    this.hello = envelope({ kind: { case: "hello", value: { nodeId, agentVersion: "bench" } } });
    const report = { nodeId, agentVersion: "bench", heartbeatIntervalMs: 10_000n, projectsReported: true };
    this.report = envelope({ kind: { case: "heartbeat", value: { report } } });
  }

  /**
   * Connects and opens the session; the welcome (or the loss) is handled as it comes. TLS and
   * HTTP/2 are set up once the TCP connection is made, as on a host of its own they would cost
   * nothing: made up front for each attempt, a fleet retrying a controller that is down spent
   * this one process's CPU on attempts that were refused anyway, and slowed the ones that were not.
   */
  connect(): void {
    this.gone = false;
    const attempt = {
      t0: performance.now(),
      tTls: 0,
      raw: net.connect({ host: url.hostname, port: Number(url.port), localAddress: this.address }),
    };
    this.attempt = attempt;
    const { raw } = attempt;
    let connected = false;
    // Once connected, errors are the TLS socket's and the session's too (noted there).
    raw.on("error", (e) => {
      if (!connected) this.note("connect", e);
    });
    raw.once("close", () => this.lost(attempt));
    raw.once("connect", () => {
      connected = true;
      this.open(attempt);
    });
  }

  private open(attempt: Attempt): void {
    let welcomed = false;
    const { raw, t0 } = attempt;
    const session = http2.connect(url, {
      createConnection: () => {
        const socket = tls.connect({
          socket: raw,
          host: url.hostname,
          secureContext,
          ALPNProtocols: ["h2"],
          ...(this.ticket ? { session: this.ticket } : {}),
        });
        socket.once("secureConnect", () => {
          attempt.tTls = performance.now();
          attempts.toTls.push(attempt.tTls - t0);
          if (socket.isSessionReused()) attempts.resumed++;
          else attempts.full++;
        });
        socket.on("session", (s: Buffer) => {
          this.ticket = s;
        });
        return socket;
      },
    });
    attempt.session = session;
    session.on("error", (e) => this.note(welcomed ? "session" : "connect", e));
    session.on("close", () => this.lost(attempt));
    const stream = session.request({
      ":method": "POST",
      ":path": PATH,
      "content-type": "application/connect+json",
      "connect-protocol-version": "1",
      authorization: `Bearer ${this.token}`,
    });
    stream.on("error", (e) => this.note("stream", e));
    stream.write(this.hello);
    let pending: Buffer = Buffer.alloc(0);
    stream.on("data", (chunk: Buffer) => {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      while (pending.length >= 5) {
        const length = pending.readUInt32BE(1);
        if (pending.length < 5 + length) break;
        const flags = pending[0]!;
        const body = pending.subarray(5, 5 + length).toString("utf8");
        pending = pending.subarray(5 + length);
        if (flags & 2) {
          counts.endedByServer++;
          if (body.includes('"error"')) this.note("ended", new Error(body));
          continue;
        }
        if (welcomed && !body.includes('"terms"')) continue;
        const m = fromJsonString(SessionResponseSchema, body, { ignoreUnknownFields: true });
        if (m.kind.case === "terms") {
          this.beatEvery(stream, Number(m.kind.value.heartbeatIntervalMs) || 10_000);
          continue;
        }
        if (m.kind.case !== "welcome") continue;
        welcomed = true;
        this.welcomed(stream, Number(m.kind.value.heartbeatIntervalMs) || 10_000);
      }
    });
    stream.on("close", () => this.lost(attempt));
  }

  private welcomed(stream: http2.ClientHttp2Stream, intervalMs: number): void {
    const a = this.attempt;
    if (a?.tTls) attempts.tlsToWelcome.push(performance.now() - a.tTls);
    this.up = true;
    this.welcomedAt = performance.now();
    upCount++;
    counts.welcomes++;
    lastWelcomeAt = Date.now();
    stream.write(this.report);
    this.beatEvery(stream, intervalMs);
    // skippy's connection pings the controller every 30 s while nothing arrives.
    const session = a?.session;
    this.pinger = setInterval(() => {
      if (session && !session.destroyed) session.ping(() => undefined);
    }, PING_MS);
    tell();
  }

  // A keepalive every `intervalMs` (the welcome's, or new terms').
  private beatEvery(stream: http2.ClientHttp2Stream, intervalMs: number): void {
    clearInterval(this.keepalive);
    this.keepalive = setInterval(() => {
      counts.keepalives++;
      stream.write(KEEPALIVE);
    }, intervalMs);
  }

  private note(where: string, e: unknown): void {
    if (where === "connect") counts.connectFailures++;
    const key = `${where}: ${e instanceof Error ? ((e as NodeJS.ErrnoException).code ?? e.message.slice(0, 80)) : String(e)}`;
    if (!firstErrors.has(key)) firstErrors.set(key, this.nodeId);
  }

  // The session (or its connection) went: wait, as skippy waits, and connect again.
  private lost(attempt: Attempt): void {
    if (attempt !== this.attempt || this.gone) return;
    this.gone = true;
    if (!this.up && this.attempt) attempts.toFailure.push(performance.now() - this.attempt.t0);
    clearInterval(this.keepalive);
    clearInterval(this.pinger);
    attempt.session?.destroy();
    attempt.raw.destroy();
    if (this.up) {
      this.up = false;
      upCount--;
      counts.lost++;
      if (performance.now() - this.welcomedAt >= LIVED_LONG_MS) this.backoff.reset();
    }
    tell();
    if (stopping) return;
    counts.reconnects++;
    setTimeout(() => this.connect(), this.backoff.next());
  }

  close(): void {
    this.gone = true;
    clearInterval(this.keepalive);
    clearInterval(this.pinger);
    this.attempt?.session?.destroy();
    this.attempt?.raw.destroy();
  }
}

let stopping = false;
const agents = config.nodes.map((n, i) => new Agent(n.nodeId, n.token, hostAddress(i)));

/** Resolves once `done()` holds (checked on every change), or after `timeoutMs`. */
async function until(done: () => boolean, timeoutMs: number): Promise<boolean> {
  const start = performance.now();
  const deadline = start + timeoutMs;
  let told = start;
  while (!done()) {
    if (performance.now() - told >= PROGRESS_MS) {
      told = performance.now();
      const s = ((told - start) / 1000).toFixed(0);
      process.stderr.write(`fleet load: ${s} s, ${upCount} of ${agents.length} up, ${JSON.stringify(counts)} ${attemptFigures()}\n`);
    }
    const left = deadline - performance.now();
    if (left <= 0) return false;
    await new Promise<void>((r) => {
      const timer = setTimeout(r, Math.min(left, 1000));
      const prev = changed;
      changed = () => {
        clearTimeout(timer);
        prev?.();
        r();
      };
    });
  }
  return true;
}

const say = (o: object) =>
  process.stdout.write(`${JSON.stringify({ ...o, up: upCount, counts, errors: Object.fromEntries([...firstErrors].slice(0, 5)) })}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  const cmd = JSON.parse(line) as { do: string; width?: number; timeoutMs?: number };
  const t0 = performance.now();
  const timeoutMs = cmd.timeoutMs ?? 600_000;
  if (cmd.do === "up") {
    const width = cmd.width ?? 200;
    for (let i = 0; i < agents.length; i += width) {
      const batch = agents.slice(i, i + width);
      const target = Math.min(agents.length, i + width);
      for (const a of batch) a.connect();
      await until(() => upCount >= target, 60_000);
    }
    const ok = await until(() => upCount === agents.length, timeoutMs);
    say({ done: "up", ok, ms: performance.now() - t0 });
  } else if (cmd.do === "down") {
    const ok = await until(() => upCount === 0, timeoutMs);
    say({ done: "down", ok, ms: performance.now() - t0 });
  } else if (cmd.do === "back") {
    const ok = await until(() => upCount === agents.length, timeoutMs);
    say({ done: "back", ok, lastWelcomeAt, ms: performance.now() - t0 });
  } else if (cmd.do === "counts") say({ done: "counts", ms: 0 });
}
stopping = true;
for (const a of agents) a.close();
process.exit(0);
