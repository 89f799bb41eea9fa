// The identifiers both programs agree on. Ids become file names (the controller's store, the
// agent's state and project directories), so the pattern admits no separators, no dot segments,
// no NUL, no non-ASCII and nothing long. Pure: the controller turns a refusal into its own error
// (controller/base/id-checks.ts), the agent into a failed order.

/** Resource, node, tenant and work-order ids: 1-128 chars of [A-Za-z0-9._-], starting alphanumeric. */
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Request and correlation ids from headers: 1-128 chars of [A-Za-z0-9._:-]. */
export const TRACE_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;

/** The resource types (their table is common/resource-kinds.ts). */
export { RESOURCE_TYPES, type ResourceType } from "./resource-kinds.js";

/** True when `id` is safe to use as a file name and in URLs. */
export function isValidId(id: string): boolean {
  return ID_PATTERN.test(id) && !id.includes("..");
}

/** True for an acceptable request/correlation id header value. */
export function isValidTraceId(v: string): boolean {
  return TRACE_ID_PATTERN.test(v);
}
