// The nodes a tenant's pass places work on, read once and then kept current by revision: each
// pass asks the store only for nodes written since the last look (tombstones included, so a
// deleted node drops out). Placement needs every node's labels and liveness, and copying a
// thousand node records for every single change was most of a pass's cost. The store stays the
// source of truth: nothing here is written back, and a restart starts from the store again.
// The same holds for environments, which every pass reads to resolve artifacts (EnvironmentCache).
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { ResourceType } from "../../common/resource-kinds.js";
import type { Store } from "../store/store.js";
import { eachScannedResource } from "../store/each-page.js";

/** Every live resource of one type, kept current by revision. */
export class RevisionCache {
  constructor(private readonly type: ResourceType) {}

  private readonly nodes = new Map<string, Resource>();
  private revision: bigint | undefined;
  private refreshing: Promise<void> | undefined;

  /** Every live node as of now. The records are shared and frozen (scanResources): a change throws. */
  async current(store: Store): Promise<Resource[]> {
    // Concurrent passes share one refresh, then each sees a map at least as new as its call.
    while (this.refreshing) await this.refreshing;
    this.refreshing = this.refresh(store).finally(() => (this.refreshing = undefined));
    await this.refreshing;
    return [...this.nodes.values()];
  }

  private async refresh(store: Store): Promise<void> {
    // The revision is read before the listing: a write landing in between is listed now and,
    // being newer than `upTo`, again next time (harmless), but never missed. The store's
    // currentRevision counts only writes a listing can already return (a write still on its way
    // to disk holds it back), so nothing below `upTo` can appear later.
    const upTo = await store.currentRevision();
    for await (const n of eachScannedResource(store, { resourceType: this.type, includeDeleted: true, sinceRevision: this.revision })) {
      if (n.deletion) this.nodes.delete(n.id);
      else this.nodes.set(n.id, n);
    }
    this.revision = upTo;
  }
}

/** Every live node, kept current by revision. */
export class NodeCache extends RevisionCache {
  constructor() {
    super("node");
  }
}

/** Every live environment, kept current by revision. */
export class EnvironmentCache extends RevisionCache {
  constructor() {
    super("environment");
  }
}
