// The one map between Skipper's machine-readable error codes (errors.ts), Connect codes and HTTP
// statuses. The RPC interceptor uses it to turn a domain error into a Connect error, and the REST
// envelope to turn a Connect error (one without a skipper.v1.ApiError detail, e.g. from the
// router itself) back into a code and a status, so every protocol answers a failure alike.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ApiErrorSchema } from "../../gen/skipper/v1/envelope_pb.js";
import { CONNECT_CODE } from "../../common/error-codes.js";
import type { ErrorCode, SkipperError } from "../base/errors.js";

export { CONNECT_CODE };

/** The HTTP status each error code is answered with on the REST routes. */
export const HTTP_STATUS: Record<ErrorCode, number> = {
  INVALID_REQUEST: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  RESOURCE_NOT_FOUND: 404,
  CONFLICT: 409,
  WORK_ORDER_NOT_CLAIMABLE: 409,
  RESOURCE_EXHAUSTED: 429,
  UNAVAILABLE: 503,
  INTERNAL_ERROR: 500,
};

// Connect codes that arrive without an ApiError detail; any other code is an internal error.
const FROM_CONNECT: Partial<Record<Code, ErrorCode>> = {
  [Code.InvalidArgument]: "INVALID_REQUEST",
  [Code.OutOfRange]: "INVALID_REQUEST",
  [Code.Unauthenticated]: "UNAUTHORIZED",
  [Code.PermissionDenied]: "FORBIDDEN",
  [Code.NotFound]: "RESOURCE_NOT_FOUND",
  [Code.Unimplemented]: "RESOURCE_NOT_FOUND",
  [Code.AlreadyExists]: "CONFLICT",
  [Code.Aborted]: "CONFLICT",
  [Code.FailedPrecondition]: "WORK_ORDER_NOT_CLAIMABLE",
  [Code.ResourceExhausted]: "RESOURCE_EXHAUSTED",
  [Code.Unavailable]: "UNAVAILABLE",
};

/** The error code for a Connect code; INTERNAL_ERROR for codes with no meaning to clients. */
export function errorCodeOf(code: Code): ErrorCode {
  return FROM_CONNECT[code] ?? "INTERNAL_ERROR";
}

/** The HTTP status for an error code; unknown codes count as internal errors. */
export function httpStatusOf(code: string): number {
  return HTTP_STATUS[code as ErrorCode] ?? 500;
}

/** A domain error as the Connect error every protocol sends: its code, and the ApiError detail. */
export function connectErrorOf(e: SkipperError): ConnectError {
  const detail = create(ApiErrorSchema, { code: e.code, message: e.message, details: e.details });
  return new ConnectError(e.message, CONNECT_CODE[e.code], undefined, [{ desc: ApiErrorSchema, value: detail }]);
}
