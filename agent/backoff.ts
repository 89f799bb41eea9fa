// Capped exponential backoff with full jitter: the n-th consecutive failure waits a random time
// in [0, min(cap, base * 2^n)], so agents that lost the controller together do not return
// together. The wait itself is engine/sleep.ts.
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

  /** Forgets the failures: the next one waits the base delay again. */
  reset(): void {
    this.failures = 0;
  }

  /** Consecutive failures so far. */
  get attempts(): number {
    return this.failures;
  }
}
