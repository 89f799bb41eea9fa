// How the process executors turn what happened into a work-order result: a verdict (code and
// message) or a thrown ProcessError becomes the result, always with details.process — the module
// as it is after the order — when the module name is usable.
import type { ProcessObservation } from "../../gen/skipper/v1/resource_pb.js";
import { MODULE_PATTERN, isProcessError } from "../process/layout.js";
import { observeModule } from "../process/module-control.js";
import { abortReason, orderOutcome, type ExecOutcome } from "./executor.js";

/** Settings the process executors share; tests pick short times and the agent's own supervisor. */
export interface ProcessExecutorOptions {
  /** Run modules under systemd (default: when systemd runs and the agent is root). */
  useSystemd?: boolean;
  /** How long a started process must stay alive (default 1 s). */
  settleMs?: number;
  /** How long a process may take to exit after SIGTERM before SIGKILL (default 10 s). */
  graceMs?: number;
}

export interface Verdict {
  code: string;
  message: string;
}

export interface OrderScope {
  started: number;
  workDir: string;
  module: string;
  signal: AbortSignal;
  /** Whether "latest" was resolved offline (known only once the body has run). */
  resolvedOffline?: () => boolean;
}

// The source may come back, and a start or stop failure may be the host's passing trouble.
const RETRIABLE = new Set(["SOURCE_UNAVAILABLE", "PROCESS_FAILED"]);

/** Runs an order's body under its scope and reports the verdict or the failure. */
export async function runProcessOrder(body: () => Promise<Verdict>, scope: OrderScope): Promise<ExecOutcome> {
  let v: Verdict;
  try {
    v = await body();
  } catch (e) {
    if (isProcessError(e) && e.code !== "CANCELLED") v = { code: e.code, message: e.message };
    else if (scope.signal.aborted) v = { code: "CANCELLED", message: `stopped: ${abortReason(scope.signal)}` };
    else if (isProcessError(e)) v = { code: e.code, message: e.message };
    else v = { code: "PROCESS_FAILED", message: `the agent could not finish: ${(e as Error).message}` };
  }
  return processResult(v, scope);
}

/** The outcome for a verdict, with the module's observation attached. */
export async function processResult(v: Verdict, scope: OrderScope): Promise<ExecOutcome> {
  let process: ProcessObservation | undefined;
  if (MODULE_PATTERN.test(scope.module))
    process = await observeModule(scope.workDir, scope.module, scope.resolvedOffline?.() ?? false).catch(() => undefined);
  return orderOutcome(v.code, v.message, scope.started, {
    success: v.code === "PROCESS_OK",
    retriable: RETRIABLE.has(v.code),
    details: { process },
  });
}
