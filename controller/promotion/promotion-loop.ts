// The promotion loop: level-based, per environment, the leader's alone. It takes environment ids
// from its queue (the same coalescing, backoff-keeping queue the reconciler uses, keyed by
// environment), which promotion-triggers.ts fills, and runs one pass for each
// (environment-pass.ts: read, plan, write, act). A sweep queues every environment on an interval;
// a pass that throws comes back after a backoff; a pass whose plan names a time (a bake ends, a
// window opens, a verification is due) is queued for then; a pass that lost a race with an
// operator's command (EnvironmentChanged) is queued again at once.
//
//   triggers -> queue -> drain: pass per environment -> ok: forget backoff, again at wakeAt
//                                                    '-> error: again after a backoff
import type { Logger } from "../../common/logging/logger.js";
import type { Trace } from "../base/context.js";
import { EnvironmentChanged } from "../delivery/environment-records.js";
import { TenantQueue } from "../reconcile/tenant-queue.js";
import type { Store } from "../store/store.js";
import { scannedResources } from "../store/each-page.js";

/** What one environment's pass answers: when to look again by itself. */
export interface EnvironmentPassResult {
  wakeAt?: number;
}

export interface PromotionLoopDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  /** One pass of one environment. */
  pass: (environmentId: string, trace: Trace | undefined) => Promise<EnvironmentPassResult>;
  /** Sweep interval (default 30 s); 0 disables the timer. */
  sweepIntervalMs?: number;
  /** Told how long each pass took and whether it succeeded. */
  passed?: (seconds: number, ok: boolean) => void;
}

/** Runs environment passes; holds no store state. */
export class PromotionLoop {
  /** Environments waiting for a pass; filled by promotion-triggers.ts and the loop's own sweep and timers. */
  readonly queue: TenantQueue;
  private draining: Promise<void> | undefined;
  private scheduled = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly deps: PromotionLoopDeps) {
    this.queue = new TenantQueue(() => this.schedule());
  }

  /** Starts the periodic sweep (and runs one now). */
  start(): void {
    const every = this.deps.sweepIntervalMs ?? 30_000;
    if (every > 0) this.timer = setInterval(() => this.queue.addAll(), every);
    this.timer?.unref();
    this.queue.addAll();
  }

  /** Stops the sweep and waits for the pass under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.queue.stop();
    await this.draining;
  }

  /** Resolves when nothing is queued or running (tests and benchmarks). */
  async idle(): Promise<void> {
    while (this.draining || this.scheduled) await (this.draining ?? new Promise((r) => setImmediate(r)));
  }

  private schedule(): void {
    if (this.scheduled || this.stopped) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (this.draining) return;
      this.draining = this.drain().finally(() => {
        this.draining = undefined;
        if (!this.queue.empty) this.schedule();
      });
    });
  }

  private async drain(): Promise<void> {
    while (!this.stopped && !this.queue.empty) {
      const { sweep, tenants: queued } = this.queue.takeAll();
      let ids = [...queued.keys()];
      if (sweep) {
        try {
          const all = (await scannedResources(this.deps.store, { resourceType: "environment" })).map((e) => e.id);
          ids = [...new Set([...all, ...ids])];
        } catch (e) {
          this.deps.logger.error({ action: "promotion", result: "error", err: e }, "could not list environments for a promotion sweep");
        }
      }
      for (const id of ids) await this.passLogged(id, queued.get(id));
    }
  }

  private async passLogged(id: string, trace: Trace | undefined): Promise<void> {
    const started = performance.now();
    try {
      const result = await this.deps.pass(id, trace);
      this.deps.passed?.((performance.now() - started) / 1000, true);
      this.queue.forget(id);
      if (result.wakeAt !== undefined && !this.stopped) this.queue.addAt(id, result.wakeAt, this.deps.now().getTime());
    } catch (e) {
      this.deps.passed?.((performance.now() - started) / 1000, false);
      if (e instanceof EnvironmentChanged) {
        // An operator's command landed between the read and the write: plan again on what it wrote.
        this.queue.add(id, trace);
        return;
      }
      const retryInMs = this.queue.addRateLimited(id, this.deps.now().getTime());
      this.deps.logger.error(
        {
          action: "promotion",
          result: "error",
          err: e,
          metadata: { environment_id: id, failures: this.queue.failuresOf(id), retry_in_ms: retryInMs },
        },
        "promotion pass failed; retrying after a backoff",
      );
    }
  }
}
