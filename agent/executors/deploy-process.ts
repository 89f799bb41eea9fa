// The deploy_process executor: installs a version of a process module and runs it, for hosts
// without Docker.
//   1. check the spec (module, version, source, sha256, argv, env)           -> PROCESS_INVALID
//   2. install the version unless it is installed with the same sha256:
//      fetch, verify, unpack into staging, rename into place   -> SOURCE_UNAVAILABLE (retriable),
//      an installed version with another sha256 is refused     -> CHECKSUM_MISMATCH
//      "latest" whose source cannot be reached runs the highest installed version (the result
//      says resolved_offline); with none installed                  -> SOURCE_UNAVAILABLE
//   3. already active and running with the same command: nothing to do           -> PROCESS_OK
//   4. switch the active symlink, restart, and wait the settle time; a process that died is
//      reported with its log tail and the previous version is restored and restarted
//                                                                                -> PROCESS_EXITED
//   5. PROCESS_OK. Cancelled or timed out on the way                             -> CANCELLED
// Every result carries details.process, the module as it is after the order.
import { isAbsolute } from "node:path";
import type { ProcessSpec } from "../../gen/skipper/v1/process_pb.js";
import type { FetchOptions } from "../process/artifact.js";
import { obtainVersion, type Obtained } from "../process/install.js";
import { MODULE_PATTERN, VERSION_PATTERN } from "../process/layout.js";
import { activate, launchOf, livePid } from "../process/module-control.js";
import { launchDigest, readRunState, withModuleLock, writeRunState } from "../process/run-state.js";
import { chooseRunner } from "../process/systemd.js";
import { activeVersion } from "../process/versions.js";
import { processResult, runProcessOrder, type ProcessExecutorOptions, type Verdict } from "./process-result.js";
import { executorOf, type Executor } from "./executor.js";

/** deploy_process with the host's defaults (systemd when it runs and the agent is root). */
export const deployProcess: Executor<"deployProcess"> = makeDeployProcess();

/** deploy_process with chosen settle time, grace period, runner and download limits. */
export function makeDeployProcess(opts: ProcessExecutorOptions & { fetch?: Omit<FetchOptions, "signal"> } = {}): Executor<"deployProcess"> {
  return executorOf("deployProcess", async (action, _order, ctx) => {
    const spec = action?.spec;
    let offline = false;
    const scope = {
      started: performance.now(),
      workDir: ctx.config.workDir,
      module: spec?.module ?? "",
      signal: ctx.signal,
      resolvedOffline: () => offline,
    };
    const problem = specProblem(spec);
    if (problem || !spec) return processResult({ code: "PROCESS_INVALID", message: problem ?? "no spec" }, scope);
    return runProcessOrder(
      () =>
        withModuleLock(scope.workDir, spec.module, async () => {
          const got = await obtainVersion(scope.workDir, spec, { ...opts.fetch, signal: ctx.signal });
          offline = got.resolvedOffline;
          return deployVersion(scope.workDir, spec.module, got, opts, ctx.signal);
        }),
      scope,
    );
  });
}

/** Steps 3-5: the version is installed; make it the one that runs (a deploy's processes too). */
export async function deployVersion(
  workDir: string,
  module: string,
  got: Obtained,
  opts: ProcessExecutorOptions,
  signal: AbortSignal,
): Promise<Verdict> {
  const note = got.resolvedOffline
    ? `; the source could not be reached (${got.offlineReason}), so the highest installed version ${got.version} was used (resolved offline)`
    : "";
  const launch = await launchOf(workDir, module, got.version);
  const state = await readRunState(workDir, module);
  const pid = await livePid(workDir, state);
  if ((await activeVersion(workDir, module)) === got.version && pid > 0 && state.launchDigest === launchDigest(launch)) {
    await rememberOffline(workDir, module, got.resolvedOffline);
    return { code: "PROCESS_OK", message: `${module} ${got.version} already runs (pid ${pid})${note}` };
  }
  const settleMs = opts.settleMs ?? 1000;
  const r = await activate(workDir, launch, { runner: chooseRunner(opts.useSystemd), graceMs: opts.graceMs ?? 10_000, settleMs, signal });
  await rememberOffline(workDir, module, r.alive && got.resolvedOffline);
  if (r.alive)
    return {
      code: "PROCESS_OK",
      message: `${module} ${got.version} ${got.installedNow ? "installed and " : ""}running (pid ${r.pid})${note}`,
    };
  const restored = !r.restored
    ? ""
    : `; restored ${r.restored}${r.restoredAlive ? ", which runs again" : state.desired === "running" ? ", which did not start either" : " (left stopped, as it was)"}`;
  return {
    code: "PROCESS_EXITED",
    message: `${module} ${got.version} exited within ${settleMs} ms${restored}${note}; log tail:\n${r.logTail}`,
  };
}

// Whether the version running was "latest" resolved offline is the node's to report with every
// heartbeat (the controller asks again later), not only in this order's result.
async function rememberOffline(workDir: string, module: string, offline: boolean): Promise<void> {
  const state = await readRunState(workDir, module);
  if (state.resolvedOffline !== offline) await writeRunState(workDir, { ...state, resolvedOffline: offline });
}

/** What is wrong with a spec, or undefined when it can be deployed. */
export function specProblem(spec: ProcessSpec | undefined): string | undefined {
  if (!spec) return "the order has no deploy_process spec";
  if (!MODULE_PATTERN.test(spec.module)) return `module ${JSON.stringify(spec.module)} must be 1-63 lowercase letters, digits and dashes`;
  if (spec.version !== "latest" && (!VERSION_PATTERN.test(spec.version) || spec.version === "active")) {
    return `version ${JSON.stringify(spec.version)} must be "latest" or 1-64 characters of [A-Za-z0-9._+-], starting alphanumeric`;
  }
  const src = spec.source?.kind;
  if (!src?.case) return "the spec needs a source: an absolute path or an http(s) URL";
  if (src.case === "path" && (!isAbsolute(src.value) || src.value.includes("\0")))
    return `source path ${JSON.stringify(src.value)} must be absolute`;
  if (src.case === "url" && !/^https?:$/.test(URL.canParse(src.value) ? new URL(src.value).protocol : ""))
    return `source url ${JSON.stringify(src.value)} must be http(s)`;
  if (!/^[0-9a-fA-F]{64}$/.test(spec.sha256)) return "sha256 must be 64 hex digits";
  const argv0 = spec.argv[0] ?? "";
  if (argv0 === "" || isAbsolute(argv0) || argv0.split("/").includes(".."))
    return "argv[0] must be a path inside the version directory (e.g. bin/server)";
  if (spec.argv.some((a) => a.includes("\0"))) return "argv may not contain NUL bytes";
  for (const [k, v] of Object.entries(spec.env)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k) || v.includes("\0")) return `env ${JSON.stringify(k)} is not a usable variable`;
  }
  return undefined;
}
