// Reads a request body with a size cap, refusing as early as the request allows: on a declared
// content-length above the cap, on an enveloped message (Connect streaming, gRPC, gRPC-Web) whose
// 5-byte prefix announces more than the cap, and otherwise as soon as the cap is crossed. Memory
// held is what has arrived, never what was announced. The rest of an oversize body is discarded
// as it arrives (Node does that itself for a body nobody reads), so the answer reaches the client.
// With a deadline, the whole body must arrive within it (a trickle does not extend it); with a
// reservation (body-limits.ts), every buffered byte is reserved first and a refusal ends the read.
import type { Readable } from "node:stream";
import type { BodyReservation } from "../body-limits.js";
import { SkipperError } from "../../base/errors.js";

/** Thrown when a body did not end within its deadline; answered 408 (REST) or INVALID_REQUEST (RPC). */
export class BodyDeadlineError extends Error {
  override readonly name = "BodyDeadlineError";
  constructor(readonly deadlineMs: number) {
    super(`request body did not arrive within ${deadlineMs} ms`);
  }
}

/** Thrown when the bytes held by unfinished bodies are at a budget; answered RESOURCE_EXHAUSTED (429). */
export class BodyBudgetError extends Error {
  override readonly name = "BodyBudgetError";
  constructor(
    readonly pool: string,
    readonly retryAfterMs: number,
  ) {
    super(`too many request bytes in flight (${pool} budget); retry after ${retryAfterMs} ms`);
  }
}

/** Thrown when a body is larger than allowed; answered 413 (REST) or INVALID_REQUEST (RPC). */
export class BodyTooLargeError extends Error {
  override readonly name = "BodyTooLargeError";
  constructor(readonly limit: number) {
    super(`request body exceeds ${limit} bytes`);
  }
}

type BodySource = Readable & { headers: Record<string, string | string[] | undefined> };

export interface ReadBodyOptions {
  /** The body is a stream of enveloped messages: check each one's announced length as its prefix arrives. */
  enveloped?: boolean;
  /** The body must end within this many ms of the call (0 or unset: no deadline). */
  deadlineMs?: number;
  /** Where the buffered bytes are reserved; released when the read fails (the caller releases after use). */
  reservation?: BodyReservation;
}

/** The body as text; rejects with BodyTooLargeError past `maxBytes`. */
export async function readBody(req: BodySource, maxBytes: number): Promise<string> {
  return (await readBodyBytes(req, maxBytes)).toString("utf8");
}

/** The body's bytes; rejects with BodyTooLargeError past `maxBytes`. */
export function readBodyBytes(req: BodySource, maxBytes: number, opts: ReadBodyOptions = {}): Promise<Buffer> {
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > maxBytes) return Promise.reject(new BodyTooLargeError(maxBytes));
  // Listeners rather than `for await`: leaving that loop early destroys the request, and with it
  // the socket the answer must be written to.
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // Offset of the next envelope's 5-byte prefix in the body.
    let nextEnvelope = 0;
    const deadline = opts.deadlineMs ? setTimeout(() => fail(new BodyDeadlineError(opts.deadlineMs!)), opts.deadlineMs) : undefined;
    const stop = () => {
      if (deadline) clearTimeout(deadline);
      req.off("data", onData).off("end", onEnd).off("error", onError);
    };
    const fail = (e: Error) => {
      stop();
      chunks.length = 0;
      opts.reservation?.release();
      req.resume();
      reject(e);
    };
    const tooLarge = () => fail(new BodyTooLargeError(maxBytes));
    const onData = (chunk: Buffer | string) => {
      const buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      size += buf.length;
      if (size > maxBytes) return tooLarge();
      if (opts.reservation && !opts.reservation.take(buf.length)) {
        return fail(new BodyBudgetError(opts.reservation.refusedBy ?? "total", 1000));
      }
      chunks.push(buf);
      if (!opts.enveloped) return;
      while (size >= nextEnvelope + 5) {
        const length = prefixAt(chunks, nextEnvelope + 1).readUInt32BE(0);
        nextEnvelope += 5 + length;
        if (nextEnvelope > maxBytes) return tooLarge();
      }
    };
    const onEnd = () => {
      stop();
      resolve(Buffer.concat(chunks));
    };
    const onError = (err: Error) => {
      stop();
      opts.reservation?.release();
      reject(err);
    };
    req.on("data", onData).on("end", onEnd).on("error", onError);
  });
}

// The 4 bytes at `offset` of the concatenated chunks (the caller made sure they have arrived).
function prefixAt(chunks: Buffer[], offset: number): Buffer {
  const out = Buffer.alloc(4);
  let pos = 0;
  let filled = 0;
  for (const c of chunks) {
    if (filled === 4) break;
    const end = pos + c.length;
    if (end > offset + filled) {
      const from = offset + filled - pos;
      filled += c.copy(out, filled, from, Math.min(c.length, from + 4 - filled));
    }
    pos = end;
  }
  return out;
}

/** The refusal for a body read that failed for one of its limits; undefined for anything else. */
export function bodyRefusal(e: unknown, limit: number): SkipperError | undefined {
  if (e instanceof BodyTooLargeError) return new SkipperError("INVALID_REQUEST", e.message, { field: "body", limit });
  if (e instanceof BodyDeadlineError) return new SkipperError("INVALID_REQUEST", e.message, { field: "body", deadline_ms: e.deadlineMs });
  if (e instanceof BodyBudgetError) {
    return new SkipperError("RESOURCE_EXHAUSTED", e.message, { field: "body", budget: e.pool, retry_after_ms: e.retryAfterMs });
  }
  return undefined;
}
