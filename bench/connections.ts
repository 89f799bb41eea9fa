// Connection benchmark (npm run bench:connections): what one agent's connection costs the
// controller, beside the same run's bare node:http2 server with Node's default settings
// (h2-bare-server.ts, the ceiling: this machine's speed and memory figures vary from day to day).
//
// A load process of its own (connections-load.ts) plays --connections agents (default 2,000),
// each with a TLS + HTTP/2 connection from a loopback address of its own. Measured, on the
// controller (dist/controller/main.js, file store, generated TLS) and on the bare server:
//
//   idle     RSS and heap growth per connection once every agent connected and made one call
//   stream   the same once every agent also holds a WatchWorkOrders stream (as skippy does)
//   handshakes  server CPU per full TLS handshake, and per resumed one (the median of three
//            rounds, alternating, less what the server spends idle): on the controller the
//            agents offer the sessions it handed out before it was restarted on the same data
//            directory (a fleet reconnecting after a restart); on the bare server, sessions from
//            the same process (Node's ticket keys do not outlive it)
//
// Heap is V8's used heap plus external memory (buffers), RSS the resident set, both read by
// gc-probe.ts in the server after a garbage collection, once the phase settled.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { clientFor, startController } from "./controller-process.js";
import { probeArgs, probeMemory } from "./gc-memory.js";
import { procStats } from "./measure.js";
import { spawnJson, stopChild } from "./node-child.js";

const dist = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const ADMIN = "bench-admin-token-0123456789abcdef";
const { values } = parseArgs({ options: { connections: { type: "string", default: "2000" } } });
const N = Number(values.connections);
const settle = () => new Promise((r) => setTimeout(r, 2000));

/** A server under test: its process, where it listens, and the file its gc-probe.ts writes to. */
interface Target {
  child: ChildProcess;
  url: string;
  ca: string;
  probeFile: string;
}

// Preloaded into both servers: memory is read after a garbage collection.
const PROBE = probeArgs(dist);

async function bareServer(dataDir: string): Promise<Target> {
  const probeFile = `${dataDir}.probe`;
  const { child, value } = await spawnJson(
    [...PROBE, join(dist, "bench", "h2-bare-server.js"), dataDir],
    { BENCH_PROBE_FILE: probeFile },
    (l) => l.url as string | undefined,
  );
  return { child, url: value, ca: await readFile(join(dataDir, "tls", "ca.crt"), "utf8"), probeFile };
}

async function controller(dataDir: string): Promise<Target> {
  const probeFile = `${dataDir}.probe`;
  const args = ["--max-connections", String(N + 1000)];
  const c = await startController(dist, dataDir, ADMIN, PROBE, args, { BENCH_PROBE_FILE: probeFile });
  return { ...c, probeFile };
}

/** The load process: send it a command, get its answer. */
class Load {
  private readonly lines: AsyncIterator<string>;
  constructor(readonly child: ChildProcess) {
    this.lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  }
  static async start(dir: string, url: string, ca: string, nodes: { nodeId: string; token: string }[]): Promise<Load> {
    const file = join(dir, `load-${Date.now()}.json`);
    await writeFile(file, JSON.stringify({ url, ca, nodes }));
    return new Load(spawn(process.execPath, [join(dist, "bench", "connections-load.js"), file], { stdio: ["pipe", "pipe", "inherit"] }));
  }
  async do(cmd: Record<string, unknown>): Promise<{ failed: number; error?: string; reused?: number; ms: number }> {
    this.child.stdin!.write(`${JSON.stringify(cmd)}\n`);
    const next = await this.lines.next();
    if (next.done) throw new Error(`the load process exited during ${JSON.stringify(cmd)}`);
    const out = JSON.parse(next.value) as { failed: number; error?: string; reused?: number; ms: number };
    if (out.failed > 0) throw new Error(`${out.failed} of ${N} agents failed ${JSON.stringify(cmd)}, the first with ${out.error}`);
    return out;
  }
  stop(): Promise<void> {
    return stopChild(this.child);
  }
}

/** RSS (KB) and heap (V8's used heap and external memory, bytes) of the target after a collection. */
async function memory(t: Target): Promise<{ rssKb: number; heap: number }> {
  const m = await probeMemory(t.child, t.probeFile, 60_000);
  if (!m) throw new Error("the server's gc-probe did not answer within 60 s");
  return { rssKb: m.rss / 1024, heap: m.heap };
}

/** Per connection (KB): RSS and heap growth from `before` to `after`. */
function perConnection(before: { rssKb: number; heap: number }, after: { rssKb: number; heap: number }) {
  return { rss_kb: round((after.rssKb - before.rssKb) / N), heap_kb: round((after.heap - before.heap) / 1024 / N) };
}

const round = (x: number, digits = 1) => Number(x.toFixed(digits));

/** Server CPU (ms) per handshake of one handshakes command, less what the server spends idle. */
async function handshakeCpu(t: Target, load: Load, cmd: Record<string, unknown>): Promise<{ ms: number; reused: number }> {
  const q0 = procStats(t.child.pid!).cpuSeconds;
  const quiet0 = performance.now();
  await settle();
  const idleRate = (procStats(t.child.pid!).cpuSeconds - q0) / (performance.now() - quiet0);
  const c0 = procStats(t.child.pid!).cpuSeconds;
  const out = await load.do({ do: "handshakes", url: t.url, ...cmd });
  const spent = procStats(t.child.pid!).cpuSeconds - c0 - idleRate * out.ms;
  return { ms: round((1000 * spent) / N, 3), reused: out.reused ?? 0 };
}

const ROUNDS = 3;

/**
 * Full and resumed handshakes, alternating for ROUNDS rounds (the machine's pace drifts, and a
 * server just started is still busy with its first rounds): the median CPU of each. The agents
 * keep the sessions they hold (a ticket may be offered again), unless `capture` (the first full
 * round hands out the sessions the resumed ones offer).
 */
async function handshakes(t: Target, load: Load, capture: boolean) {
  const full: { ms: number; reused: number }[] = [];
  const resumed: { ms: number; reused: number }[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    full.push(await handshakeCpu(t, load, { resume: false, capture: capture && i === 0 }));
    resumed.push(await handshakeCpu(t, load, { resume: true }));
  }
  const median = (xs: { ms: number; reused: number }[]) => [...xs].sort((a, b) => a.ms - b.ms)[Math.floor(xs.length / 2)]!;
  return { full: median(full), resumed: median(resumed) };
}

/** Idle connections, then streams: memory per connection on `t`. */
async function memoryPhases(t: Target, load: Load) {
  await settle();
  const base = await memory(t);
  await load.do({ do: "idle" });
  await settle();
  const idle = await memory(t);
  await load.do({ do: "watch" });
  await settle();
  const stream = await memory(t);
  return { idle: perConnection(base, idle), stream: perConnection(base, stream), rss_mb_with_streams: round(stream.rssKb / 1024) };
}

const work = await mkdtemp(join(resolve(dist, ".."), ".bench-data-connections-"));
const running: ChildProcess[] = [];
try {
  // The ceiling: a bare node:http2 server with default settings.
  const bare = await bareServer(join(work, "bare"));
  running.push(bare.child);
  const bareNodes = Array.from({ length: N }, (_, i) => ({ nodeId: `sim-${i}`, token: "none" }));
  let load = await Load.start(work, bare.url, bare.ca, bareNodes);
  running.push(load.child);
  const bareMem = await memoryPhases(bare, load);
  const { full: bareFull, resumed: bareResumed } = await handshakes(bare, load, true);
  await load.stop();
  await stopChild(bare.child);

  // The controller, its nodes registered by the admin.
  const dataDir = join(work, "controller");
  let ctl = await controller(dataDir);
  running.push(ctl.child);
  const admin = clientFor(NodeService, ctl.url, ctl.ca, { "x-admin-token": ADMIN });
  const nodes: { nodeId: string; token: string }[] = [];
  for (let i = 0; i < N; i += 25) {
    const ids = Array.from({ length: Math.min(25, N - i) }, (_, k) => `sim-${i + k}`);
    nodes.push(...(await Promise.all(ids.map(async (nodeId) => ({ nodeId, token: (await admin.registerNode({ nodeId })).token })))));
  }
  load = await Load.start(work, ctl.url, ctl.ca, nodes);
  running.push(load.child);
  const ctlMem = await memoryPhases(ctl, load);
  // Restarted on the same data directory: the agents offer the sessions of the first process.
  await stopChild(ctl.child);
  ctl = await controller(dataDir);
  running.push(ctl.child);
  const { full: ctlFull, resumed: ctlResumed } = await handshakes(ctl, load, false);
  await load.stop();

  const kb = (m: { rss_kb: number; heap_kb: number }) => `${m.rss_kb} KB RSS, ${m.heap_kb} KB heap`;
  console.log(`connections benchmark: ${N} TLS + HTTP/2 connections from a separate load process (${process.version})`);
  console.log("| per connection | controller | bare node:http2, default settings (same run) |");
  console.log("|---|---|---|");
  console.log(`| idle (one call made) | ${kb(ctlMem.idle)} | ${kb(bareMem.idle)} |`);
  console.log(`| with a WatchWorkOrders stream | ${kb(ctlMem.stream)} | ${kb(bareMem.stream)} |`);
  console.log(`| server CPU, full TLS handshake | ${ctlFull.ms} ms | ${bareFull.ms} ms |`);
  console.log(
    `| server CPU, resumed (controller: after its restart) | ${ctlResumed.ms} ms, ${ctlResumed.reused}/${N} resumed | ${bareResumed.ms} ms, ${bareResumed.reused}/${N} resumed |`,
  );
  const figures = {
    connections: N,
    controller: { ...ctlMem, full: ctlFull, resumed: ctlResumed },
    bare: { ...bareMem, full: bareFull, resumed: bareResumed },
  };
  console.log(JSON.stringify({ bench: "connections", node: process.version, ...figures }));
} catch (e) {
  console.error(`bench:connections failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  process.exitCode = 1;
} finally {
  for (const c of running) await stopChild(c);
  await rm(work, { recursive: true, force: true });
  process.exit(process.exitCode ?? 0);
}
