// Fleet benchmark (npm run bench:fleet -- [--agents 10000] [--seconds 60]): issue 38's targets
// for a fleet on sessions, against the same run's bare node:http2 server (h2-bare-server.ts:
// Node's default settings, no Connect, no store; the ceiling, as bench:connections has it).
//
// A load process of its own (session-fleet-load.ts) plays --agents agents, each on a TLS +
// HTTP/2 connection of its own from a loopback address of its own, each holding a Session:
// hello, welcome, one full heartbeat report, then a keepalive every welcome.heartbeat_interval_ms
// (10 s); lost, it comes back after skippy's wait (full jitter, 0.5 s doubling to 30 s). The
// controller runs as its own process (dist/controller/main.js, file store, generated TLS), its
// nodes registered by the admin, each agent presenting its node's token. On each server:
//
//   steady   every session up: the server's CPU (% of one core) over --seconds, then its RSS and
//            held heap (V8's used heap plus external memory) after a collection (gc-probe.ts)
//   storm    the server is killed (SIGKILL) and started again on the same data directory and port;
//            the time until every agent is welcomed again, from the kill and from the new
//            process's listen line, and its peak RSS meanwhile (sampled every 100 ms); then its
//            memory after a collection
//
// Options: --agents, --seconds, --storm-timeout <s> (180), --no-bare, --controller-arg <arg>
// (repeated), --controller-env KEY=VALUE (repeated), --controller-log <file>, --heap-snapshots <dir> (the controller's heap with no agent
// and with every session up, to be compared object by object).
//
// Targets (issue 38): steady, the controller under 25 % of a core and 1 GiB RSS; the storm, every
// agent back within 60 s of the kill and RSS never past 1 GiB.
import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdtemp, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
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
const { values } = parseArgs({
  options: {
    agents: { type: "string", default: "10000" },
    seconds: { type: "string", default: "60" },
    // How long the storm may take before the bench gives up on it (s).
    "storm-timeout": { type: "string", default: "180" },
    "no-bare": { type: "boolean", default: false },
    // More controller options (each its own --controller-arg, e.g. --controller-arg=--max-unvouched-connections=20000).
    "controller-arg": { type: "string", multiple: true, default: [] },
    // Environment of the controller's process (each its own --controller-env KEY=VALUE, e.g. MALLOC_ARENA_MAX=2).
    "controller-env": { type: "string", multiple: true, default: [] },
    // Appends the controller's JSON log (both processes, before and after the storm) to this file.
    "controller-log": { type: "string" },
    // Writes heap snapshots of the controller into this directory: with its nodes registered and
    // no agent (base.heapsnapshot), and with every session up (steady.heapsnapshot).
    "heap-snapshots": { type: "string" },
  },
});
const N = Number(values.agents);
const SECONDS = Number(values.seconds);
const STORM_TIMEOUT_MS = Number(values["storm-timeout"]) * 1000;
if (!(N > 0 && N <= 60_000 && SECONDS > 0 && STORM_TIMEOUT_MS > 0))
  throw new Error("--agents (1-60000), --seconds and --storm-timeout must be positive");
const GIB_MB = 1024;
const log = (line: string) => console.error(`fleet: ${line}`);
const round = (x: number, digits = 1) => Number(x.toFixed(digits));

/** A server under test: how to start it (again, on the same data and port), and what it is now. */
interface Target {
  name: string;
  start(port: number): Promise<{ child: ChildProcess; url: string; ca: string }>;
  probeFile: string;
  child?: ChildProcess;
  /** Started with a heap-snapshot signal (the controller, with --heap-snapshots). */
  snapshots?: boolean;
}

interface LoadAnswer {
  ok: boolean;
  ms: number;
  up: number;
  lastWelcomeAt?: number;
  counts: Record<string, number>;
  errors: Record<string, string>;
}

/** The load process: send it a command, get its answer. */
class Load {
  private readonly lines: AsyncIterator<string>;
  private constructor(readonly child: ChildProcess) {
    this.lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  }
  static async start(dir: string, url: string, ca: string, nodes: { nodeId: string; token: string }[]): Promise<Load> {
    const file = join(dir, `load-${Date.now()}.json`);
    await writeFile(file, JSON.stringify({ url, ca, nodes }));
    const args = ["--max-old-space-size=4096", join(dist, "bench", "session-fleet-load.js"), file];
    return new Load(spawn(process.execPath, args, { stdio: ["pipe", "pipe", "inherit"] }));
  }
  /** Its answer to `cmd`; throws when it says not ok, unless `mayFail`. */
  async do(cmd: Record<string, unknown>, mayFail = false): Promise<LoadAnswer> {
    this.child.stdin!.write(`${JSON.stringify(cmd)}\n`);
    const next = await this.lines.next();
    if (next.done) throw new Error(`the load process exited during ${JSON.stringify(cmd)}`);
    const out = JSON.parse(next.value) as LoadAnswer;
    if (!out.ok && !mayFail)
      throw new Error(`${JSON.stringify(cmd)}: ${out.up} of ${N} agents up; ${JSON.stringify(out.counts)}; ${JSON.stringify(out.errors)}`);
    return out;
  }
  stop(): Promise<void> {
    return stopChild(this.child);
  }
}

/** Memory after a collection (MB), or NaN each when the probe did not answer. */
async function memory(t: Target): Promise<{ rssMb: number; heapMb: number; committedMb: number }> {
  const m = await probeMemory(t.child!, t.probeFile, 30_000);
  const mb = (x: number | undefined) => (x === undefined ? Number.NaN : x / 2 ** 20);
  return { rssMb: mb(m?.rss), heapMb: mb(m?.heap), committedMb: mb(m?.committed) };
}

/** What one server measured. */
interface Figures {
  cpuPercent: number;
  /** RSS after GC before the agents came (the nodes registered, on the controller). */
  baseRssMb: number;
  rssMb: number;
  heapMb: number;
  /** V8's committed heap after GC (used or not). */
  committedMb: number;
  stormFromKillS: number;
  stormFromListenS: number;
  /** Agents back when the storm was done or given up on. */
  stormBack: number;
  restartS: number;
  stormPeakRssMb: number;
  afterStorm: { rssMb: number; heapMb: number; committedMb: number };
  counts: Record<string, number>;
  errors: Record<string, string>;
}

const SNAPSHOT_SIGNAL = "SIGUSR1";

/** Has `t`'s process write a heap snapshot (the controller's, when --heap-snapshots names a directory) as `<label>.heapsnapshot`. */
async function heapSnapshot(t: Target, label: string): Promise<void> {
  const dir = values["heap-snapshots"];
  if (!dir || !t.snapshots) return;
  const before = new Set(await readdir(dir));
  t.child!.kill(SNAPSHOT_SIGNAL);
  // The snapshot is written on the process's main thread: the probe answers once it is done.
  let made: string | undefined;
  while (!made) {
    await new Promise((r) => setTimeout(r, 200));
    made = (await readdir(dir)).find((f) => f.endsWith(".heapsnapshot") && !before.has(f));
  }
  await probeMemory(t.child!, t.probeFile, 300_000);
  await rename(join(dir, made), join(dir, `${label}.heapsnapshot`));
  log(`${t.name}: heap snapshot ${join(dir, `${label}.heapsnapshot`)}`);
}

/** Steady state, then the storm, on `t` with `load`'s agents. */
async function measure(t: Target, load: Load, port: number): Promise<Figures> {
  await heapSnapshot(t, "base");
  const base = await memory(t);
  const up = await load.do({ do: "up", width: 200 });
  log(`${t.name}: ${N} sessions up in ${(up.ms / 1000).toFixed(1)} s; settling a heartbeat interval`);
  // A keepalive round, so every agent's timer runs and the first reports are handled.
  await new Promise((r) => setTimeout(r, 12_000));
  const pid = t.child!.pid!;
  const c0 = procStats(pid).cpuSeconds;
  const w0 = performance.now();
  await new Promise((r) => setTimeout(r, SECONDS * 1000));
  const cpuPercent = (100 * (procStats(pid).cpuSeconds - c0)) / ((performance.now() - w0) / 1000);
  const steady = await memory(t);
  await heapSnapshot(t, "steady");
  log(`${t.name}: steady ${cpuPercent.toFixed(1)} % of a core, RSS ${steady.rssMb.toFixed(0)} MB, heap ${steady.heapMb.toFixed(0)} MB`);

  // The storm: kill -9, start again on the same data directory and port.
  const killedAt = Date.now();
  t.child!.kill("SIGKILL");
  await new Promise((r) => t.child!.once("exit", r));
  await load.do({ do: "down", timeoutMs: 60_000 });
  // The new process's probe counts from 1 again.
  await rm(t.probeFile, { force: true });
  const started = await t.start(port);
  const listenAt = Date.now();
  t.child = started.child;
  let peak = 0;
  const sample = () => {
    try {
      peak = Math.max(peak, procStats(started.child.pid!).rssMb);
    } catch {
      // exited
    }
  };
  sample();
  const sampler = setInterval(sample, 100);
  let back: LoadAnswer;
  try {
    back = await load.do({ do: "back", timeoutMs: STORM_TIMEOUT_MS }, true);
  } finally {
    clearInterval(sampler);
  }
  sample();
  // Not all back within --storm-timeout: NaN, and how many were.
  const stormFromKillS = back.ok ? (back.lastWelcomeAt! - killedAt) / 1000 : Number.NaN;
  log(
    `${t.name}: storm, ${back.up} of ${N} back ${((Date.now() - killedAt) / 1000).toFixed(1)} s after the kill, peak RSS ${peak.toFixed(0)} MB`,
  );
  const afterStorm = await memory(t);
  return {
    cpuPercent,
    ...steady,
    baseRssMb: base.rssMb,
    stormFromKillS,
    stormFromListenS: back.ok ? (back.lastWelcomeAt! - listenAt) / 1000 : Number.NaN,
    stormBack: back.up,
    restartS: (listenAt - killedAt) / 1000,
    stormPeakRssMb: peak,
    afterStorm,
    counts: back.counts,
    errors: back.errors,
  };
}

const work = await mkdtemp(join(resolve(dist, ".."), ".bench-data-fleet-"));
const running: ChildProcess[] = [];
const PROBE = probeArgs(dist);
const portOf = (url: string) => Number(new URL(url).port);
try {
  let bare: Figures | undefined;
  if (!values["no-bare"]) {
    const dir = join(work, "bare");
    const t: Target = {
      name: "bare node:http2",
      probeFile: `${dir}.probe`,
      async start(port: number) {
        const { child, value } = await spawnJson(
          [...PROBE, join(dist, "bench", "h2-bare-server.js"), dir, String(port)],
          { BENCH_PROBE_FILE: `${dir}.probe` },
          (l) => l.url as string | undefined,
        );
        running.push(child);
        return { child, url: value, ca: await readFile(join(dir, "tls", "ca.crt"), "utf8") };
      },
    };
    const first = await t.start(0);
    t.child = first.child;
    const nodes = Array.from({ length: N }, (_, i) => ({ nodeId: `sim-${i}`, token: "none" }));
    const load = await Load.start(work, first.url, first.ca, nodes);
    running.push(load.child);
    bare = await measure(t, load, portOf(first.url));
    await load.stop();
    await stopChild(t.child!);
  }

  const dataDir = join(work, "controller");
  const t: Target = {
    name: "controller",
    probeFile: `${dataDir}.probe`,
    snapshots: Boolean(values["heap-snapshots"]),
    async start(port: number) {
      // Room for every agent and the admin client; the per-address cap is left as it is (each agent has an address of its own).
      const args = ["--max-connections", String(N + 100), "--listen", `127.0.0.1:${port}`, ...(values["controller-arg"] ?? [])];
      const snapshots = values["heap-snapshots"]
        ? [`--heapsnapshot-signal=${SNAPSHOT_SIGNAL}`, `--diagnostic-dir=${values["heap-snapshots"]}`]
        : [];
      const c = await startController(dist, dataDir, ADMIN, [...PROBE, ...snapshots], args, {
        ...controllerEnv(values["controller-env"] ?? []),
        BENCH_PROBE_FILE: `${dataDir}.probe`,
      });
      running.push(c.child);
      if (values["controller-log"]) c.child.stdout!.pipe(createWriteStream(values["controller-log"], { flags: "a" }));
      return c;
    },
  };
  const first = await t.start(0);
  t.child = first.child;
  const admin = clientFor(NodeService, first.url, first.ca, { "x-admin-token": ADMIN });
  const nodes: { nodeId: string; token: string }[] = [];
  const r0 = performance.now();
  for (let i = 0; i < N; i += 50) {
    const ids = Array.from({ length: Math.min(50, N - i) }, (_, k) => `fleet-${String(i + k).padStart(5, "0")}`);
    nodes.push(...(await Promise.all(ids.map(async (nodeId) => ({ nodeId, token: (await admin.registerNode({ nodeId })).token })))));
    if ((i + 50) % 1000 === 0) log(`controller: ${i + 50} of ${N} nodes registered`);
  }
  log(`controller: ${N} nodes registered in ${((performance.now() - r0) / 1000).toFixed(0)} s`);
  const load = await Load.start(work, first.url, first.ca, nodes);
  running.push(load.child);
  const ctl = await measure(t, load, portOf(first.url));
  await load.stop();
  printFigures(ctl, bare);
} catch (e) {
  console.error(`bench:fleet failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  process.exitCode = 1;
} finally {
  for (const c of running) c.kill("SIGKILL");
  await rm(work, { recursive: true, force: true });
  process.exit(process.exitCode ?? 0);
}

function printFigures(ctl: Figures, bare: Figures | undefined): void {
  const b = (f: (x: Figures) => string) => (bare ? f(bare) : "-");
  const met = (ok: boolean) => (ok ? "met" : "MISSED");
  const storm = (x: Figures) =>
    Number.isFinite(x.stormFromKillS)
      ? `${round(x.stormFromKillS)} s (${round(x.stormFromListenS)} s)`
      : `${x.stormBack} of ${N} back after ${STORM_TIMEOUT_MS / 1000} s`;
  const perAgentKb = (x: Figures) => round(((x.rssMb - x.baseRssMb) * 1024) / N, 0);
  console.log(
    `fleet benchmark: ${N} agents on sessions from a separate load process, keepalive every 10 s, steady ${SECONDS} s (${process.version})`,
  );
  console.log("| figure | controller | bare node:http2 (same run) | target | |");
  console.log("|---|---|---|---|---|");
  console.log(
    `| steady CPU, % of one core | ${round(ctl.cpuPercent)} % | ${b((x) => `${round(x.cpuPercent)} %`)} | < 25 % | ${met(ctl.cpuPercent < 25)} |`,
  );
  console.log(
    `| steady RSS after GC (growth per agent) | ${round(ctl.rssMb, 0)} MB (${perAgentKb(ctl)} KB) | ${b((x) => `${round(x.rssMb, 0)} MB (${perAgentKb(x)} KB)`)} | < 1024 MB | ${met(ctl.rssMb < GIB_MB)} |`,
  );
  console.log(`| steady heap held after GC | ${round(ctl.heapMb, 0)} MB | ${b((x) => `${round(x.heapMb, 0)} MB`)} | | |`);
  console.log(
    `| V8 heap committed after GC: steady / after the storm | ${round(ctl.committedMb, 0)} / ${round(ctl.afterStorm.committedMb, 0)} MB | ${b((x) => `${round(x.committedMb, 0)} / ${round(x.afterStorm.committedMb, 0)} MB`)} | | |`,
  );
  console.log(
    `| storm: all back, from the kill (from the restart's listen) | ${storm(ctl)} | ${b(storm)} | < 60 s | ${met(ctl.stormFromKillS < 60)} |`,
  );
  console.log(`| storm: restart to listening | ${round(ctl.restartS)} s | ${b((x) => `${round(x.restartS)} s`)} | | |`);
  console.log(
    `| storm: peak RSS | ${round(ctl.stormPeakRssMb, 0)} MB | ${b((x) => `${round(x.stormPeakRssMb, 0)} MB`)} | < 1024 MB | ${Number.isFinite(ctl.stormFromKillS) ? met(ctl.stormPeakRssMb < GIB_MB) : "not judged: not all back"} |`,
  );
  console.log(
    `| after the storm: RSS / heap after GC | ${round(ctl.afterStorm.rssMb, 0)} / ${round(ctl.afterStorm.heapMb, 0)} MB | ${b((x) => `${round(x.afterStorm.rssMb, 0)} / ${round(x.afterStorm.heapMb, 0)} MB`)} | | |`,
  );
  console.log(`agents' counts (controller): ${JSON.stringify(ctl.counts)}; first errors: ${JSON.stringify(ctl.errors)}`);
  if (bare) console.log(`agents' counts (bare): ${JSON.stringify(bare.counts)}`);
  console.log(
    `controller options: ${JSON.stringify(values["controller-arg"] ?? [])}, environment: ${JSON.stringify(values["controller-env"] ?? [])}`,
  );
  console.log(JSON.stringify({ bench: "fleet", agents: N, seconds: SECONDS, node: process.version, controller: ctl, bare }));
}

function controllerEnv(pairs: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const p of pairs) {
    const at = p.indexOf("=");
    if (at <= 0) throw new Error(`--controller-env takes KEY=VALUE, got '${p}'`);
    env[p.slice(0, at)] = p.slice(at + 1);
  }
  return env;
}
