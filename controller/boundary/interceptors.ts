// The RPC boundary. One interceptor runs around every call, for Connect, gRPC, gRPC-Web and the
// REST routes alike (REST calls go through an in-memory transport with the same interceptors):
//   1. request/correlation ids: accepted from headers when well-formed, else generated, and
//      echoed in response headers (also on errors)
//   2. authentication and the permission the RPC declares in the contract (auth/permissions.ts);
//      the caller's actor and tenant scope go to the handler in CallInfo
//   3. one structured log line per call, and one audit entry per call that changes something
//      (auth/audit-policy.ts says which)
//   4. domain errors -> Connect errors carrying a skipper.v1.ApiError detail; anything else is
//      logged with its cause and answered as INTERNAL_ERROR, never with a stack trace;
//   5. the call counted by method and code (a stream when it ends), a unary call's time observed.
import { Code, ConnectError, type Interceptor, type StreamRequest } from "@connectrpc/connect";
import { isSkipperError, invalid } from "../base/errors.js";
import { errorCodeOf } from "./api-errors.js";
import { permissionOf } from "../auth/permissions.js";
import { Permission } from "../../gen/skipper/v1/access_pb.js";
import { refuseNul, replaceNul } from "./text-checks.js";
import { BoundaryCall, type BoundaryDeps } from "./boundary-call.js";

export type { BoundaryDeps } from "./boundary-call.js";

/** The single boundary interceptor described above. */
export function boundaryInterceptor(deps: BoundaryDeps): Interceptor {
  return (next) => async (req) => {
    const call = new BoundaryCall(deps, req);
    try {
      await call.admit();
      call.prepare();
      let res: Awaited<ReturnType<typeof next>>;
      try {
        res = await next(req.stream ? { ...req, message: checkedMessages(req) } : req);
      } catch (e) {
        await call.auditFailure(isSkipperError(e) ? e.code : e instanceof ConnectError ? errorCodeOf(e.code) : "INTERNAL_ERROR");
        throw e;
      }
      await call.audit("OK");
      call.answered(res.header);
      // A streaming handler's body runs as its messages are read, after this returns: its errors
      // (a node watching another node's orders, say) are mapped here too.
      if (res.stream) {
        return {
          ...res,
          message: mapErrors(
            res.message,
            (e) => call.streamFailure(e),
            (code) => call.counted(code),
          ),
        };
      }
      call.counted(undefined);
      return res;
    } catch (e) {
      const err = call.failure(e);
      call.counted(err.code);
      throw err;
    }
  };
}

/**
 * A request stream's messages as the handler reads them, held to the rules prepare() applies to a
 * unary request's message (text neither store can keep). Connect reports bytes that are not the
 * method's request message as `internal`; coming from the request stream, they are the caller's
 * INVALID_REQUEST.
 */
async function* checkedMessages(req: StreamRequest): StreamRequest["message"] {
  const node = permissionOf(req.method) === Permission.NODE;
  try {
    for await (const m of req.message) {
      if (node) replaceNul(m);
      else refuseNul(m);
      yield m;
    }
  } catch (e) {
    if (e instanceof ConnectError && e.code === Code.Internal) {
      throw invalid(`a message on the stream is not a valid ${req.method.input.typeName}: ${e.rawMessage}`, { field: "body" });
    }
    throw e;
  }
}

/** A response stream whose errors leave through `failure`; `ended` is told its code (undefined: OK). */
async function* mapErrors<T>(
  messages: AsyncIterable<T>,
  failure: (e: unknown) => ConnectError,
  ended: (code: Code | undefined) => void,
): AsyncIterable<T> {
  let code: Code | undefined;
  try {
    yield* messages;
  } catch (e) {
    // A client that went away is not a failure of the call.
    const gone =
      (e instanceof ConnectError && (e.code === Code.Canceled || e.code === Code.DeadlineExceeded)) || (e as Error)?.name === "AbortError";
    const err = gone ? e : failure(e);
    code = err instanceof ConnectError ? err.code : Code.Canceled;
    throw err;
  } finally {
    ended(code);
  }
}
