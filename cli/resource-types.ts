// The resource types as an operator types them: the API's names (tenant, resource_limits), their
// plurals, and a few short forms, as kubectl accepts `pods`, `po` and `pod`.
import { RESOURCE_TYPES, type ResourceType } from "../common/ids.js";
import { CliError } from "./errors.js";

const ALIASES: Record<string, ResourceType> = {
  tenants: "tenant",
  nodes: "node",
  services: "service",
  svc: "service",
  deployments: "deployment",
  deploy: "deployment",
  limits: "resource_limits",
  "resource-limits": "resource_limits",
  networks: "network",
  net: "network",
  volumes: "volume",
  vol: "volume",
  rollouts: "rollout",
  freezes: "freeze",
  secrets: "secret",
};

/** The resource type an operator named; an unknown one is an error that lists them. */
export function resourceType(name: string): ResourceType {
  const n = name.toLowerCase();
  if ((RESOURCE_TYPES as readonly string[]).includes(n)) return n as ResourceType;
  const t = ALIASES[n];
  if (t) return t;
  throw new CliError(`unknown resource type ${JSON.stringify(name)}`, { hint: `one of: ${RESOURCE_TYPES.join(", ")} (or their plurals)` });
}

/** Every name `resourceType` accepts, for shell completion. */
export function resourceTypeNames(): string[] {
  return [...RESOURCE_TYPES, ...Object.keys(ALIASES)];
}
