// The process reconciler's loop, the leader's alone: a pass over every process resource
// (process-pass.ts) on a sweep (default every 5 s, so a module killed or stopped behind Skipper's
// back is seen within a heartbeat and a sweep), at once when woken (a process resource changed,
// one of its orders ended), and when a backoff ends. Passes never overlap; a wake during a pass
// runs one more pass after it.
//
//   timer | wake -> pass (read, plan, queue orders, write status) -> next: sweep or backoff's end
import { runProcessPass, type ProcessPassDeps } from "./process-pass.js";

export interface ProcessLoopDeps extends ProcessPassDeps {
  sweepMs: number;
}

/** Runs process passes on a sweep and when woken. */
export class ProcessLoop {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = true;

  constructor(private readonly deps: ProcessLoopDeps) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.wake();
  }

  /** Stops the timer and waits for the pass under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** Runs a pass now (or right after the one under way). */
  wake(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.running = this.pass().finally(() => {
      this.running = undefined;
      if (this.stopped) return;
      if (this.again) {
        this.again = false;
        this.wake();
      }
    });
  }

  private async pass(): Promise<void> {
    let next = this.deps.sweepMs;
    try {
      const wakeAt = await runProcessPass(this.deps);
      if (wakeAt !== undefined) next = Math.min(next, Math.max(10, wakeAt - this.deps.now().getTime()));
    } catch (e) {
      this.deps.logger.error({ action: "process_reconcile", result: "error", err: e }, "process pass failed");
    }
    if (this.stopped) return;
    this.timer = setTimeout(() => this.wake(), next);
    this.timer.unref();
  }
}
