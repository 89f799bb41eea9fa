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
function streamRefusal(e: unknown): SkipperError | undefined {
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
  const header = new Uint8Array(HEADER_BYTES);
  let headerHave = 0;
  let left = -1; // payload bytes still to come; -1 while the header is read
  let current: BodyReservation | undefined;
  let startedAt = 0;
  const take = (n: number) => {
    if (current!.take(n)) return;
    throw new BodyBudgetError(current!.refusedBy ?? "total", 1000);
  };
  try {
    for (;;) {
      const next = current ? await withDeadline(it.next(), startedAt + deadlineMs - now(), deadlineMs) : await it.next();
      if (next.done) return;
      const chunk = next.value;
      let i = 0;
      while (i < chunk.length) {
        if (!current) {
          current = reserve();
          startedAt = now();
          headerHave = 0;
          left = -1;
        }
        if (left < 0) {
          const n = Math.min(HEADER_BYTES - headerHave, chunk.length - i);
          take(n);
          header.set(chunk.subarray(i, i + n), headerHave);
          headerHave += n;
          i += n;
          if (headerHave === HEADER_BYTES) left = new DataView(header.buffer).getUint32(1);
        } else {
          const n = Math.min(left, chunk.length - i);
          take(n);
          left -= n;
          i += n;
        }
        if (left === 0) {
          current.release();
          current = undefined;
        }
      }
      yield chunk;
    }
  } catch (e) {
    throw streamRefusal(e) ?? e;
  } finally {
    current?.release();
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
