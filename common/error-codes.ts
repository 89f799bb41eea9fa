// The contract's machine-readable error codes (ApiError.code) and the Connect code each travels
// with: the controller answers with them (controller/boundary/api-errors.ts), and the agent reads
// a refusal on its session as the error the unary call would have thrown (agent/session/session-link.ts).
import { Code } from "@connectrpc/connect";

/** The machine-readable error codes clients can rely on. */
export type ErrorCode =
  | "INVALID_REQUEST"
  | "UNAUTHORIZED"
  | "FORBIDDEN"
  | "RESOURCE_NOT_FOUND"
  | "CONFLICT"
  | "WORK_ORDER_NOT_CLAIMABLE"
  | "RESOURCE_EXHAUSTED"
  | "UNAVAILABLE"
  | "INTERNAL_ERROR";

export const ERROR_CODES: readonly ErrorCode[] = [
  "INVALID_REQUEST",
  "UNAUTHORIZED",
  "FORBIDDEN",
  "RESOURCE_NOT_FOUND",
  "CONFLICT",
  "WORK_ORDER_NOT_CLAIMABLE",
  "RESOURCE_EXHAUSTED",
  "UNAVAILABLE",
  "INTERNAL_ERROR",
];

/** The Connect (and so gRPC) code each error code is sent with. */
export const CONNECT_CODE: Record<ErrorCode, Code> = {
  INVALID_REQUEST: Code.InvalidArgument,
  UNAUTHORIZED: Code.Unauthenticated,
  FORBIDDEN: Code.PermissionDenied,
  RESOURCE_NOT_FOUND: Code.NotFound,
  CONFLICT: Code.Aborted,
  WORK_ORDER_NOT_CLAIMABLE: Code.FailedPrecondition,
  RESOURCE_EXHAUSTED: Code.ResourceExhausted,
  UNAVAILABLE: Code.Unavailable,
  INTERNAL_ERROR: Code.Internal,
};
