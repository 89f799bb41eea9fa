// References between resources, by id: a service names its tenant, networks, volumes, limits and
// the services it depends on; networks and volumes name their tenant. Outgoing references must
// name live resources when written (else INVALID_REQUEST with the field), and a resource that
// live resources still reference cannot be deleted without cascade (CONFLICT listing them).
// A tenant's service_ids and placement node ids are not checked: membership is the service's
// tenant_id, and nodes come and go (a missing node is NO_MATCHING_NODE, not an error).
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { invalid } from "../base/errors.js";
import type { ResourceType } from "../../common/resource-kinds.js";
import type { Store } from "../store/store.js";
import { eachScannedResource } from "../store/each-page.js";
import { REFERRING_KINDS, referencesOf } from "./kinds.js";

/**
 * Checks every outgoing reference of `r` against the store: the target must exist and not be
 * deleted; networks and volumes must belong to the service's tenant (or to none); depends_on
 * must stay in the tenant and form no cycle. Throws INVALID_REQUEST naming the field.
 */
export async function checkReferencesExist(store: Store, r: Resource): Promise<void> {
  const refs = referencesOf(r);
  const kind = r.desiredState?.kind;
  // Whose secrets the resource may name: a service's and an artifact's tenant, a tenant itself.
  const tenantId = kind?.case === "service" || kind?.case === "artifact" ? kind.value.tenantId : r.resourceType === "tenant" ? r.id : "";
  for (const ref of refs) {
    if (ref.type === r.resourceType && ref.id === r.id) throw invalid(`${ref.field} names the resource itself`, { field: ref.field });
    const target = await store.getResource(ref.type, ref.id);
    if (!target) {
      throw invalid(`${ref.field} names ${ref.type} ${ref.id}, which does not exist`, {
        field: ref.field,
        resource_type: ref.type,
        resource_id: ref.id,
      });
    }
    if (ref.type === "secret") {
      const spec = target.desiredState?.kind.case === "secret" ? target.desiredState.kind.value : undefined;
      if (spec?.tenantId !== tenantId) {
        // Whose it is stays unsaid: the caller may not be allowed to know that tenant.
        throw invalid(`${ref.field} names secret ${ref.id}, which tenant ${tenantId} does not have`, {
          field: ref.field,
          resource_type: ref.type,
          resource_id: ref.id,
        });
      }
      // A reference to the whole secret (an artifact's registry credential) names no value.
      if (ref.key !== undefined && !spec.entries.some((e) => e.name === ref.key)) {
        throw invalid(`${ref.field} names value ${JSON.stringify(ref.key)} of secret ${ref.id}, which it does not hold`, {
          field: ref.field,
          resource_type: ref.type,
          resource_id: ref.id,
        });
      }
    } else if (r.resourceType === "service" && ref.type !== "tenant" && ref.type !== "resource_limits") {
      const owner = ownerTenant(target);
      if (owner !== "" && owner !== tenantId) {
        throw invalid(`${ref.field} names ${ref.type} ${ref.id} of tenant ${owner}, not ${tenantId}`, {
          field: ref.field,
          resource_type: ref.type,
          resource_id: ref.id,
        });
      }
    }
  }
  if (r.desiredState?.kind.case === "service" && r.desiredState.kind.value.dependsOn.length > 0) {
    await checkNoDependencyCycle(store, r);
  }
  if (r.desiredState?.kind.case === "environment" && r.desiredState.kind.value.dependsOn.length > 0) {
    const spec = r.desiredState.kind.value;
    for (const [i, d] of spec.dependsOn.entries()) {
      const up = await store.getResource("environment", d.environmentId);
      const delivery = up?.desiredState?.kind.case === "environment" ? up.desiredState.kind.value.deliveryId : "";
      if (delivery !== spec.deliveryId) {
        const field = `desired_state.environment.depends_on[${i}].environment_id`;
        throw invalid(`${field} names environment ${d.environmentId} of delivery ${delivery}, not ${spec.deliveryId}`, { field });
      }
    }
    await checkNoDependencyCycle(store, r);
  }
}

// What a service or an environment depends on (depends_on), by id of the same type.
function dependsOnOf(r: Resource | undefined): string[] {
  const k = r?.desiredState?.kind;
  if (k?.case === "service") return k.value.dependsOn;
  if (k?.case === "environment") return k.value.dependsOn.map((d) => d.environmentId);
  return [];
}

// Follows depends_on from the new version of `r` through the stored resources of its type (services
// or environments); reaching `r` again is a cycle.
async function checkNoDependencyCycle(store: Store, r: Resource): Promise<void> {
  const type = r.resourceType === "environment" ? "environment" : "service";
  const depsOf = async (id: string): Promise<string[]> => (id === r.id ? dependsOnOf(r) : dependsOnOf(await store.getResource(type, id)));
  const seen = new Set<string>();
  const path: string[] = [];
  const visit = async (id: string): Promise<void> => {
    if (path.includes(id)) {
      const cycle = [...path.slice(path.indexOf(id)), id];
      throw invalid(`desired_state.${type}.depends_on makes a cycle: ${cycle.join(" -> ")}`, {
        field: `desired_state.${type}.depends_on`,
        cycle,
      });
    }
    if (seen.has(id)) return;
    seen.add(id);
    path.push(id);
    for (const next of await depsOf(id)) await visit(next);
    path.pop();
  };
  await visit(r.id);
}

/** The tenant a network, volume or service belongs to ("" for none). */
function ownerTenant(r: Resource): string {
  const k = r.desiredState?.kind;
  return k?.case === "network" || k?.case === "volume" || k?.case === "service" ? k.value.tenantId : "";
}

/** Live resources that reference (type, id) directly, by kind (services, then networks, volumes), each kind in id order. */
export async function dependentsOf(store: Store, type: ResourceType, id: string): Promise<Resource[]> {
  const out: Resource[] = [];
  for (const kind of REFERRING_KINDS) {
    for await (const candidate of eachScannedResource(store, { resourceType: kind })) {
      if (referencesOf(candidate).some((ref) => ref.type === type && ref.id === id)) out.push(candidate);
    }
  }
  return out;
}

/**
 * Everything that must go when (type, id) is deleted with cascade: its dependents, theirs, and
 * so on, ordered so each resource comes after everything that references it.
 */
export async function cascadeOf(store: Store, type: ResourceType, id: string): Promise<Resource[]> {
  const order: Resource[] = [];
  const seen = new Set<string>([`${type}/${id}`]);
  const visit = async (t: ResourceType, i: string): Promise<void> => {
    for (const d of await dependentsOf(store, t, i)) {
      const key = `${d.resourceType}/${d.id}`;
      if (seen.has(key)) continue;
      seen.add(key);
      await visit(d.resourceType as ResourceType, d.id);
      order.push(d);
    }
  };
  await visit(type, id);
  return order;
}

/** "<type>/<id>" of a resource. */
export function refKey(r: Resource): string {
  return `${r.resourceType}/${r.id}`;
}
