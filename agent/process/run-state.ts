// What the agent remembers about a module's process between runs: <workDir>/run/<module>.json.
// It is the only memory there is (the agent holds none), so an agent that restarts finds its
// processes again from it. Also here: the runner interface (the agent's own supervisor or
// systemd) and a per-module lock, so the periodic supervisor never restarts a process a deploy
// has just stopped on purpose.
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { MODULE_PATTERN, modulePaths, readJson, writeFileAtomic } from "./layout.js";

export interface RunState {
  module: string;
  /** What the orders asked for: a "running" module whose process died is started again. */
  desired: "running" | "stopped";
  /** The version the process was started from, and a digest of its argv and env. */
  version: string;
  launchDigest: string;
  /** The version active before the last switch: where ROLLBACK goes. */
  previousVersion: string;
  /** 0 when no process was started. */
  pid: number;
  /** The process's start time (clock ticks since boot), so a recycled pid is not taken for it. */
  startTicks: string;
  startedAt: string;
  /** Quick deaths in a row; the supervisor waits longer before each restart. */
  crashes: number;
  /** Set when systemd runs the process instead of the agent. */
  systemdUnit: string;
  /** The last rollback order applied, so a re-run of it (agent restart) does not roll back twice. */
  rollbackOrderId: string;
  /** The last deploy asked for "latest" and could not reach the source: it runs the highest installed version. */
  resolvedOffline: boolean;
}

/** What starting a module needs: its active version's command. */
export interface Launch {
  module: string;
  version: string;
  /** argv[0] relative to the version directory. */
  argv: string[];
  env: Record<string, string>;
}

export { launchDigest } from "../../common/process-launch.js";

export interface Started {
  pid: number;
  startTicks: string;
  systemdUnit: string;
}

/** Runs a module's process: the agent's own supervisor, or systemd. */
export interface ProcessRunner {
  readonly kind: "agent" | "systemd";
  start(workDir: string, launch: Launch): Promise<Started>;
  /** Stops the process `state` records; a process already gone is fine. */
  stop(workDir: string, state: RunState, graceMs: number): Promise<void>;
  /** The pid of the module's live process, 0 when there is none. */
  livePid(workDir: string, state: RunState): Promise<number>;
  /** Whether the runner itself is about to start the dead process again (systemd's Restart=). */
  restarting?(state: RunState): Promise<boolean>;
}

/** A process that lived less than this counts as a crash for the restart backoff. */
export const QUICK_DEATH_MS = 60_000;
const MAX_BACKOFF_MS = 300_000;

/**
 * Whether the agent's own supervisor is holding a dead module back (1 s, 2 s, 4 s … 5 min after its
 * last start, doubling per quick death in a row): it starts it again once that is over.
 */
export function inCrashBackoff(state: RunState, nowMs: number): boolean {
  if (state.desired !== "running" || state.systemdUnit) return false;
  return nowMs - (Date.parse(state.startedAt) || 0) < Math.min(1000 * 2 ** state.crashes, MAX_BACKOFF_MS);
}

/** A module's run state, or a stopped one when it has none yet. */
export async function readRunState(workDir: string, module: string): Promise<RunState> {
  const s = await readJson<Partial<RunState>>(modulePaths(workDir, module).state);
  return {
    module,
    desired: s?.desired === "running" ? "running" : "stopped",
    version: s?.version ?? "",
    launchDigest: s?.launchDigest ?? "",
    previousVersion: s?.previousVersion ?? "",
    pid: s?.pid ?? 0,
    startTicks: s?.startTicks ?? "",
    startedAt: s?.startedAt ?? "",
    crashes: s?.crashes ?? 0,
    systemdUnit: s?.systemdUnit ?? "",
    rollbackOrderId: s?.rollbackOrderId ?? "",
    resolvedOffline: s?.resolvedOffline === true,
  };
}

/** Records a module's run state atomically (temp file, fsync, rename). */
export function writeRunState(workDir: string, state: RunState): Promise<void> {
  return writeFileAtomic(modulePaths(workDir, state.module).state, `${JSON.stringify(state, null, 2)}\n`);
}

/** The modules that have a run state. */
export async function knownModules(workDir: string): Promise<string[]> {
  try {
    const names = await readdir(join(workDir, "run"));
    return names
      .filter((n) => n.endsWith(".json"))
      .map((n) => n.slice(0, -5))
      .filter((m) => MODULE_PATTERN.test(m))
      .sort();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw e;
  }
}

const locks = new Map<string, Promise<unknown>>();

/** Runs `fn` while holding the module's lock (within this agent process). */
export function withModuleLock<T>(workDir: string, module: string, fn: () => Promise<T>): Promise<T> {
  const key = `${workDir}\0${module}`;
  const prev = locks.get(key) ?? Promise.resolve();
  const run = prev.then(fn, fn);
  const tail = run.catch(() => undefined);
  locks.set(key, tail);
  void tail.then(() => {
    if (locks.get(key) === tail) locks.delete(key);
  });
  return run;
}

/** Whether an order is working on the module right now. */
export function isModuleLocked(workDir: string, module: string): boolean {
  return locks.has(`${workDir}\0${module}`);
}
