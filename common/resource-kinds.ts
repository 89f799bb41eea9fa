// The resource kinds, one entry each: what every program that speaks the contract knows of a kind
// (the controller, the CLI, the dashboard). The controller's own facts of a kind (its rules, its
// references, what it wakes, where the file store keeps it) are in controller/resources/kinds.ts;
// the CLI's columns in cli/resource-columns.ts. All three are tables keyed by ResourceType that
// the compiler checks for completeness, and this one is also checked against the contract: a
// member added to ResourceSpec's oneof without an entry here does not build (the error names it).
//
// Adding a kind: its message in the contract, an entry here, one in controller/resources/kinds.ts
// and one in cli/resource-columns.ts; the compiler names each that is missing.
import type { Resource, ResourceSpec } from "../gen/skipper/v1/resource_pb.js";

/** A member of ResourceSpec's (and ResourceStatus's) oneof: the camelCase name of a kind's state. */
export type SpecCase = NonNullable<ResourceSpec["kind"]["case"]>;
/** The spec message of the kind whose oneof member is `C`. */
export type SpecOf<C extends SpecCase> = Extract<ResourceSpec["kind"], { case: C }>["value"];

/** What every side knows of one kind. */
export interface ResourceKind<C extends SpecCase = SpecCase> {
  /** The member of ResourceSpec's and ResourceStatus's oneof that holds this kind's state. */
  readonly case: C;
  /**
   * Whose a resource of this kind is: its tenant's id, from its spec (an empty id: nobody's), or
   * "fleet" for kinds no tenant owns. There is no default: a kind says, or the build fails, since
   * "no tenant" makes a resource readable by a reader scoped to any tenant.
   */
  readonly tenant: ((spec: SpecOf<C>, id: string) => string) | "fleet";
  /**
   * Who writes it: the API (created, updated and deleted by callers; `order` is its place when
   * several are written together, what others name first), or the controller alone, with why an
   * API write is refused.
   */
  readonly writes: { readonly by: "api"; readonly order: number } | { readonly by: "controller"; readonly why: string };
  /** Other names an operator may type for it: its plural, short forms. */
  readonly aliases: readonly string[];
  /**
   * The file store's directory of its records, under resources/: plural and hyphenated, as the
   * design's file layout names them (layout 1 used the type's own name; the store moves those).
   * PostgreSQL keeps every kind in one table, by resource_type.
   */
  readonly dir: string;
}

const kind = <C extends SpecCase>(k: ResourceKind<C>): ResourceKind<C> => k;

/** Every resource kind, by its resource_type (in the order listings and the data directory use). */
export const RESOURCE_KINDS = {
  tenant: kind({ case: "tenant", dir: "tenants", tenant: (_spec, id) => id, writes: { by: "api", order: 1 }, aliases: ["tenants"] }),
  // A node may be declared ahead (labels, disabled, display name) with no credential; RegisterNode
  // then gives it its token.
  node: kind({ case: "node", dir: "nodes", tenant: "fleet", writes: { by: "api", order: 0 }, aliases: ["nodes"] }),
  service: kind({
    case: "service",
    dir: "services",
    tenant: (spec) => spec.tenantId,
    writes: { by: "api", order: 7 },
    aliases: ["services", "svc"],
  }),
  // The record of what was done: kept for rollback and history, so never edited (a rollback to an
  // edited record would restore what was never deployed).
  deployment: kind({
    case: "deployment",
    dir: "deployments",
    tenant: (spec) => spec.tenantId,
    writes: { by: "controller", why: "deployments are immutable records of what was deployed, written by the reconciler and Apply" },
    aliases: ["deployments", "deploy"],
  }),
  resource_limits: kind({
    case: "resourceLimits",
    dir: "resource-limits",
    tenant: "fleet",
    writes: { by: "api", order: 3 },
    aliases: ["limits", "resource-limits"],
  }),
  network: kind({
    case: "network",
    dir: "networks",
    tenant: (spec) => spec.tenantId,
    writes: { by: "api", order: 4 },
    aliases: ["networks", "net"],
  }),
  volume: kind({
    case: "volume",
    dir: "volumes",
    tenant: (spec) => spec.tenantId,
    writes: { by: "api", order: 5 },
    aliases: ["volumes", "vol"],
  }),
  rollout: kind({
    case: "rollout",
    dir: "rollouts",
    tenant: (spec) => spec.tenantId,
    writes: {
      by: "controller",
      why: "rollouts are records the reconciler starts when a tenant's spec changes (steer one with /v1/rollouts/{id}/pause|resume|promote|abort)",
    },
    aliases: ["rollouts"],
  }),
  // A freeze without a tenant is the fleet's.
  freeze: kind({ case: "freeze", dir: "freezes", tenant: (spec) => spec.tenantId, writes: { by: "api", order: 8 }, aliases: ["freezes"] }),
  secret: kind({ case: "secret", dir: "secrets", tenant: (spec) => spec.tenantId, writes: { by: "api", order: 2 }, aliases: ["secrets"] }),
  // Releases through environments (controller/delivery/). An artifact and its versions are their
  // tenant's; a delivery, its environments and Git sources are the fleet's, since an environment
  // changes several tenants' desired state at once.
  artifact: kind({
    case: "artifact",
    dir: "artifacts",
    tenant: (spec) => spec.tenantId,
    writes: { by: "api", order: 6 },
    aliases: ["artifacts", "art"],
  }),
  artifact_version: kind({
    case: "artifactVersion",
    dir: "artifact-versions",
    tenant: (spec) => spec.tenantId,
    writes: {
      by: "controller",
      why: "versions are immutable records: post one with POST /v1/artifacts/{id}/versions, or let the registry watch find it",
    },
    aliases: ["artifact-versions", "versions", "av"],
  }),
  delivery: kind({ case: "delivery", dir: "deliveries", tenant: "fleet", writes: { by: "api", order: 9 }, aliases: ["deliveries", "dlv"] }),
  environment: kind({
    case: "environment",
    dir: "environments",
    tenant: "fleet",
    writes: { by: "api", order: 10 },
    aliases: ["environments", "env", "envs"],
  }),
  git_source: kind({
    case: "gitSource",
    dir: "git-sources",
    tenant: "fleet",
    writes: { by: "api", order: 11 },
    aliases: ["git-sources", "gitsource", "gs"],
  }),
  // A process module declared for nodes by label: the fleet's, since a module name is the node's
  // (one owner each) and its placement crosses tenants. Its status per node is the process
  // reconciler's (controller/reconcile/process-pass.ts).
  process: kind({ case: "process", dir: "processes", tenant: "fleet", writes: { by: "api", order: 12 }, aliases: ["processes", "proc"] }),
  // A version of the agent bundle the controller holds: the bytes under its data directory, the
  // manifest signed with its key. Only an upload writes one.
  agent_version: kind({
    case: "agentVersion",
    dir: "agent-versions",
    tenant: "fleet",
    writes: {
      by: "controller",
      why: "agent versions are uploaded bundles the controller signs: PUT /v1/agent-versions/{version}/skippy.mjs (skipper agent-version add FILE)",
    },
    aliases: ["agent-versions", "agentversion", "av"],
  }),
  // Which agent version the nodes it selects should run; the controller rolls it out.
  agent_update: kind({
    case: "agentUpdate",
    dir: "agent-updates",
    tenant: "fleet",
    writes: { by: "api", order: 13 },
    aliases: ["agent-updates", "agentupdate", "au"],
  }),
} as const;

/** A resource kind's name as the API spells it (resource_type). */
export type ResourceType = keyof typeof RESOURCE_KINDS;

/** The resource types, in the table's order. */
export const RESOURCE_TYPES = Object.keys(RESOURCE_KINDS) as readonly ResourceType[];

// Checked against the contract: each oneof member has a kind, and each kind a member. A failure
// here names the member without one.
type Described = (typeof RESOURCE_KINDS)[ResourceType]["case"];
const everyMemberHasAKind: [Exclude<SpecCase, Described>] extends [never] ? true : Exclude<SpecCase, Described> = true;
void everyMemberHasAKind;

/** The oneof member a kind's state is in (resource_limits -> resourceLimits). */
export function specCase(type: ResourceType): SpecCase {
  return RESOURCE_KINDS[type].case;
}

/** The resource type whose state is in oneof member `c` (resourceLimits -> resource_limits). */
export function typeOfCase(c: SpecCase): ResourceType {
  return CASE_TYPES.get(c) as ResourceType;
}
const CASE_TYPES = new Map<SpecCase, ResourceType>(RESOURCE_TYPES.map((t) => [RESOURCE_KINDS[t].case, t]));

/** The tenant a resource belongs to, when it has one (never for fleet kinds; an empty id is none). */
export function tenantOf(r: Resource): string | undefined {
  if (r.resourceType === "tenant") return r.id;
  const k = r.desiredState?.kind;
  if (!k?.case) return undefined;
  const owner = RESOURCE_KINDS[typeOfCase(k.case)].tenant as ((spec: unknown, id: string) => string) | "fleet";
  return owner === "fleet" ? undefined : owner(k.value, r.id) || undefined;
}

/** The kinds written through the API, in the order to write them together (what others name first). */
export const API_WRITE_ORDER: readonly ResourceType[] = RESOURCE_TYPES.filter((t) => RESOURCE_KINDS[t].writes.by === "api").sort(
  (a, b) => writeOrder(a) - writeOrder(b),
);
function writeOrder(t: ResourceType): number {
  const w = RESOURCE_KINDS[t].writes;
  return w.by === "api" ? w.order : Number.POSITIVE_INFINITY;
}

/** Why the API does not write kind `type` (undefined when it does). */
export function controllerOnly(type: ResourceType): string | undefined {
  const w = RESOURCE_KINDS[type].writes;
  return w.by === "controller" ? w.why : undefined;
}
