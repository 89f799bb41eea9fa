// Events are kept for a retention period (--event-retention, default 30 days) and then deleted,
// from disk and from listings, by an hourly job. Without it a controller that runs for months
// would keep every heartbeat and convergence event in memory and on disk for ever.
import type { Logger } from "../logging/logger.js";
import { Periodic } from "../periodic.js";
import type { Store } from "../store/store.js";

const EVERY_MS = 60 * 60 * 1000;

export class EventRetention {
  private readonly periodic: Periodic;

  constructor(private readonly deps: { store: Store; logger: Logger; now: () => Date; retentionMs: number; everyMs?: number }) {
    this.periodic = new Periodic(() => this.prune(), deps.everyMs ?? EVERY_MS);
  }

  /** Prunes once now, then every hour. */
  start(): void {
    void this.prune();
    this.periodic.start();
  }

  stop(): Promise<void> {
    return this.periodic.stop();
  }

  async prune(): Promise<number> {
    const before = new Date(this.deps.now().getTime() - this.deps.retentionMs);
    try {
      const n = await this.deps.store.pruneEvents(before);
      if (n > 0) this.deps.logger.info({ action: "event_retention", result: "ok", metadata: { pruned: n, before: before.toISOString() } }, `${n} event(s) older than the retention deleted`);
      return n;
    } catch (e) {
      this.deps.logger.error({ action: "event_retention", result: "error", err: e }, "could not delete old events");
      return 0;
    }
  }
}
