// deploy_process and control_process on an SSH node: the agent's executors' steps, results and
// codes (agent/executors/deploy-process.ts, control-process.ts), with the module living on the
// node (remote-module-control.ts) instead of the relay's disk. The artifact comes from the RELAY's
// --allow-process-source and is checked there; the node only receives the verified files. Each
// result carries details.process, the module as the node shows it after the order. Also here: the
// supervision a heartbeat does, one command for every module, and a supervisor started again for
// a module that should run but whose supervisor is gone (the node rebooted).
import { ProcessOperation, type ControlProcessAction } from "../../gen/skipper/v1/order_action_pb.js";
import type { ProcessObservation } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import type { Logger } from "pino";
import { launchDigest } from "../../common/process-launch.js";
import { actionProblem } from "../executors/control-process.js";
import { specProblem } from "../executors/deploy-process.js";
import { sourceRefusal } from "../executors/deploy-processes.js";
import type { ExecutorTable } from "../executors/executor-table.js";
import { abortReason, executorOf, orderOutcome, type ExecOutcome } from "../executors/executor.js";
import type { ProcessExecutorOptions, Verdict } from "../executors/process-result.js";
import type { FetchOptions } from "../process/artifact.js";
import type { Obtained } from "../process/install.js";
import { MODULE_PATTERN, ProcessError, isProcessError } from "../process/layout.js";
import { isModuleLocked, withModuleLock } from "../process/run-state.js";
import { activateOnNode, ensureOnNode, launchFrom, obtainOnNode, type RemoteControl } from "./remote-module-control.js";
import { observationOf } from "./remote-process-observation.js";
import type { RemoteProcesses } from "./remote-processes.js";

export interface SshProcessOptions extends Omit<ProcessExecutorOptions, "useSystemd"> {
  fetch?: Omit<FetchOptions, "signal">;
  /** Called when an order has ended (what was observed of the node before is out of date). */
  changed?: () => void;
}

type ProcessKinds = WorkOrderType.DEPLOY_PROCESS | WorkOrderType.CONTROL_PROCESS;

/**
 * The SSH node's process executors. `lockKey` names the node for the per-module locks (its work
 * directory on the relay, where artifacts are fetched too).
 */
export function sshProcessExecutors(
  remote: RemoteProcesses,
  lockKey: string,
  opts: SshProcessOptions = {},
): Pick<ExecutorTable, ProcessKinds> {
  const control = (signal: AbortSignal): RemoteControl => ({
    remote,
    graceMs: opts.graceMs ?? 10_000,
    settleMs: opts.settleMs ?? 1000,
    signal,
  });
  return {
    [WorkOrderType.DEPLOY_PROCESS]: executorOf("deployProcess", async (action, _order, ctx) => {
      const spec = action?.spec;
      let offline = false;
      const scope = {
        started: performance.now(),
        remote,
        module: spec?.module ?? "",
        signal: ctx.signal,
        offline: () => offline,
        changed: opts.changed,
      };
      const problem = specProblem(spec);
      if (problem || !spec) return result({ code: "PROCESS_INVALID", message: problem ?? "no spec" }, scope);
      const refused = sourceRefusal(spec.source, ctx.config.allowProcessSources);
      if (refused) return result({ code: "PROCESS_SOURCE_NOT_ALLOWED", message: refused }, scope);
      return run(
        () =>
          withModuleLock(lockKey, spec.module, async () => {
            const c = control(ctx.signal);
            const got = await obtainOnNode(c, spec, ctx.config.workDir, opts.fetch);
            offline = got.resolvedOffline;
            return deployOnNode(c, spec.module, got);
          }),
        scope,
      );
    }),
    [WorkOrderType.CONTROL_PROCESS]: executorOf("controlProcess", async (action, order, ctx) => {
      const scope = { started: performance.now(), remote, module: action?.module ?? "", signal: ctx.signal, changed: opts.changed };
      const problem = actionProblem(action);
      if (problem || !action) return result({ code: "PROCESS_INVALID", message: problem ?? "no action" }, scope);
      return run(() => withModuleLock(lockKey, action.module, () => controlOnNode(control(ctx.signal), action, order.id)), scope);
    }),
  };
}

// deploy_process's steps 3-5 (agent/executors/deploy-process.ts deployVersion), on the node.
async function deployOnNode(c: RemoteControl, module: string, got: Obtained): Promise<Verdict> {
  const note = got.resolvedOffline
    ? `; the source could not be reached (${got.offlineReason}), so the highest installed version ${got.version} was used (resolved offline)`
    : "";
  const m = await c.remote.inspect(module, got.version, c.signal);
  if (!m) throw new ProcessError("VERSION_NOT_INSTALLED", `version ${got.version} of ${module} is not installed on the node`);
  const launch = launchFrom(module, got.version, m.want, m.installed);
  if (m.active === got.version && m.pid > 0 && m.state.launchDigest === launchDigest(launch)) {
    if (m.state.resolvedOffline !== got.resolvedOffline)
      await c.remote.putState(module, { ...m.state, resolvedOffline: got.resolvedOffline });
    return { code: "PROCESS_OK", message: `${module} ${got.version} already runs on the node (pid ${m.pid})${note}` };
  }
  const r = await activateOnNode(c, m, launch, { offline: got.resolvedOffline });
  if (r.alive)
    return {
      code: "PROCESS_OK",
      message: `${module} ${got.version} ${got.installedNow ? "installed and " : ""}running on the node (pid ${r.pid})${note}`,
    };
  if (got.resolvedOffline) {
    const now = await c.remote.inspect(module);
    if (now?.state.resolvedOffline) await c.remote.putState(module, { ...now.state, resolvedOffline: false });
  }
  const restored = !r.restored
    ? ""
    : `; restored ${r.restored}${r.restoredAlive ? ", which runs again" : m.state.desired === "running" ? ", which did not start either" : " (left stopped, as it was)"}`;
  return {
    code: "PROCESS_EXITED",
    message: `${module} ${got.version} exited within ${c.settleMs} ms${restored}${note}; log tail:\n${r.logTail}`,
  };
}

// control_process (agent/executors/control-process.ts), on the node.
async function controlOnNode(c: RemoteControl, a: ControlProcessAction, orderId: string): Promise<Verdict> {
  const m = a.module;
  switch (a.operation) {
    case ProcessOperation.START:
    case ProcessOperation.RESTART: {
      const r = await ensureOnNode(c, m, a.operation === ProcessOperation.RESTART);
      if (!r.alive) return exited(m, c, r.logTail);
      const did = a.operation === ProcessOperation.START ? "started" : "restarted";
      return { code: "PROCESS_OK", message: r.adopted ? `${m} already runs (pid ${r.pid})` : `${m} ${did} on the node (pid ${r.pid})` };
    }
    case ProcessOperation.STOP: {
      const now = await c.remote.inspect(m, "", c.signal);
      if (!now?.active) throw new ProcessError("MODULE_NOT_INSTALLED", `module ${m} is not installed on the node`);
      // Recorded first: a stop whose record failed would be undone by the next supervision round.
      await c.remote.putState(m, { ...now.state, desired: "stopped" });
      const pid = await c.remote.stop(m, c.graceMs);
      return { code: "PROCESS_OK", message: pid > 0 ? `${m} stopped (was pid ${pid})` : `${m} was not running` };
    }
    default:
      return rollbackOnNode(c, a, orderId);
  }
}

async function rollbackOnNode(c: RemoteControl, a: ControlProcessAction, orderId: string): Promise<Verdict> {
  const m = a.module;
  const now = await c.remote.inspect(m, "", c.signal);
  const from = now?.active ?? "";
  if (!now || !from) throw new ProcessError("MODULE_NOT_INSTALLED", `module ${m} has no active version on the node`);
  // A re-run of an order finished before a crash: a second toggle would undo it.
  if (orderId !== "" && now.state.rollbackOrderId === orderId)
    return { code: "PROCESS_OK", message: `${m} was already rolled back to ${from} by this order` };
  const target = a.version || now.state.previousVersion;
  if (!target) throw new ProcessError("VERSION_NOT_INSTALLED", `${m} has no previous version to roll back to`);
  const there = await c.remote.inspect(m, target, c.signal);
  const launch = launchFrom(m, target, there?.want, there?.installed ?? []);
  if (target === from) {
    const r = await ensureOnNode(c, m);
    return r.alive ? { code: "PROCESS_OK", message: `${m} already on ${target} (pid ${r.pid})` } : exited(`${m} ${target}`, c, r.logTail);
  }
  const r = await activateOnNode(c, now, launch, { rollbackOrderId: orderId });
  if (r.alive) return { code: "PROCESS_OK", message: `${m} rolled back from ${from} to ${target} (pid ${r.pid})` };
  const restored = r.restored ? `; restored ${r.restored}${r.restoredAlive ? ", which runs again" : ", which did not start either"}` : "";
  return exited(`${m} ${target}`, c, r.logTail, restored);
}

function exited(what: string, c: RemoteControl, tail: string, note = ""): Verdict {
  return { code: "PROCESS_EXITED", message: `${what} exited within ${c.settleMs} ms${note}; log tail:\n${tail}` };
}

interface Scope {
  started: number;
  remote: RemoteProcesses;
  module: string;
  signal: AbortSignal;
  offline?: () => boolean;
  changed?: () => void;
}

// The source may come back, and a start or stop failure may be the node's (or the connection's) passing trouble.
const RETRIABLE = new Set(["SOURCE_UNAVAILABLE", "PROCESS_FAILED"]);

async function run(body: () => Promise<Verdict>, scope: Scope): Promise<ExecOutcome> {
  let v: Verdict;
  try {
    v = await body();
  } catch (e) {
    if (isProcessError(e) && e.code !== "CANCELLED") v = { code: e.code, message: e.message };
    else if (scope.signal.aborted) v = { code: "CANCELLED", message: `stopped: ${abortReason(scope.signal)}` };
    else if (isProcessError(e)) v = { code: e.code, message: e.message };
    else v = { code: "PROCESS_FAILED", message: `the relay could not finish: ${(e as Error).message}` };
  } finally {
    scope.changed?.();
  }
  return result(v, scope);
}

async function result(v: Verdict, scope: Scope): Promise<ExecOutcome> {
  let process: ProcessObservation | undefined;
  if (MODULE_PATTERN.test(scope.module)) {
    const m = await scope.remote.inspect(scope.module).catch(() => undefined);
    if (m) process = observationOf(m, scope.offline?.() ?? false);
  }
  return orderOutcome(v.code, v.message, scope.started, {
    success: v.code === "PROCESS_OK",
    retriable: RETRIABLE.has(v.code),
    details: { process },
  });
}

/**
 * Observes every module on the node for a heartbeat; a module that should run but has no live
 * supervisor (the node rebooted, someone killed it) gets one again, unless an order is working on it.
 * What is left of the old one (its process outlives a supervisor killed alone) is stopped first
 * (SIGKILL after `graceMs`): two copies never run.
 */
export async function superviseOnNode(
  remote: RemoteProcesses,
  lockKey: string,
  log: Logger,
  graceMs = 10_000,
): Promise<ProcessObservation[]> {
  const out: ProcessObservation[] = [];
  for (const m of await remote.observe()) {
    let now = m;
    if (m.state.desired === "running" && m.supervisor === 0 && m.active && !isModuleLocked(lockKey, m.module)) {
      try {
        now =
          (await withModuleLock(lockKey, m.module, async () => {
            const again = await remote.inspect(m.module);
            if (!again || again.supervisor > 0 || again.state.desired !== "running") return again;
            const launch = launchFrom(m.module, again.active, again.meta, again.installed);
            const was = await remote.stop(m.module, graceMs);
            await remote.putState(m.module, { ...again.state, version: launch.version, launchDigest: launchDigest(launch) });
            const pid = await remote.start(launch, "run");
            log.info(
              { action: "supervise", module: m.module, metadata: { version: launch.version, pid, stopped: was } },
              `started the supervisor of ${m.module} again on the node`,
            );
            return remote.inspect(m.module);
          })) ?? m;
      } catch (e) {
        log.warn({ action: "supervise", module: m.module, err: e }, `could not start process module ${m.module} again on the node`);
      }
    }
    out.push(observationOf(now));
  }
  return out;
}
