// A job run every few milliseconds in the background: never two runs at once (a slow run makes
// the next tick skip), the timer does not keep the process alive, and stop() waits for the run
// under way. Monitors (leases, node liveness) use it. A run that fails (the store unreachable for
// a moment, or closed under a controller that is stopping) is handed to `onError` and the next
// tick tries again: an unhandled rejection would end the whole process.
export class Periodic {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;

  constructor(
    private readonly run: () => Promise<unknown>,
    private readonly everyMs: number,
    private readonly onError: (e: unknown) => void,
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = this.run()
        .catch((e: unknown) => this.onError(e))
        .finally(() => (this.running = undefined));
    }, this.everyMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }
}
