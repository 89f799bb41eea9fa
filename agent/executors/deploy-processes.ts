// A deploy's process modules (WorkOrderDesiredState.processes). Checked with the order, before
// anything is written or run: each spec as deploy_process checks it, its source against the node's
// --allow-process-source (the rule deploy_process follows), one spec per module. Then the step
// "run the processes": each module, under its lock, gets its version (installed already, or
// downloaded and checked against its sha256) made the active, running one, as deploy_process does
// (activate puts the previous version back when the new one dies within the settle time); the
// modules the spec applied here before declared and this one does not are stopped, their versions
// staying installed. remove_service and a failed gate's restore stop modules with stopModules.
// A deploy of process modules alone starts with projectDirectory (below) and never needs Docker,
// unless a compose project of an earlier spec is still to be taken down.
import { mkdir, rm } from "node:fs/promises";
import type { ProcessSource, ProcessSpec } from "../../gen/skipper/v1/process_pb.js";
import { processSourceAllowed } from "../../common/action-rules.js";
import { modulesOfOtherTenants, readAppliedSpec } from "../engine/applied-spec.js";
import { pathExists } from "../engine/durable-file.js";
import { recordedProjectName } from "../engine/project-state.js";
import { runCommand } from "../engine/run-command.js";
import { obtainVersion } from "../process/install.js";
import { MODULE_PATTERN, isProcessError } from "../process/layout.js";
import { livePid, observeModule, stopModule } from "../process/module-control.js";
import { readRunState, withModuleLock } from "../process/run-state.js";
import { chooseRunner } from "../process/systemd.js";
import { hasActiveLink } from "../process/versions.js";
import { ENGINE_DOWN, lastLine } from "./compose-output.js";
import type { DeployOutcome } from "./deploy-context.js";
import { deployVersion, specProblem } from "./deploy-process.js";
import { cancelled, end, stoppedEarly, type Deploy } from "./deploy-state.js";
import type { ProcessExecutorOptions, Verdict } from "./process-result.js";
import { liveFiles } from "./project-files.js";

/** Why the order's process modules cannot run on this node (code and message), or undefined. */
export function processesProblem(specs: readonly ProcessSpec[], allowed: readonly string[]): Verdict | undefined {
  const seen = new Set<string>();
  for (const spec of specs) {
    const problem = specProblem(spec);
    if (problem) return { code: "PROCESS_INVALID", message: `process module ${JSON.stringify(spec.module)}: ${problem}` };
    const refused = sourceRefusal(spec.source, allowed);
    if (refused) return { code: "PROCESS_SOURCE_NOT_ALLOWED", message: `process module ${spec.module}: ${refused}` };
    if (seen.has(spec.module)) return { code: "PROCESS_INVALID", message: `process module ${spec.module} is declared twice` };
    seen.add(spec.module);
  }
  return undefined;
}

/** Why `source` may not be used on this node (its --allow-process-source), or undefined when it may. */
export function sourceRefusal(source: ProcessSource | undefined, allowed: readonly string[]): string | undefined {
  const kind = source?.kind ?? { case: undefined };
  if (processSourceAllowed(kind, allowed)) return undefined;
  const where = kind.case ? `${kind.case} ${kind.value}` : "no source";
  return `${where} is not under this node's --allow-process-source (${allowed.join(", ") || "none"})`;
}

/** run the processes: each module of the order active and running, in order; dropped modules stopped. */
export async function runProcesses(d: Deploy): Promise<DeployOutcome | undefined> {
  const specs = d.ds.processes;
  const before = await readAppliedSpec(d.ctx.workDir, d.tenantId);
  for (const spec of specs) {
    const failed = await runProcess(d, spec);
    if (failed) return failed;
  }
  const declared = new Set(specs.map((s) => s.module));
  const dropped = (before?.processes ?? []).map((p) => p.module).filter((m) => !declared.has(m));
  d.stopped = await stopModules(d.ctx.workDir, d.tenantId, dropped, d.ctx.process);
  return undefined;
}

// One module: its version obtained and made the running one, under the module's lock (the
// heartbeat's supervisor leaves a locked module alone).
async function runProcess(d: Deploy, spec: ProcessSpec): Promise<DeployOutcome | undefined> {
  const { workDir } = d.ctx;
  const opts = d.ctx.process ?? {};
  const signal = d.ctx.signal ?? new AbortController().signal;
  let v: Verdict & { version?: string; offline?: boolean };
  try {
    v = await withModuleLock(workDir, spec.module, async () => {
      const got = await obtainVersion(workDir, spec, { ...opts.fetch, signal });
      const verdict = await deployVersion(workDir, spec.module, got, opts, signal);
      return { ...verdict, version: got.version, offline: got.resolvedOffline };
    });
  } catch (e) {
    if (!isProcessError(e)) throw e;
    if (e.code === "CANCELLED" || signal.aborted) return cancelled(d, d.up);
    v = { code: e.code, message: e.message };
  }
  if (v.code !== "PROCESS_OK" || !v.version) {
    const parts = d.processesOnly ? {} : { command: d.up, composePath: d.files.composePath };
    return end(d, v.code, `process module ${spec.module}: ${v.message}`, parts);
  }
  d.processes.push({ spec, version: v.version, observed: await observeModule(workDir, spec.module, v.offline) });
  return undefined;
}

/**
 * Stops each of `tenantId`'s `modules` installed here (its versions stay installed, its run state
 * says stopped), but none another tenant's applied spec declares; returns those that ran or were
 * meant to.
 */
export async function stopModules(
  workDir: string,
  tenantId: string,
  modules: readonly string[],
  opts: ProcessExecutorOptions = {},
): Promise<string[]> {
  const stopped: string[] = [];
  const copts = { runner: chooseRunner(opts.useSystemd), graceMs: opts.graceMs ?? 10_000, settleMs: opts.settleMs ?? 1000 };
  const others = modules.length > 0 ? await modulesOfOtherTenants(workDir, tenantId) : new Set<string>();
  for (const m of new Set(modules)) {
    if (!MODULE_PATTERN.test(m) || others.has(m)) continue;
    await withModuleLock(workDir, m, async () => {
      if (!(await hasActiveLink(workDir, m))) return;
      const state = await readRunState(workDir, m);
      if (state.desired === "stopped" && (await livePid(workDir, state)) === 0) return;
      await stopModule(workDir, m, copts);
      stopped.push(m);
    });
  }
  return stopped;
}

/** What a deploy did with process modules, for its result's message ("" when it declared none and stopped none). */
export function describeProcesses(d: Deploy): string {
  const ran = d.processes.map((p) => {
    const o = p.observed;
    return `${o.module} ${o.activeVersion} ${o.state}${o.pid > 0 ? ` (pid ${o.pid})` : ""}${o.resolvedOffline ? " (resolved offline)" : ""}`;
  });
  const out = [...(ran.length > 0 ? [`processes: ${ran.join(", ")}`] : [])];
  if (d.stopped.length > 0) out.push(`stopped ${d.stopped.join(", ")} (no longer declared)`);
  return out.join("; ");
}

/**
 * project directory (a deploy of process modules alone): the tenant's directory, where hooks run
 * and the spec is recorded. A compose project an earlier spec ran here is taken down first
 * (`compose down --remove-orphans`, as remove_service does) and its files go: the one time such a
 * deploy needs the engine.
 */
export async function projectDirectory(d: Deploy): Promise<DeployOutcome | undefined> {
  const f = d.files;
  await mkdir(f.dir, { recursive: true, mode: 0o700 });
  if (!(await pathExists(f.composePath))) return undefined;
  const compose = d.ctx.docker.compose;
  const why = "the compose project of the spec applied before must be taken down";
  if (!compose) return end(d, "DOCKER_UNAVAILABLE", `${why}: ${d.ctx.docker.capabilities.message || "no Compose implementation found"}`);
  const project = await recordedProjectName(d.ctx.workDir, d.tenantId);
  const args = [...compose.baseArgs, "--project-name", project, "--file", f.composePath, "--project-directory", f.dir];
  if (await pathExists(f.envPath)) args.push("--env-file", f.envPath);
  args.push("down", "--remove-orphans");
  const run = await runCommand(compose.program, args, { timeoutMs: d.ctx.composeTimeoutMs, cwd: f.dir, signal: d.ctx.signal });
  if (run.cancelled) return stoppedEarly(d, run);
  if (run.exitCode !== 0 || run.timedOut) {
    const code = ENGINE_DOWN.test(run.stderr) ? "DOCKER_UNAVAILABLE" : run.timedOut ? "TIMEOUT" : "COMPOSE_FAILED";
    return end(d, code, `${why}, and compose down failed: ${lastLine(run.stderr) || `exit ${run.exitCode}`}`, { command: run });
  }
  for (const p of liveFiles(f)) await rm(p, { recursive: true, force: true });
  return undefined;
}
