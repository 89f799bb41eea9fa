// A leader's reconcile loop around one pass function: a pass on a sweep, at once when woken (what
// it reconciles changed, one of its orders ended), and when the pass asks to look again (a backoff
// or a bake ends). Passes never overlap; a wake during a pass runs one more pass after it. The
// process reconciler and the agent updater each run one.
//
//   timer | wake -> pass -> next: the sweep, or the time the pass answered, whichever is first
import type { Logger } from "../../common/logging/logger.js";

export interface PassLoopDeps {
  /** One pass; answers the time (ms) it wants to run again, if sooner than the sweep. */
  pass: () => Promise<number | undefined>;
  sweepMs: number;
  now: () => Date;
  logger: Logger;
  /** The log's action for a pass that failed ("process_reconcile"). */
  action: string;
}

/** Runs passes on a sweep and when woken. */
export class PassLoop {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = true;

  constructor(private readonly deps: PassLoopDeps) {}

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
      const wakeAt = await this.deps.pass();
      if (wakeAt !== undefined) next = Math.min(next, Math.max(10, wakeAt - this.deps.now().getTime()));
    } catch (e) {
      this.deps.logger.error({ action: this.deps.action, result: "error", err: e }, `${this.deps.action} pass failed`);
    }
    if (this.stopped) return;
    this.timer = setTimeout(() => this.wake(), next);
    this.timer.unref();
  }
}
