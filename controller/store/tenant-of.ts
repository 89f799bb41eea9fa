// Which tenant a resource belongs to: the store indexes resources by it, and every layer above
// asks the same question (scope checks among them). One entry per kind of ResourceSpec, checked
// by the compiler: a kind added to the contract without saying whose it is does not build, where a
// default would have quietly made it "no tenant's", readable by a reader scoped to any tenant.
import type { Resource, ResourceSpec } from "../../gen/skipper/v1/resource_pb.js";

type Kind = NonNullable<ResourceSpec["kind"]["case"]>;
type SpecOf<K extends Kind> = Extract<ResourceSpec["kind"], { case: K }>["value"];

/** Whose a resource of each kind is: its tenant's id, or "fleet" for kinds no tenant owns. */
const OWNER: { [K in Kind]: ((spec: SpecOf<K>, id: string) => string) | "fleet" } = {
  tenant: (_spec, id) => id,
  node: "fleet",
  resourceLimits: "fleet",
  service: (spec) => spec.tenantId,
  deployment: (spec) => spec.tenantId,
  network: (spec) => spec.tenantId,
  volume: (spec) => spec.tenantId,
  rollout: (spec) => spec.tenantId,
  secret: (spec) => spec.tenantId,
  // A freeze without a tenant is the fleet's.
  freeze: (spec) => spec.tenantId,
};

/** The tenant a resource belongs to, when it has one. */
export function tenantOf(r: Resource): string | undefined {
  if (r.resourceType === "tenant") return r.id;
  const k = r.desiredState?.kind;
  if (!k?.case) return undefined;
  const owner = OWNER[k.case] as ((spec: unknown, id: string) => string) | "fleet";
  return owner === "fleet" ? undefined : owner(k.value, r.id) || undefined;
}
