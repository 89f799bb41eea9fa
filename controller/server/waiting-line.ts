// The line of accepted connections waiting for room in the pool of connections nobody vouched for
// yet (connection-admission.ts): held before any TLS work, let in first come first served. A held
// connection's first bytes (a TLS ClientHello, a few hundred bytes) are read and kept, so a client
// that gives up is seen at once (its end arrives) and leaves the line, and handed back to the
// socket as it is let in (TLS and the h2c sniffing read them from its buffer as if just arrived).
// Measured here (Node 20, 5,000 held through serve()): about 2.6 KB of heap and 5 KB of RSS per
// held connection (a full line of 8,192: ~41 MB); in a bare sketch, about 1 KB of heap less unread.
import type net from "node:net";

/** More than this from a held connection is not a client waiting for an answer: it is closed. */
const MAX_HELD_BYTES = 16 * 1024;

interface Held {
  since: number;
  chunks: Buffer[];
  bytes: number;
  onData(chunk: Buffer): void;
  onEnd(): void;
}

/** Why a held connection left the line other than by being let in. */
export type LineExit = "timed-out" | "closed";

/** A bounded FIFO of held connections. */
export class WaitingLine {
  // Insertion order is arrival order: the first key is the longest waiting.
  private readonly held = new Map<net.Socket, Held>();

  constructor(
    private readonly cap: number,
    private readonly waitMs: number,
    private readonly onExit: (s: net.Socket, why: LineExit) => void,
  ) {}

  get size(): number {
    return this.held.size;
  }

  /** True when one more may wait. */
  hasRoom(): boolean {
    return this.held.size < this.cap;
  }

  /** Holds `s` (accepted with pauseOnConnect, not read yet) at the back of the line. */
  hold(s: net.Socket, now: number): void {
    const entry: Held = {
      since: now,
      chunks: [],
      bytes: 0,
      onData: (chunk) => {
        entry.chunks.push(chunk);
        entry.bytes += chunk.length;
        if (entry.bytes > MAX_HELD_BYTES) s.destroy();
      },
      onEnd: () => s.destroy(),
    };
    this.held.set(s, entry);
    s.on("data", entry.onData);
    s.once("end", entry.onEnd);
    s.once("close", () => {
      if (this.held.delete(s)) this.onExit(s, "closed");
    });
    s.resume();
  }

  /** The longest-waiting connection, out of the line with its bytes handed back (paused); undefined when none waits. */
  take(): net.Socket | undefined {
    const first = this.held.entries().next();
    if (first.done) return undefined;
    const [s, entry] = first.value;
    this.held.delete(s);
    s.removeListener("data", entry.onData);
    s.removeListener("end", entry.onEnd);
    s.pause();
    if (entry.chunks.length) s.unshift(entry.chunks.length === 1 ? entry.chunks[0]! : Buffer.concat(entry.chunks));
    return s;
  }

  /** Closes those that waited waitMs or longer (their clients retry after their backoff). */
  expire(now: number): void {
    for (const [s, entry] of this.held) {
      if (now - entry.since < this.waitMs) return;
      this.held.delete(s);
      this.onExit(s, "timed-out");
      s.destroy();
    }
  }
}
