// In-memory index over resources: by (type, id) for reads and in listing order for pages.
import type { Resource } from "../../../gen/skipper/v1/resource_pb.js";
import { tenantOf } from "../../../common/resource-kinds.js";
import { matchesTerms } from "../../domain/label-selector.js";
import { tupleKey } from "../record-keys.js";
import { readPage, SortedIndex } from "./sorted-index.js";
import type { Page, ResourceFilter } from "../store.js";

const PAGE_TAG = "resources";
const KEY_PATTERN = /^[a-z_]{1,32}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Resources held in memory; stored messages are never handed out (callers get clones). */
export class ResourceIndex {
  private readonly byKey = new Map<string, Resource>();
  private readonly ordered = new SortedIndex<Resource>();
  // Per tenant: the tenant and the resources that name it, in listing order, so a tenant's
  // listing (the reconciler's, a tenant snapshot's) reads that tenant's resources only.
  private readonly byTenant = new Map<string, SortedIndex<Resource>>();

  /** Rebuilds from the resources found on disk. */
  load(resources: Resource[]): void {
    for (const r of resources) this.byKey.set(keyOf(r), r);
    this.ordered.load(resources.map((r) => [keyOf(r), r]));
    const groups = new Map<string, Array<[string, Resource]>>();
    for (const r of resources) {
      const t = tenantOf(r);
      if (t) groups.set(t, [...(groups.get(t) ?? []), [keyOf(r), r]]);
    }
    for (const [t, entries] of groups) {
      const idx = new SortedIndex<Resource>();
      idx.load(entries);
      this.byTenant.set(t, idx);
    }
  }

  get(type: string, id: string): Resource | undefined {
    return this.byKey.get(tupleKey(type, id));
  }

  put(resource: Resource): void {
    const key = keyOf(resource);
    const prev = this.byKey.get(key);
    const before = prev && tenantOf(prev);
    const after = tenantOf(resource);
    if (before && before !== after) {
      const idx = this.byTenant.get(before);
      idx?.delete(key);
      if (idx?.size === 0) this.byTenant.delete(before);
    }
    if (after) {
      let idx = this.byTenant.get(after);
      if (!idx) this.byTenant.set(after, (idx = new SortedIndex<Resource>()));
      idx.set(key, resource);
    }
    this.byKey.set(key, resource);
    this.ordered.set(key, resource);
  }

  /** Removes these resources for good (history retention), in one pass over each index. */
  removeMany(gone: ReadonlySet<Resource>): void {
    if (gone.size === 0) return;
    const drop = (r: Resource) => gone.has(r);
    this.ordered.deleteWhere(drop);
    for (const r of gone) {
      this.byKey.delete(keyOf(r));
      const t = tenantOf(r);
      const idx = t ? this.byTenant.get(t) : undefined;
      if (!idx) continue;
      idx.delete(keyOf(r));
      if (idx.size === 0) this.byTenant.delete(t!);
    }
  }

  /** Every resource of one type, in listing order (shared records: do not change them). */
  *ofType(type: string): Generator<Resource> {
    for (const [key, r] of this.ordered.entries({ from: tupleKey(type, "") })) {
      if (!key.startsWith(`${type}\0`)) return;
      yield r;
    }
  }

  /** The highest resource_version held: the store revision resumes from it after a restart. */
  maxVersion(): bigint {
    let max = 0n;
    for (const r of this.byKey.values()) {
      const v = versionOf(r);
      if (v > max) max = v;
    }
    return max;
  }

  /** A page in (resource_type, id) order, optionally of one type and tenant; `out` copies each one. */
  list(filter: ResourceFilter, out: (r: Resource) => Resource): Page<Resource> {
    const type = filter.resourceType;
    const tenant = filter.tenantId;
    const terms = filter.labelSelector ?? [];
    const since = filter.sinceRevision === undefined ? undefined : filter.sinceRevision.toString();
    const phases = filter.deploymentPhases;
    const prefix = filter.idPrefix ?? "";
    const match = (r: Resource) =>
      (prefix === "" || r.id.startsWith(prefix)) &&
      (!phases || (r.currentState?.kind.case === "deployment" && phases.includes(r.currentState.kind.value.phase))) &&
      (!type || r.resourceType === type) &&
      (filter.includeDeleted === true || r.deletion === undefined) &&
      (!tenant || tenantOf(r) === tenant) &&
      (terms.length === 0 || matchesTerms(r.metadata?.labels ?? {}, terms)) &&
      (since === undefined || newerThan(r.metadata?.resourceVersion ?? "", since));
    const source = tenant ? (this.byTenant.get(tenant) ?? new SortedIndex<Resource>()) : this.ordered;
    // One type's keys are "<type>\0<id>": they all sort below "<type>\u0001", where its listing
    // stops; ids with a prefix sort below the prefix and DEL (ids are printable ASCII).
    return readPage(
      source,
      PAGE_TAG,
      filter,
      KEY_PATTERN,
      match,
      out,
      type ? tupleKey(type, prefix) : undefined,
      type ? (prefix === "" ? `${type}\u0001` : `${tupleKey(type, prefix)}\u007f`) : undefined,
    );
  }
}

function keyOf(r: Resource): string {
  return tupleKey(r.resourceType, r.id);
}

// versionOf(r) > since, for `since` as bigint.toString(): compared as text, without a BigInt per
// resource, since this runs for every resource a since_revision listing scans.
function newerThan(version: string, since: string): boolean {
  if (since.startsWith("-")) return true; // every version is at least 0
  if (!/^[1-9]\d{0,29}$/.test(version)) return false; // counts as 0 (or is 0)
  return version.length !== since.length ? version.length > since.length : version > since;
}

/** A resource's resource_version as a number (0 when it is not a decimal revision). */
export function versionOf(r: Resource): bigint {
  const v = r.metadata?.resourceVersion ?? "";
  return /^\d{1,30}$/.test(v) ? BigInt(v) : 0n;
}
