// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header that ties a
// client's call, the controller's handling of it, the work orders it causes and the agent's calls
// and logs for them into one trace. Version 00 only is produced; a header this version does not
// understand (or a malformed one) starts a new trace, as the specification says.
import { randomBytes } from "node:crypto";

export interface TraceContext {
  /** 32 lowercase hex digits, not all zero. */
  traceId: string;
  /** The span the next span's parent is: 16 lowercase hex digits, not all zero. */
  spanId: string;
  /** Trace flags (bit 0: sampled), two hex digits. */
  flags: string;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** The context a `traceparent` value carries, or undefined when it is missing or malformed. */
export function parseTraceparent(value: string | null | undefined): TraceContext | undefined {
  const m = TRACEPARENT.exec((value ?? "").trim());
  if (!m) return undefined;
  const [, version, traceId, spanId, flags, rest] = m as unknown as [string, string, string, string, string, string | undefined];
  // ff is invalid; version 00 has exactly four fields; a later version may add more.
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return { traceId, spanId, flags };
}

/** The `traceparent` value of `ctx`. */
export function formatTraceparent(ctx: TraceContext): string {
  return `00-${ctx.traceId}-${ctx.spanId}-${ctx.flags}`;
}

/** A new span in the trace of `parent` (a new trace without one). */
export function childSpan(parent: TraceContext | undefined): TraceContext {
  return { traceId: parent?.traceId ?? newId(16), spanId: newId(8), flags: parent?.flags ?? "01" };
}

// Random bytes drawn a pool at a time: one call into the system's generator per 256 ids, not one each.
const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let poolAt = POOL_BYTES;

function newId(bytes: number): string {
  for (;;) {
    if (poolAt + bytes > pool.length) {
      pool = randomBytes(POOL_BYTES);
      poolAt = 0;
    }
    const id = pool.toString("hex", poolAt, (poolAt += bytes));
    if (!/^0+$/.test(id)) return id;
  }
}
