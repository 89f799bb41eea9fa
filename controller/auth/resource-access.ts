// Tenant scope and role rules that depend on what a call touches, for the handlers to apply after
// they have read it. The permission an RPC needs is checked before the handler runs
// (auth/admission.ts); these add:
//   - a resource, order, rollout or snapshot of a tenant needs that tenant in the caller's scope;
//   - things no tenant owns (nodes, resource limits, ad-hoc orders to a host) may be read by any
//     reader, and changed only by a caller whose scope is every tenant;
//   - nodes are administered (created, changed) by admins only.
import { Permission } from "../../gen/skipper/v1/access_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { CallInfo } from "../base/context.js";
import { forbidden } from "../base/errors.js";
import { tenantOf } from "../../common/resource-kinds.js";
import { holds } from "./admission.js";

/** Throws unless the caller may read `r`. */
export async function checkReadable(call: CallInfo, r: Resource): Promise<void> {
  const tenant = tenantOf(r);
  if (tenant !== undefined) await call.tenants.require(tenant, r.resourceType === "tenant" ? r.metadata?.labels : undefined);
}

/**
 * Throws unless the caller may change a resource of `type` that is now `current` (absent when it
 * is being created) and is to become `next` (absent when it is being deleted).
 */
export async function checkWritable(call: CallInfo, type: string, current?: Resource, next?: Resource): Promise<void> {
  if (type === "node" && !holds(call.principal, Permission.ADMIN)) {
    throw forbidden("nodes are administered with the admin permission", { permission: "admin", resource_type: "node" });
  }
  // Which agent version every host runs is the fleet's most powerful lever: an admin's alone.
  if (type === "agent_update" && !holds(call.principal, Permission.ADMIN)) {
    throw forbidden("agent updates are written with the admin permission", { permission: "admin", resource_type: "agent_update" });
  }
  for (const r of [current, next]) {
    if (!r) continue;
    // A tenant being created or relabelled is judged by the labels it is given.
    await call.tenants.require(tenantOf(r), r.resourceType === "tenant" ? r.metadata?.labels : undefined);
  }
}

/** Keeps the items the caller may see (everything, for an unrestricted caller). Items of no tenant are kept when `shared`. */
export async function visible<T>(call: CallInfo, items: T[], tenant: (item: T) => string | undefined, shared = true): Promise<T[]> {
  if (call.tenants.unrestricted) return items;
  const keep = await Promise.all(
    items.map(async (i) => {
      const t = tenant(i);
      return t === undefined || t === "" ? shared : call.tenants.allows(t);
    }),
  );
  return items.filter((_, i) => keep[i]);
}

/**
 * Whether the caller is handed records with their secrets (env values, compose secrets): those
 * who may write desired state, and nodes (their orders carry what they deploy). A viewer gets
 * redacted copies.
 */
export function seesSecrets(call: CallInfo): boolean {
  return holds(call.principal, Permission.WRITE_DESIRED) || call.principal.kind === "node";
}

/** Throws unless a listing's tenant filter (when given) is in the caller's scope. */
export async function checkTenantFilter(call: CallInfo, tenantId: string): Promise<void> {
  if (tenantId !== "") await call.tenants.require(tenantId);
}
