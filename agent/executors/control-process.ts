// The control_process executor: starts, stops, restarts or rolls back a process module that
// deploy_process installed.
//   check the order (module name, operation, version)                         -> PROCESS_INVALID
//   START    the active version runs; a live process is adopted, never doubled
//   STOP     SIGTERM, SIGKILL after the grace period; stopping a stopped module is fine
//   RESTART  stop, then start
//   ROLLBACK switch the active symlink to the previous version (or `version`) and restart;
//            a version that is not installed                        -> VERSION_NOT_INSTALLED
//   a module that was never deployed here                           -> MODULE_NOT_INSTALLED
//   a started process dead after the settle time (log tail in the message)    -> PROCESS_EXITED
//   PROCESS_OK otherwise; cancelled or timed out on the way                   -> CANCELLED
// Every result carries details.process, the module as it is after the order.
import { ProcessOperation, type ControlProcessAction } from "../../gen/skipper/v1/order_action_pb.js";
import { MODULE_PATTERN, ProcessError, VERSION_PATTERN } from "../process/layout.js";
import { activate, ensureRunning, launchOf, livePid, stopModule, type ControlOptions } from "../process/module-control.js";
import { readRunState, withModuleLock, writeRunState } from "../process/run-state.js";
import { chooseRunner } from "../process/systemd.js";
import { activeVersion } from "../process/versions.js";
import { processResult, runProcessOrder, type ProcessExecutorOptions, type Verdict } from "./process-result.js";
import { executorOf, type Executor } from "./executor.js";

/** control_process with the host's defaults (systemd when it runs and the agent is root). */
export const controlProcess: Executor<"controlProcess"> = makeControlProcess();

/** control_process with chosen settle time, grace period and runner. */
export function makeControlProcess(opts: ProcessExecutorOptions = {}): Executor<"controlProcess"> {
  return executorOf("controlProcess", async (action, order, ctx) => {
    const scope = { started: performance.now(), workDir: ctx.config.workDir, module: action?.module ?? "", signal: ctx.signal };
    const problem = actionProblem(action);
    if (problem || !action) return processResult({ code: "PROCESS_INVALID", message: problem ?? "no action" }, scope);
    const copts: ControlOptions = {
      runner: chooseRunner(opts.useSystemd),
      graceMs: opts.graceMs ?? 10_000,
      settleMs: opts.settleMs ?? 1000,
      signal: ctx.signal,
    };
    return runProcessOrder(
      () => withModuleLock(scope.workDir, action.module, () => control(scope.workDir, action, order.id, copts)),
      scope,
    );
  });
}

async function control(workDir: string, a: ControlProcessAction, orderId: string, opts: ControlOptions): Promise<Verdict> {
  const m = a.module;
  switch (a.operation) {
    case ProcessOperation.START:
    case ProcessOperation.RESTART: {
      const r = await ensureRunning(workDir, m, opts, a.operation === ProcessOperation.RESTART);
      if (!r.alive) return exited(m, opts, r.logTail);
      return {
        code: "PROCESS_OK",
        message: r.adopted
          ? `${m} already runs (pid ${r.pid})`
          : `${m} ${a.operation === ProcessOperation.START ? "started" : "restarted"} (pid ${r.pid})`,
      };
    }
    case ProcessOperation.STOP: {
      const pid = await livePid(workDir, await readRunState(workDir, m));
      await stopModule(workDir, m, opts);
      return { code: "PROCESS_OK", message: pid > 0 ? `${m} stopped (was pid ${pid})` : `${m} was not running` };
    }
    default:
      return rollback(workDir, a, orderId, opts);
  }
}

async function rollback(workDir: string, a: ControlProcessAction, orderId: string, opts: ControlOptions): Promise<Verdict> {
  const m = a.module;
  const from = await activeVersion(workDir, m);
  if (!from) throw new ProcessError("MODULE_NOT_INSTALLED", `module ${m} has no active version on this node`);
  const state = await readRunState(workDir, m);
  // The agent may re-run an order it had finished before a crash: a second toggle would undo it.
  if (orderId !== "" && state.rollbackOrderId === orderId)
    return { code: "PROCESS_OK", message: `${m} was already rolled back to ${from} by this order` };
  const target = a.version || state.previousVersion;
  if (!target) throw new ProcessError("VERSION_NOT_INSTALLED", `${m} has no previous version to roll back to`);
  const launch = await launchOf(workDir, m, target);
  if (target === from) {
    const r = await ensureRunning(workDir, m, opts);
    return r.alive
      ? { code: "PROCESS_OK", message: `${m} already on ${target} (pid ${r.pid})` }
      : exited(`${m} ${target}`, opts, r.logTail);
  }
  const r = await activate(workDir, launch, opts);
  await writeRunState(workDir, { ...(await readRunState(workDir, m)), rollbackOrderId: orderId });
  if (r.alive) return { code: "PROCESS_OK", message: `${m} rolled back from ${from} to ${target} (pid ${r.pid})` };
  const restored = r.restored ? `; restored ${r.restored}${r.restoredAlive ? ", which runs again" : ", which did not start either"}` : "";
  return exited(`${m} ${target}`, opts, r.logTail, restored);
}

function exited(what: string, opts: ControlOptions, tail: string, note = ""): Verdict {
  return { code: "PROCESS_EXITED", message: `${what} exited within ${opts.settleMs} ms${note}; log tail:\n${tail}` };
}

/** What is wrong with a control_process action, or undefined. */
export function actionProblem(a: ControlProcessAction | undefined): string | undefined {
  if (!a) return "the order has no control_process action";
  if (!MODULE_PATTERN.test(a.module)) return `module ${JSON.stringify(a.module)} must be 1-63 lowercase letters, digits and dashes`;
  if (!(a.operation in ProcessOperation) || a.operation === ProcessOperation.UNSPECIFIED)
    return "operation must be START, STOP, RESTART or ROLLBACK";
  if (a.version !== "" && (a.operation !== ProcessOperation.ROLLBACK || !VERSION_PATTERN.test(a.version)))
    return `version ${JSON.stringify(a.version)} is only for ROLLBACK and must be a plain version`;
  return undefined;
}
