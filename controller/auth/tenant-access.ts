// A caller's tenant scope. API keys may be limited to some tenants: listed by id, or chosen by a
// label selector over the tenants' labels (either is enough). The admin token, unscoped keys and
// nodes are unrestricted here (a node's limits are its own id and orders, checked by handlers).
// Tenants' labels are read once per call, so a listing that checks many items reads each tenant
// once; a tenant relabelled leaves or enters a selector's scope from the next call.
import type { Principal, TenantAccess } from "../base/context.js";
import { forbidden } from "../base/errors.js";
import { matchesTerms, parseLabelSelector, type LabelTerm } from "../domain/label-selector.js";
import type { Store } from "../store/store.js";

/** Whether `principal`'s scope is every tenant (anything but an API key limited to some). */
export function isUnrestricted(principal: Principal): boolean {
  const scope = principal.kind === "api_key" ? principal.scope : undefined;
  return (scope?.tenantIds.length ?? 0) === 0 && (scope?.tenantSelector ?? "") === "";
}

/** The TenantAccess of `principal` for one call. */
export function tenantAccess(principal: Principal, store: Pick<Store, "getResource">): TenantAccess {
  if (isUnrestricted(principal)) return UNRESTRICTED;
  const scope = principal.kind === "api_key" ? principal.scope : undefined;
  const ids = new Set(scope?.tenantIds ?? []);
  const selector = scope?.tenantSelector ?? "";
  const terms: LabelTerm[] = parseLabelSelector(selector, "tenant_selector");
  const labelsOf = new Map<string, Promise<Record<string, string> | undefined>>();
  const allows = async (tenantId: string | undefined, labels?: Record<string, string>): Promise<boolean> => {
    if (!tenantId) return false;
    if (ids.has(tenantId)) return true;
    if (terms.length === 0) return false;
    if (labels === undefined) {
      let read = labelsOf.get(tenantId);
      if (!read) {
        read = store.getResource("tenant", tenantId).then((t) => (t && !t.deletion ? (t.metadata?.labels ?? {}) : undefined));
        labelsOf.set(tenantId, read);
      }
      labels = await read;
    }
    return labels !== undefined && matchesTerms(labels, terms);
  };
  return {
    unrestricted: false,
    allows: (tenantId) => allows(tenantId),
    async require(tenantId, labels) {
      if (await allows(tenantId, labels)) return;
      if (!tenantId)
        throw forbidden("this needs a credential whose scope is every tenant; the caller's is limited to some", { scope: "tenants" });
      throw forbidden(`tenant ${tenantId} is outside the caller's scope`, { tenant_id: tenantId });
    },
  };
}

const UNRESTRICTED: TenantAccess = {
  unrestricted: true,
  allows: async () => true,
  require: async () => undefined,
};
