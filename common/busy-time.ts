// The wall time during which at least one of some overlapping tasks was under way: what a group
// of concurrent writes took out of a larger piece of work, counted once however many overlapped.
export class BusyTime {
  private running = 0;
  private since = 0;
  private done = 0;

  constructor(private readonly clock: () => number = () => performance.now()) {}

  /** Runs `fn`, counting the time it is under way. */
  async time<T>(fn: () => Promise<T>): Promise<T> {
    if (this.running++ === 0) this.since = this.clock();
    try {
      return await fn();
    } finally {
      if (--this.running === 0) this.done += this.clock() - this.since;
    }
  }

  /** Milliseconds counted so far, the stretch under way included. */
  get ms(): number {
    return this.done + (this.running > 0 ? this.clock() - this.since : 0);
  }
}
