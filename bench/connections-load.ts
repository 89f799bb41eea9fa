// bench:connections' load process: simulated agents, each with a connection of its own from a
// loopback address of its own, told what to do by JSON lines on stdin and answering with one
// JSON line on stdout per command:
//
//   {"do":"idle"}                      each agent connects and makes one heartbeat (so the
//                                      connection is vouched for, as an agent's is), then idles
//   {"do":"watch"}                     each agent opens a WatchWorkOrders stream on it
//   {"do":"handshakes","url":…,"resume":bool,"capture":bool}
//                                      each agent opens a new connection to url and closes it once
//                                      HTTP/2 is up, offering its kept TLS session when resume;
//                                      with capture, the session it is handed is kept from then on
//
// Usage: connections-load <config.json> with {url, ca, nodes: [{nodeId, token}]}.
import { setMaxListeners } from "node:events";
import { readFileSync } from "node:fs";
import http2 from "node:http2";
import { createInterface } from "node:readline";
import tls from "node:tls";
import { type Client, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { hostAddress } from "./sim-fleet.js";

interface Config {
  url: string;
  ca: string;
  nodes: { nodeId: string; token: string }[];
}
const config = JSON.parse(readFileSync(process.argv[2]!, "utf8")) as Config;
const stop = new AbortController();
setMaxListeners(0, stop.signal);

// A TLS connection from `address` to `url`, offering `session`; `kept` is told of each session handed out.
function connectTls(url: URL, address: string, session: Buffer | undefined, kept: (s: Buffer) => void): tls.TLSSocket {
  // tls.connect hands localAddress on to net.connect; its option types leave it out.
  const options: tls.ConnectionOptions & { localAddress: string } = {
    host: url.hostname,
    port: Number(url.port),
    ca: config.ca,
    localAddress: address,
    ALPNProtocols: ["h2"],
    ...(session ? { session } : {}),
  };
  const socket = tls.connect(options);
  socket.on("session", kept);
  return socket;
}

class Agent {
  session: Buffer | undefined;
  readonly nodes: Client<typeof NodeService>;
  constructor(
    readonly nodeId: string,
    token: string,
    readonly address: string,
  ) {
    const transport = createConnectTransport({
      baseUrl: `${config.url}/v1`,
      httpVersion: "2",
      // Connect JSON, as skippy talks by default.
      useBinaryFormat: false,
      nodeOptions: {
        createConnection: (authority: URL) =>
          connectTls(authority, address, undefined, (s) => {
            this.session = s;
          }),
      },
      interceptors: [(next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req))],
      // The benchmark decides when connections go, not an idle timer.
      idleConnectionTimeoutMs: 3_600_000,
    });
    this.nodes = createClient(NodeService, transport);
  }

  async idle(): Promise<void> {
    await this.nodes.heartbeat({ nodeId: this.nodeId, agentVersion: "bench", heartbeatIntervalMs: 60_000n });
  }

  // Resolves once the stream's first message arrived; the stream stays open until the end.
  watch(): Promise<void> {
    return new Promise((opened, failed) => {
      let first = true;
      void (async () => {
        for await (const _ of this.nodes.watchWorkOrders({ nodeId: this.nodeId }, { signal: stop.signal })) {
          if (first) opened();
          first = false;
        }
      })().catch((e: unknown) => first && failed(e));
    });
  }

  // One new connection to `url`, closed once HTTP/2 is up; whether the TLS session was resumed.
  handshake(url: URL, resume: boolean, capture: boolean): Promise<boolean> {
    return new Promise((done, failed) => {
      let reused = false;
      // Closed once the server's SETTINGS came (it finished the handshake and set up its HTTP/2
      // session) and, when the session is to be kept, a TLS 1.3 ticket (sent after the handshake).
      let waiting = capture ? 2 : 1;
      const ready = () => --waiting === 0 && session.close(() => done(reused));
      const session = http2.connect(url, {
        createConnection: () => {
          const s = connectTls(url, this.address, resume ? this.session : undefined, (t) => {
            // The first ticket is kept (TLS 1.3 may send more than one).
            if (!capture) return;
            capture = false;
            this.session = t;
            ready();
          });
          s.once("secureConnect", () => {
            reused = s.isSessionReused();
          });
          return s;
        },
      });
      session.once("error", failed);
      session.once("remoteSettings", ready);
    });
  }
}

const agents = config.nodes.map((n, i) => new Agent(n.nodeId, n.token, hostAddress(i)));

// Runs `f` for every agent, `width` at a time; how many failed, and the first failure.
async function each(width: number, f: (a: Agent) => Promise<unknown>): Promise<{ failed: number; error?: string }> {
  let failed = 0;
  let error: string | undefined;
  for (let i = 0; i < agents.length; i += width) {
    for (const o of await Promise.allSettled(agents.slice(i, i + width).map(f))) {
      if (o.status === "fulfilled") continue;
      failed++;
      error ??= String(o.reason);
    }
  }
  return { failed, error };
}

const say = (o: object) => process.stdout.write(`${JSON.stringify(o)}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  const cmd = JSON.parse(line) as { do: string; url?: string; resume?: boolean; capture?: boolean };
  const t0 = performance.now();
  if (cmd.do === "idle") say({ done: "idle", ...(await each(100, (a) => a.idle())), ms: performance.now() - t0 });
  else if (cmd.do === "watch") say({ done: "watch", ...(await each(100, (a) => a.watch())), ms: performance.now() - t0 });
  else if (cmd.do === "handshakes") {
    let reused = 0;
    const out = await each(50, async (a) => {
      if (await a.handshake(new URL(cmd.url!), !!cmd.resume, !!cmd.capture)) reused++;
    });
    say({ done: "handshakes", ...out, reused, ms: performance.now() - t0 });
  }
}
stop.abort();
process.exit(0);
