// Capped exponential backoff with full jitter: the n-th consecutive failure waits a random time
// in [0, min(cap, base * 2^n)], so clients that failed together do not return together (agents
// that lost the controller; the controller's webhook deliveries). Backoff counts the failures of
// a loop; fullJitterDelay is the same wait for callers that keep the count themselves (a
// delivery's attempts are stored).
export class Backoff {
  private failures = 0;

  constructor(
    private readonly baseMs = 500,
    private readonly capMs = 30_000,
    private readonly random: () => number = Math.random,
  ) {}

  /** The delay before the next attempt, counting this failure. */
  next(): number {
    return fullJitterDelay(this.failures++, this.baseMs, this.capMs, this.random);
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

/** The wait after `earlier` failures before this one: a random time in [0, min(cap, base * 2^earlier)]. */
export function fullJitterDelay(earlier: number, baseMs: number, capMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(earlier, 30));
  return Math.round(random() * ceiling);
}
