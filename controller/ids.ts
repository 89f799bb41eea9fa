// Validation of identifiers that arrive from outside (path segments, fields, headers). Ids become
// file names in the file store, so the pattern admits no separators, no dot segments, no NUL, no
// non-ASCII and nothing long; everything else is refused with INVALID_REQUEST before any I/O.
import { invalid } from "./errors.js";

/** Resource, node, tenant and work-order ids: 1-128 chars of [A-Za-z0-9._-], starting alphanumeric. */
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Request and correlation ids from headers: 1-128 chars of [A-Za-z0-9._:-]. */
export const TRACE_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;

/** The resource types the controller stores. */
export const RESOURCE_TYPES = [
  "tenant",
  "node",
  "service",
  "deployment",
  "resource_limits",
  "network",
  "volume",
] as const;
export type ResourceType = (typeof RESOURCE_TYPES)[number];

/** True when `id` is safe to use as a file name and in URLs. */
export function isValidId(id: string): boolean {
  return ID_PATTERN.test(id) && !id.includes("..");
}

/** Returns `id` or throws INVALID_REQUEST naming the offending field. */
export function checkId(id: string, field: string): string {
  if (!isValidId(id)) {
    throw invalid(`${field} must match ${ID_PATTERN.source} without "..": got ${describe(id)}`, {
      field,
    });
  }
  return id;
}

/** Returns the resource type or throws INVALID_REQUEST listing the accepted ones. */
export function checkResourceType(type: string, field = "resource_type"): ResourceType {
  if ((RESOURCE_TYPES as readonly string[]).includes(type)) return type as ResourceType;
  throw invalid(`${field} must be one of ${RESOURCE_TYPES.join(", ")}: got ${describe(type)}`, {
    field,
    allowed: [...RESOURCE_TYPES],
  });
}

/** True for an acceptable request/correlation id header value. */
export function isValidTraceId(v: string): boolean {
  return TRACE_ID_PATTERN.test(v);
}

// Show a bounded, printable rendering of untrusted input in error messages.
function describe(v: string): string {
  const shown = JSON.stringify(v.length > 64 ? v.slice(0, 64) + "…" : v);
  return v.length === 0 ? "an empty string" : shown;
}
