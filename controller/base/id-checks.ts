// Ids that arrive from outside (path segments, fields, headers) are checked before any I/O and
// refused with INVALID_REQUEST naming the offending field.
import { ID_PATTERN, isValidId, RESOURCE_TYPES, type ResourceType } from "../../common/ids.js";
import { invalid } from "./errors.js";

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

// Show a bounded, printable rendering of untrusted input in error messages.
function describe(v: string): string {
  const shown = JSON.stringify(v.length > 64 ? `${v.slice(0, 64)}…` : v);
  return v.length === 0 ? "an empty string" : shown;
}
