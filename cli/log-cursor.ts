// Where a followed log stands on one node: the instant of the newest line printed (to the
// nanosecond the engine stamps) and which lines of that instant were printed. The engine's
// --since is inclusive and to the millisecond, so each round sends lines printed before; a line
// is new when it is later than that instant, or at it and not yet printed (two lines can share
// a millisecond, and even a nanosecond stamp).
import type { LogLine } from "../gen/skipper/v1/work_order_pb.js";

/** A line's time in nanoseconds since the epoch (0 without one). */
export function lineNanos(l: LogLine): bigint {
  return l.time ? l.time.seconds * 1_000_000_000n + BigInt(l.time.nanos) : 0n;
}

export class LogCursor {
  private at = -1n;
  private printed = new Set<string>();

  /** Whether `line` of `container` is new; if so, it counts as printed from now on. */
  take(container: string, line: LogLine): boolean {
    const t = lineNanos(line);
    const key = `${container}\0${line.stream}\0${line.text}`;
    if (t < this.at || (t === this.at && this.printed.has(key))) return false;
    if (t > this.at) {
      this.at = t;
      this.printed = new Set();
    }
    this.printed.add(key);
    return true;
  }
}
