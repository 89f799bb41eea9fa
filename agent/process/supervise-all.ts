// The periodic pass the agent runs (e.g. with every heartbeat): each module that should be
// running but whose process died is started again, and every module is observed for the
// heartbeat. A module that keeps dying soon after its start is restarted less and less often
// (1 s, 2 s, 4 s … up to 5 minutes), like systemd's restart limits, so a broken version does not
// spin. While it waits out that backoff it is reported "restarting", so the controller's process
// reconciler leaves it to this supervisor (and a START order keeps the count of quick deaths). A
// module an order is working on right now is only observed: the order decides.
import type { Logger } from "pino";
import type { ProcessObservation } from "../../gen/skipper/v1/resource_pb.js";
import { launchOf, livePid, observeModule } from "./module-control.js";
import {
  QUICK_DEATH_MS,
  inCrashBackoff,
  isModuleLocked,
  knownModules,
  launchDigest,
  readRunState,
  withModuleLock,
  writeRunState,
} from "./run-state.js";
import { runnerOf } from "./systemd.js";

export interface SuperviseOptions {
  log?: Logger;
  /** For tests: the clock. */
  now?: () => number;
}

/** Restarts modules that should run but died; returns every module's observation. */
export async function superviseAll(workDir: string, opts: SuperviseOptions = {}): Promise<ProcessObservation[]> {
  const out: ProcessObservation[] = [];
  for (const module of await knownModules(workDir)) {
    try {
      if (!isModuleLocked(workDir, module)) await withModuleLock(workDir, module, () => reviveIfDead(workDir, module, opts));
      out.push(await observeModule(workDir, module, false, opts.now?.()));
    } catch (e) {
      // One broken module (unreadable state, version removed by hand) must not hide the others.
      opts.log?.warn({ action: "supervise", module, err: e }, `could not supervise process module ${module}`);
    }
  }
  return out;
}

async function reviveIfDead(workDir: string, module: string, opts: SuperviseOptions): Promise<void> {
  const state = await readRunState(workDir, module);
  if (state.desired !== "running" || (await livePid(workDir, state)) > 0) return;
  // A unit systemd restarts on its own (killed: auto-restart after RestartSec) is left to it.
  if (await runnerOf(state).restarting?.(state)) return;
  const now = opts.now?.() ?? Date.now();
  const startedMs = Date.parse(state.startedAt) || 0;
  if (inCrashBackoff(state, now)) return;
  const crashes = now - startedMs < QUICK_DEATH_MS ? state.crashes + 1 : 0;
  const launch = await launchOf(workDir, module);
  const s = await runnerOf(state).start(workDir, launch);
  await writeRunState(workDir, {
    ...state,
    version: launch.version,
    launchDigest: launchDigest(launch),
    pid: s.pid,
    startTicks: s.startTicks,
    systemdUnit: s.systemdUnit,
    startedAt: new Date(now).toISOString(),
    crashes,
  });
  opts.log?.info(
    { action: "supervise", module, metadata: { version: launch.version, pid: s.pid, crashes } },
    `restarted process module ${module}`,
  );
}
