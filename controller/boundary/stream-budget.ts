// The byte budget of a request stream (an agent's Session): each message under way holds its bytes
// against the same pools as a request body (body-limits.ts: its connection's, its address's and
// the controller's), from its first byte until its last, and must arrive whole within the class's
// deadline. Between messages a stream holds nothing, however long it lives. So ten thousand
// sessions each trickling half a message cannot hold more than the budgets allow, and one that
// stalls mid-message is ended, not kept with its bytes for ever.
//
// The stream is read as it comes, envelope by envelope (Connect, gRPC and gRPC-Web frame each
// message alike: one flags byte, a 4-byte big-endian length, the payload); the chunks pass on
// unchanged to the router, which decodes them under readMaxBytes.
import type { BodyReservation } from "./body-limits.js";
import { BodyBudgetError, BodyDeadlineError } from "./rest/read-body.js";
import { SkipperError } from "../base/errors.js";

const HEADER_BYTES = 5;

// The refusal a budgeted stream ends with (the session's failure, which the interceptor maps to
// a Connect code): RESOURCE_EXHAUSTED for a budget, INVALID_REQUEST for a deadline.
export function streamRefusal(e: unknown): SkipperError | undefined {
  if (e instanceof BodyBudgetError) {
    return new SkipperError("RESOURCE_EXHAUSTED", e.message, { field: "stream", budget: e.pool, retry_after_ms: e.retryAfterMs });
  }
  if (e instanceof BodyDeadlineError) {
    return new SkipperError("INVALID_REQUEST", `a stream message did not arrive whole within ${e.deadlineMs} ms`, {
      field: "stream",
      deadline_ms: e.deadlineMs,
    });
  }
  return undefined;
}

/** One whole message of a stream, as framed (flags byte, payload). */
export interface Envelope {
  flags: number;
  data: Uint8Array;
}

/**
 * A request stream's bytes, envelope by envelope as they come: each message under way holds its
 * bytes through `reserve()` (a reservation per message, released at its last byte) from its first
 * byte. `push` throws BodyBudgetError past a budget and, when messages are collected, a
 * RESOURCE_EXHAUSTED SkipperError for a message announced over `maxBytes` (before its payload is
 * taken). The deadline is the reader's: `startedAt` says when the message under way began.
 */
export class EnvelopeMeter {
  private readonly header = new Uint8Array(HEADER_BYTES);
  private headerHave = 0;
  private left = -1; // payload bytes still to come; -1 while the header is read
  private current: BodyReservation | undefined;
  private parts: Uint8Array[] = [];
  /** When the message under way began (the clock's ms), or undefined between messages. */
  startedAt: number | undefined;

  constructor(
    private readonly reserve: () => BodyReservation,
    private readonly now: () => number,
    /** Whole messages are returned by push (otherwise only counted, for a reader that splits them itself). */
    private readonly collect: { maxBytes: number } | undefined,
  ) {}

  /** Takes `chunk`; returns the messages it completes (none unless collecting). */
  push(chunk: Uint8Array): Envelope[] {
    const done: Envelope[] = [];
    let i = 0;
    while (i < chunk.length) {
      if (!this.current) {
        this.current = this.reserve();
        this.startedAt = this.now();
        this.headerHave = 0;
        this.left = -1;
      }
      if (this.left < 0) {
        const n = Math.min(HEADER_BYTES - this.headerHave, chunk.length - i);
        this.take(n);
        this.header.set(chunk.subarray(i, i + n), this.headerHave);
        this.headerHave += n;
        i += n;
        if (this.headerHave === HEADER_BYTES) this.left = this.announced();
      } else {
        const n = Math.min(this.left, chunk.length - i);
        this.take(n);
        if (this.collect) this.parts.push(chunk.subarray(i, i + n));
        this.left -= n;
        i += n;
      }
      if (this.left === 0) {
        if (this.collect) done.push({ flags: this.header[0]!, data: joined(this.parts) });
        this.parts = [];
        this.release();
      }
    }
    return done;
  }

  /** Lets go of the message under way (the stream ended or was refused). */
  release(): void {
    this.current?.release();
    this.current = undefined;
    this.startedAt = undefined;
  }

  private announced(): number {
    const length = new DataView(this.header.buffer).getUint32(1);
    if (this.collect && length > this.collect.maxBytes) {
      throw new SkipperError("RESOURCE_EXHAUSTED", `a stream message of ${length} bytes is over the limit of ${this.collect.maxBytes}`, {
        field: "stream",
        max_bytes: this.collect.maxBytes,
      });
    }
    return length;
  }

  private take(n: number): void {
    if (this.current!.take(n)) return;
    throw new BodyBudgetError(this.current!.refusedBy ?? "total", 1000);
  }
}

function joined(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * `chunks` (a request stream's raw bytes) with every message under way reserved through
 * `reserve()` (a reservation per message, released at its last byte) and bounded by `deadlineMs`
 * from its first byte. Throws the refusal as a SkipperError (RESOURCE_EXHAUSTED, INVALID_REQUEST).
 */
export async function* budgetedStream(
  chunks: AsyncIterable<Uint8Array>,
  reserve: () => BodyReservation,
  deadlineMs: number,
  now: () => number = Date.now,
): AsyncGenerator<Uint8Array> {
  const it = chunks[Symbol.asyncIterator]();
  const meter = new EnvelopeMeter(reserve, now, undefined);
  try {
    for (;;) {
      const started = meter.startedAt;
      const next = started === undefined ? await it.next() : await withDeadline(it.next(), started + deadlineMs - now(), deadlineMs);
      if (next.done) return;
      meter.push(next.value);
      yield next.value;
    }
  } catch (e) {
    throw streamRefusal(e) ?? e;
  } finally {
    meter.release();
    // A stream refused or abandoned here stops being read (not awaited: a read may be pending,
    // and the response's end closes the request anyway).
    void it.return?.()?.catch(() => undefined);
  }
}

async function withDeadline<T>(p: Promise<T>, remainingMs: number, deadlineMs: number): Promise<T> {
  if (remainingMs <= 0) throw new BodyDeadlineError(deadlineMs);
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new BodyDeadlineError(deadlineMs)), remainingMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
