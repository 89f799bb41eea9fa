// The process reconciler's loop, the leader's alone: a pass over every process resource
// (process-pass.ts) on a sweep (default every 5 s, so a module killed or stopped behind Skipper's
// back is seen within a heartbeat and a sweep), at once when woken (a process resource changed,
// one of its orders ended), and when a backoff ends (pass-loop.ts).
import { PassLoop } from "./pass-loop.js";
import { runProcessPass, type ProcessPassDeps } from "./process-pass.js";

export interface ProcessLoopDeps extends ProcessPassDeps {
  sweepMs: number;
}

/** Runs process passes on a sweep and when woken. */
export class ProcessLoop extends PassLoop {
  constructor(deps: ProcessLoopDeps) {
    super({ pass: () => runProcessPass(deps), sweepMs: deps.sweepMs, now: deps.now, logger: deps.logger, action: "process_reconcile" });
  }
}
