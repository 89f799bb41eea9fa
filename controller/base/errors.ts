// Typed domain errors. Store and domain code throw SkipperError with a stable machine code from
// the seed's set; the RPC boundary (controller/boundary/interceptors.ts) maps each code to a Connect code
// and the REST layer to an HTTP status, once. Nothing below the boundary knows about HTTP.

import type { ErrorCode } from "../../common/error-codes.js";

export { ERROR_CODES, type ErrorCode } from "../../common/error-codes.js";

/** JSON-safe details attached to an error (field names, ids, current status...). */
export type ErrorDetails = Record<string, string | number | boolean | null | string[]>;

/** A domain error with a stable code; `cause` is kept for logs and never sent to clients. */
export class SkipperError extends Error {
  override readonly name = "SkipperError";
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetails = {},
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Type guard for SkipperError (works across module copies). */
export function isSkipperError(e: unknown): e is SkipperError {
  return e instanceof Error && e.name === "SkipperError" && typeof (e as SkipperError).code === "string";
}

export const invalid = (message: string, details: ErrorDetails = {}) => new SkipperError("INVALID_REQUEST", message, details);

export const notFound = (resourceType: string, resourceId: string, message?: string) =>
  new SkipperError("RESOURCE_NOT_FOUND", message ?? `${resourceType} ${resourceId} not found`, {
    resource_type: resourceType,
    resource_id: resourceId,
  });

export const conflict = (message: string, details: ErrorDetails = {}) => new SkipperError("CONFLICT", message, details);

export const notClaimable = (message: string, details: ErrorDetails = {}) => new SkipperError("WORK_ORDER_NOT_CLAIMABLE", message, details);

export const unauthorized = (message = "missing or invalid credentials") => new SkipperError("UNAUTHORIZED", message);

export const forbidden = (message: string, details: ErrorDetails = {}) => new SkipperError("FORBIDDEN", message, details);
