// The verbs the process executors are made of: start (or adopt) a module's active version, stop
// it, and activate a version (switch the symlink, restart, and if the new process does not
// survive its settle time, switch back and restart the old one). Each start is verified the same
// way: the process must still be alive `settleMs` after it was started.
import { create } from "@bufbuild/protobuf";
import { ProcessObservationSchema, type ProcessObservation } from "../../gen/skipper/v1/resource_pb.js";
import { sleep } from "../engine/sleep.js";
import { ProcessError, isProcessError, throwIfAborted } from "./layout.js";
import {
  inCrashBackoff,
  launchDigest,
  readRunState,
  writeRunState,
  type Launch,
  type ProcessRunner,
  type RunState,
  type Started,
} from "./run-state.js";
import { START_MARK, logTail, resolveProgram } from "./supervisor.js";
import { runnerOf } from "./systemd.js";
import { activeVersion, hasActiveLink, installedVersions, readVersionMeta, switchActive, versionDir } from "./versions.js";

export interface ControlOptions {
  /** Who starts new processes (the agent's supervisor or systemd). */
  runner: ProcessRunner;
  /** How long a process may take to exit after SIGTERM. */
  graceMs: number;
  /** How long a started process must stay alive to count as started. */
  settleMs: number;
  signal?: AbortSignal;
}

/** How a start went: alive after the settle time, or dead with the end of its log. */
export type StartResult = { alive: true; pid: number } | { alive: false; logTail: string };

/** The launch of `version` (default: the active one); MODULE_NOT_INSTALLED / VERSION_NOT_INSTALLED. */
export async function launchOf(workDir: string, module: string, version?: string): Promise<Launch> {
  const v = version ?? (await activeVersion(workDir, module));
  if (!v) throw new ProcessError("MODULE_NOT_INSTALLED", `module ${module} has no active version on this node`);
  const meta = await readVersionMeta(workDir, module, v);
  if (!meta || !(await installedVersions(workDir, module)).includes(v)) {
    throw new ProcessError(
      version ? "VERSION_NOT_INSTALLED" : "MODULE_NOT_INSTALLED",
      `version ${v} of ${module} is not installed on this node`,
    );
  }
  return { module, version: v, argv: meta.argv, env: meta.env };
}

/** The pid of the module's live process, 0 when none. */
export async function livePid(workDir: string, state: RunState): Promise<number> {
  return state.pid > 0 || state.systemdUnit ? runnerOf(state).livePid(workDir, state) : 0;
}

/**
 * Makes the active version run: a live process of it (same argv and env) is adopted as it is, no
 * second one is started; otherwise it is (re)started and verified. `fresh` restarts a live one.
 */
export async function ensureRunning(
  workDir: string,
  module: string,
  opts: ControlOptions,
  fresh = false,
): Promise<StartResult & { adopted: boolean }> {
  const launch = await launchOf(workDir, module);
  const state = await readRunState(workDir, module);
  const pid = await livePid(workDir, state);
  if (pid > 0 && state.launchDigest === launchDigest(launch) && !fresh) {
    if (state.desired !== "running") await writeRunState(workDir, { ...state, desired: "running" });
    return { alive: true, pid, adopted: true };
  }
  throwIfAborted(opts.signal);
  await runnerOf(state).stop(workDir, state, opts.graceMs);
  // The quick deaths in a row stay counted: a START does not lift the supervisor's backoff for
  // good (the supervisor counts this start's death, if it comes soon, as one more).
  return { ...(await startVerified(workDir, state, launch, opts, state.crashes)), adopted: false };
}

/** Stops the module's process (if any) and records that it should stay stopped. */
export async function stopModule(workDir: string, module: string, opts: ControlOptions): Promise<void> {
  if (!(await hasActiveLink(workDir, module)))
    throw new ProcessError("MODULE_NOT_INSTALLED", `module ${module} is not installed on this node`);
  const state = await readRunState(workDir, module);
  await runnerOf(state).stop(workDir, state, opts.graceMs);
  await writeRunState(workDir, { ...state, desired: "stopped", pid: 0, startTicks: "" });
}

export type ActivateResult = StartResult & { restored: string; restoredAlive: boolean };

/**
 * Switches the module to `launch.version` and (re)starts it. When the new process dies within the
 * settle time and another version was active before, that one is made active and started again.
 */
export async function activate(workDir: string, launch: Launch, opts: ControlOptions): Promise<ActivateResult> {
  const module = launch.module;
  const state = await readRunState(workDir, module);
  const from = await activeVersion(workDir, module);
  // A command the new version does not have is refused before anything changes.
  await resolveProgram(versionDir(workDir, module, launch.version), launch.argv[0] ?? "");
  throwIfAborted(opts.signal);
  if (from !== launch.version) await switchActive(workDir, module, launch.version);
  const next: RunState = { ...state, previousVersion: from && from !== launch.version ? from : state.previousVersion };
  await runnerOf(state).stop(workDir, state, opts.graceMs);
  const started = await startVerified(workDir, next, launch, opts);
  if (started.alive || !from || from === launch.version) return { ...started, restored: "", restoredAlive: false };
  // The new version died at once: go back to what ran before, as if this attempt never happened.
  await switchActive(workDir, module, from);
  const failed = await readRunState(workDir, module);
  await runnerOf(failed).stop(workDir, failed, opts.graceMs);
  const back = { ...failed, previousVersion: state.previousVersion };
  if (state.desired !== "running") {
    await writeRunState(workDir, { ...back, desired: "stopped", version: from, pid: 0, startTicks: "" });
    return { ...started, restored: from, restoredAlive: false };
  }
  const again = await startVerified(workDir, back, await launchOf(workDir, module, from), { ...opts, signal: undefined });
  return { ...started, restored: from, restoredAlive: again.alive };
}

/**
 * Starts `launch`, records the process (with `crashes` quick deaths in a row: 0 for a version just
 * activated), and checks it is still alive after the settle time.
 */
async function startVerified(workDir: string, state: RunState, launch: Launch, opts: ControlOptions, crashes = 0): Promise<StartResult> {
  let s: Started;
  try {
    s = await opts.runner.start(workDir, launch);
  } catch (e) {
    if (!isProcessError(e) || e.code === "CANCELLED") throw e;
    await writeRunState(workDir, {
      ...state,
      desired: "running",
      version: launch.version,
      pid: 0,
      startTicks: "",
      startedAt: new Date().toISOString(),
    });
    return { alive: false, logTail: e.message };
  }
  const now: RunState = {
    ...state,
    desired: "running",
    version: launch.version,
    launchDigest: launchDigest(launch),
    pid: s.pid,
    startTicks: s.startTicks,
    systemdUnit: s.systemdUnit,
    startedAt: new Date().toISOString(),
    crashes,
  };
  await writeRunState(workDir, now);
  await sleep(opts.settleMs, opts.signal ?? new AbortController().signal);
  throwIfAborted(opts.signal);
  const pid = await livePid(workDir, now);
  if (pid > 0) return { alive: true, pid };
  // Only this start's output: earlier runs wrote to the same log.
  const tail = await logTail(workDir, launch.module);
  const mark = tail.lastIndexOf(START_MARK);
  return { alive: false, logTail: mark >= 0 ? tail.slice(mark) : tail };
}

/**
 * The module as a heartbeat or a result reports it. "restarting": dead, and its runner starts it
 * again on its own (systemd's Restart=, or the agent's supervisor once its crash backoff is over).
 */
export async function observeModule(
  workDir: string,
  module: string,
  resolvedOffline = false,
  nowMs = Date.now(),
): Promise<ProcessObservation> {
  const state = await readRunState(workDir, module);
  const pid = await livePid(workDir, state);
  const active = await activeVersion(workDir, module);
  const meta = active ? await readVersionMeta(workDir, module, active) : undefined;
  return create(ProcessObservationSchema, {
    module,
    activeVersion: active,
    previousVersion: state.previousVersion,
    installedVersions: await installedVersions(workDir, module),
    state:
      pid > 0
        ? "running"
        : state.desired !== "running"
          ? "stopped"
          : inCrashBackoff(state, nowMs) || (await runnerOf(state).restarting?.(state))
            ? "restarting"
            : "exited",
    pid,
    resolvedOffline: resolvedOffline || state.resolvedOffline,
    systemdUnit: state.systemdUnit,
    activeSha256: meta?.sha256 ?? "",
    launchDigest: state.launchDigest,
  });
}
