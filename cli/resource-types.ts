// The resource types as an operator types them: the API's names (tenant, resource_limits), their
// plurals, and a few short forms (each kind's aliases), as kubectl accepts `pods`, `po` and `pod`.
import { RESOURCE_KINDS, RESOURCE_TYPES, type ResourceType } from "../common/resource-kinds.js";
import { CliError } from "./errors.js";

const ALIASES = new Map<string, ResourceType>(RESOURCE_TYPES.flatMap((t) => RESOURCE_KINDS[t].aliases.map((a) => [a, t] as const)));

/** The resource type an operator named; an unknown one is an error that lists them. */
export function resourceType(name: string): ResourceType {
  const n = name.toLowerCase();
  if ((RESOURCE_TYPES as readonly string[]).includes(n)) return n as ResourceType;
  const t = ALIASES.get(n);
  if (t) return t;
  throw new CliError(`unknown resource type ${JSON.stringify(name)}`, { hint: `one of: ${RESOURCE_TYPES.join(", ")} (or their plurals)` });
}

/** Every name `resourceType` accepts, for shell completion. */
export function resourceTypeNames(): string[] {
  return [...RESOURCE_TYPES, ...ALIASES.keys()];
}
