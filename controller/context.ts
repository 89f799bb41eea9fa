// Per-call context handed from the interceptor (controller/interceptors.ts) to handlers through
// a Connect context key, never a global: who is calling and under which request/correlation ids.
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { create } from "@bufbuild/protobuf";
import { ResponseMetaSchema, type ResponseMeta } from "../gen/skipper/v1/envelope_pb.js";
import type { Logger } from "../common/logging/logger.js";

export const SCHEMA_VERSION = "v1";

/** The authenticated caller. */
export type Principal = { kind: "admin" } | { kind: "node"; nodeId: string } | { kind: "anonymous" };

/** The ids a change carries from the call that caused it to every record it leads to. */
export interface Trace {
  requestId: string;
  correlationId: string;
}

/** Everything a handler needs to know about the call beyond its request message. */
export interface CallInfo {
  requestId: string;
  correlationId: string;
  principal: Principal;
  /** Value of x-idempotency-key, when sent. */
  idempotencyKey?: string;
  /** Logger bound to this call's ids. */
  logger: Logger;
}

/** The trace ids of a call, for the records it leads to. */
export function traceOf(call: CallInfo): Trace {
  return { requestId: call.requestId, correlationId: call.correlationId };
}

export const callInfoKey = createContextKey<CallInfo | undefined>(undefined, {
  description: "skipper call info",
});

/** The call info the interceptor attached; throws if a handler runs without it (a wiring bug). */
export function callInfo(ctx: HandlerContext): CallInfo {
  const info = ctx.values.get(callInfoKey);
  if (!info) throw new Error("call info missing: handler invoked without the skipper interceptor");
  return info;
}

/** The ResponseMeta every response carries. */
export function responseMeta(ctx: HandlerContext): ResponseMeta {
  const info = callInfo(ctx);
  return create(ResponseMetaSchema, {
    schemaVersion: SCHEMA_VERSION,
    requestId: info.requestId,
    correlationId: info.correlationId,
    timestamp: timestampNow(),
  });
}
