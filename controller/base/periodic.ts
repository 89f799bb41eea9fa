// A job run every few milliseconds in the background: never two runs at once (a slow run makes
// the next tick skip), the timer does not keep the process alive, and stop() waits for the run
// under way. Monitors (leases, node liveness) use it.
export class Periodic {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;

  constructor(
    private readonly run: () => Promise<unknown>,
    private readonly everyMs: number,
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      if (!this.running) this.running = this.run().finally(() => (this.running = undefined));
    }, this.everyMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }
}
