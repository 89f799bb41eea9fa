// The fleet's gauges as a scrape sees them: nodes by liveness, tenants by convergence, rollouts
// by status and work orders by type and status, read from the store. Work orders are counted by
// the store without being read (countWorkOrders); nodes, tenants and rollouts are listed. Each
// count is kept for `ttlMs`, and scrapes that meet share one count under way, so however often
// or concurrently the controller is scraped, the store is read at most once per period.
import type { ConvergenceStatus, NodeLiveness, Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import type { ResourceType } from "../../common/ids.js";
import type { Store, WorkOrderCount } from "../store/store.js";
import { eachScannedResource } from "../store/each-page.js";

/** The fleet as counted for one scrape. */
export interface FleetCounts {
  nodesByLiveness: ReadonlyMap<NodeLiveness, number>;
  tenantsByConvergence: ReadonlyMap<ConvergenceStatus, number>;
  rolloutsByStatus: ReadonlyMap<RolloutStatus, number>;
  workOrders: readonly WorkOrderCount[];
}

/** How long a count is served before the store is read again (default). */
export const CENSUS_TTL_MS = 5_000;

/** A function that answers the fleet's counts, reading `store` at most once per `ttlMs`. */
export function fleetCensus(
  store: Pick<Store, "scanResources" | "countWorkOrders">,
  opts: { ttlMs?: number; clock?: () => number } = {},
): () => Promise<FleetCounts> {
  const ttlMs = opts.ttlMs ?? CENSUS_TTL_MS;
  const clock = opts.clock ?? Date.now;
  let last: { at: number; counts: Promise<FleetCounts> } | undefined;
  return () => {
    const now = clock();
    if (!last || now - last.at >= ttlMs) {
      const counts = count(store);
      last = { at: now, counts };
      // A failed count is not kept: the next scrape tries again.
      counts.catch(() => {
        if (last?.counts === counts) last = undefined;
      });
    }
    return last.counts;
  };
}

async function count(store: Pick<Store, "scanResources" | "countWorkOrders">): Promise<FleetCounts> {
  const [nodesByLiveness, tenantsByConvergence, rolloutsByStatus, workOrders] = await Promise.all([
    tally(store, "node", (r) => (r.currentState?.kind.case === "node" ? r.currentState.kind.value.liveness : 0)),
    tally(store, "tenant", (r) => r.convergence?.status ?? 0),
    tally(store, "rollout", (r) => (r.currentState?.kind.case === "rollout" ? r.currentState.kind.value.status : 0)),
    store.countWorkOrders(),
  ]);
  return { nodesByLiveness, tenantsByConvergence, rolloutsByStatus, workOrders };
}

/** How many live resources of `type` have each value of `key`. */
async function tally<K extends number>(
  store: Pick<Store, "scanResources">,
  type: ResourceType,
  key: (r: Resource) => K,
): Promise<Map<K, number>> {
  const counts = new Map<K, number>();
  for await (const r of eachScannedResource(store, { resourceType: type })) counts.set(key(r), (counts.get(key(r)) ?? 0) + 1);
  return counts;
}
