// Capped exponential backoff with full jitter: the n-th consecutive failure waits a random time
// in [0, min(cap, base * 2^n)], so agents that lost the controller together do not return
// together. And the abortable sleep the agent waits with.
export class Backoff {
  private failures = 0;

  constructor(
    private readonly baseMs = 500,
    private readonly capMs = 30_000,
    private readonly random: () => number = Math.random,
  ) {}

  /** The delay before the next attempt, counting this failure. */
  next(): number {
    const ceiling = Math.min(this.capMs, this.baseMs * 2 ** Math.min(this.failures, 30));
    this.failures++;
    return Math.round(this.random() * ceiling);
  }

  reset(): void {
    this.failures = 0;
  }

  get attempts(): number {
    return this.failures;
  }
}

/** Waits `ms`, or less when `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
