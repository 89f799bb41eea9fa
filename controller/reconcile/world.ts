// A read of everything a reconcile pass looks at: live tenants, services, networks, volumes,
// limits and nodes (with their liveness and observed projects), and the orders in flight. One
// read serves a whole sweep; a pass refreshes its own tenant's in-flight orders under the
// tenant's lock before deciding, so a stale read can never lead to a second order.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { NodeLiveness, type ProjectObservation, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { ResourceType } from "../../common/ids.js";
import type { Store } from "../store/store.js";
import { scannedResources } from "../store/each-page.js";
import type { TenantWorld } from "./desired-targets.js";
import { changesTarget } from "./target-outcome.js";
import type { EnvironmentCache, NodeCache } from "./node-cache.js";
import { nodeLabels } from "./placement.js";
import { environmentOf, environmentStatusOf } from "../delivery/environment-records.js";
import type { EnvironmentView } from "../delivery/resolve/tenant-environment.js";

/** Statuses of an order still in flight (its target gets no other order meanwhile). */
const IN_FLIGHT = [WorkOrderStatus.PENDING, WorkOrderStatus.RUNNING, WorkOrderStatus.RETRY_PENDING];

export interface NodeFacts {
  liveness: NodeLiveness;
  disabled: boolean;
  lastHeartbeatAt?: Date;
  /** When the node last listed the projects it runs. */
  projectsObservedAt?: Date;
}

/**
 * Reads what one tenant's pass needs: the tenant, its services, the networks, volumes and limits
 * they name, every node, and the tenant's orders in flight. Far cheaper than the whole world
 * when a single change arrives.
 */
export async function loadTenantWorld(
  store: Store,
  tenantId: string,
  nodeCache?: NodeCache,
  environmentCache?: EnvironmentCache,
): Promise<World> {
  const [tenant, withTombstones, deletedVolumes, nodes, secrets, environments] = await Promise.all([
    store.getResource("tenant", tenantId, { includeDeleted: true }),
    listAll(store, "service", true, tenantId),
    listAll(store, "volume", true, tenantId).then((vs) => vs.filter((v) => v.deletion)),
    nodeCache ? nodeCache.current(store) : listAll(store, "node", false),
    listAll(store, "secret", false, tenantId),
    environmentCache ? environmentCache.current(store) : listAll(store, "environment", false),
  ]);
  const services = withTombstones.filter((s) => !s.deletion);
  const wanted = { network: new Set<string>(), volume: new Set<string>(), resource_limits: new Set<string>() };
  for (const s of services) {
    if (s.desiredState?.kind.case !== "service") continue;
    const v = s.desiredState.kind.value;
    v.networkIds.forEach((id) => wanted.network.add(id));
    v.volumeIds.forEach((id) => wanted.volume.add(id));
    if (v.resourceLimitsId !== "") wanted.resource_limits.add(v.resourceLimitsId);
  }
  const fetch = async (type: "network" | "volume" | "resource_limits") =>
    (await Promise.all([...wanted[type]].map((id) => store.getResource(type, id)))).filter((r): r is Resource => r !== undefined);
  const [networks, volumes, limits] = await Promise.all([fetch("network"), fetch("volume"), fetch("resource_limits")]);
  const own = (r: Resource) => tenantOfSpec(r) === tenantId;
  const world = new World(
    tenant ? [tenant] : [],
    withTombstones.filter(own),
    networks,
    [...volumes, ...deletedVolumes.filter(own)],
    limits,
    nodes,
    [],
    secrets.filter(own),
    environments,
  );
  await world.refreshInFlight(store, tenantId);
  return world;
}

/** Reads the whole world from the store (a sweep). */
export async function loadWorld(store: Store): Promise<World> {
  const [tenants, services, networks, volumes, limits, nodes, secrets, environments] = await Promise.all(
    // Deleted tenants, services and volumes too: tombstones say what must still go.
    (["tenant", "service", "network", "volume", "resource_limits", "node", "secret", "environment"] as ResourceType[]).map((t) =>
      listAll(store, t, t === "tenant" || t === "service" || t === "volume"),
    ),
  );
  const inFlight: WorkOrder[] = [];
  for (const status of IN_FLIGHT) {
    let pageToken = "";
    do {
      const page = await store.listWorkOrders({ status, pageSize: 1000, pageToken });
      inFlight.push(...page.items);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }
  return new World(tenants!, services!, networks!, volumes!, limits!, nodes!, inFlight, secrets!, environments!);
}

export class World {
  private readonly servicesByTenant = new Map<string, Resource[]>();
  // tenant id -> its deleted services and volumes.
  private readonly deletedByTenant = new Map<string, Resource[]>();
  private readonly networks: Map<string, Resource>;
  private readonly volumes: Map<string, Resource>;
  private readonly limits: Map<string, Resource>;
  private readonly nodes: Map<string, Resource>;
  // tenant id -> node id -> the order in flight there.
  private readonly orders = new Map<string, Map<string, WorkOrder>>();
  private readonly observedByTenant = new Map<string, Map<string, ProjectObservation>>();
  // tenant id -> its live secrets, by id (sealed: the renderer reads versions, never values).
  private readonly secretsByTenant = new Map<string, Map<string, Resource>>();
  private readonly environments: EnvironmentView[];

  constructor(
    private readonly tenants: Resource[],
    services: Resource[],
    networks: Resource[],
    volumes: Resource[],
    limits: Resource[],
    nodes: Resource[],
    inFlight: WorkOrder[],
    secrets: Resource[] = [],
    environments: Resource[] = [],
  ) {
    this.environments = environments.flatMap((e) => {
      const spec = environmentOf(e);
      return spec ? [{ id: e.id, spec, status: environmentStatusOf(e) }] : [];
    });
    for (const r of secrets) {
      const t = tenantOfSpec(r);
      const m = this.secretsByTenant.get(t) ?? new Map<string, Resource>();
      m.set(r.id, r);
      this.secretsByTenant.set(t, m);
    }
    for (const r of [...services, ...volumes]) {
      if (!r.deletion) continue;
      const t = tenantOfSpec(r);
      this.deletedByTenant.set(t, [...(this.deletedByTenant.get(t) ?? []), r]);
    }
    for (const s of services) {
      if (s.deletion) continue;
      const t = tenantOfSpec(s);
      this.servicesByTenant.set(t, [...(this.servicesByTenant.get(t) ?? []), s]);
    }
    this.networks = new Map(networks.map((r) => [r.id, r]));
    this.volumes = new Map(volumes.filter((r) => !r.deletion).map((r) => [r.id, r]));
    this.limits = new Map(limits.map((r) => [r.id, r]));
    this.nodes = new Map(nodes.map((r) => [r.id, r]));
    for (const o of inFlight) this.addInFlight(o);
    for (const n of nodes) {
      const projects = n.currentState?.kind.case === "node" ? n.currentState.kind.value.projects : [];
      for (const p of projects) {
        const tenantId = p.tenantId || p.projectName;
        const m = this.observedByTenant.get(tenantId) ?? new Map<string, ProjectObservation>();
        m.set(n.id, p);
        this.observedByTenant.set(tenantId, m);
      }
    }
  }

  /** Tenants a sweep visits: live ones, and deleted ones that still have targets to clean up. */
  tenantIds(): string[] {
    const ids = new Set(this.tenants.filter((t) => !t.deletion || hasTargets(t)).map((t) => t.id));
    const known = new Set(this.tenants.map((t) => t.id));
    for (const id of this.observedByTenant.keys()) if (known.has(id)) ids.add(id);
    return [...ids];
  }

  tenantWorld(tenant: Resource | undefined, tenantId: string): TenantWorld {
    return {
      tenant,
      services: this.servicesOf(tenantId),
      networks: this.networks,
      volumes: this.volumes,
      limits: this.limits,
      nodes: [...this.nodes.values()],
      deleted: this.deletedByTenant.get(tenantId) ?? [],
      secrets: this.secretsByTenant.get(tenantId) ?? new Map(),
      environments: this.environments,
    };
  }

  servicesOf(tenantId: string): Resource[] {
    return this.servicesByTenant.get(tenantId) ?? [];
  }

  node(id: string): NodeFacts | undefined {
    const n = this.nodes.get(id);
    if (!n) return undefined;
    const st = n.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
    return {
      liveness: st?.liveness ?? NodeLiveness.UNSPECIFIED,
      disabled: n.desiredState?.kind.case === "node" ? n.desiredState.kind.value.disabled : false,
      lastHeartbeatAt: st?.lastHeartbeatAt ? timestampDate(st.lastHeartbeatAt) : undefined,
      projectsObservedAt: st?.projectsObservedAt ? timestampDate(st.projectsObservedAt) : undefined,
    };
  }

  /** The node's placement labels (placement.ts nodeLabels); empty for an unknown node. */
  labelsOf(id: string): Record<string, string> {
    const n = this.nodes.get(id);
    return n ? nodeLabels(n) : {};
  }

  observed(nodeId: string, tenantId: string): ProjectObservation | undefined {
    return this.observedByTenant.get(tenantId)?.get(nodeId);
  }

  nodesObserving(tenantId: string): string[] {
    return [...(this.observedByTenant.get(tenantId)?.keys() ?? [])];
  }

  inFlight(tenantId: string, nodeId: string): WorkOrder | undefined {
    return this.orders.get(tenantId)?.get(nodeId);
  }

  addInFlight(o: WorkOrder): void {
    // Ad-hoc orders (restart, inspect, upload…) do not change what the target should run; the
    // agent runs orders one at a time, so they need no place here.
    if (!changesTarget(o)) return;
    const tenantId = o.target?.tenantId ?? "";
    let m = this.orders.get(tenantId);
    if (!m) this.orders.set(tenantId, (m = new Map()));
    // A rollback in flight is what the target waits for, whatever else is listed with it.
    const nodeId = o.target?.nodeId ?? "";
    if (m.get(nodeId)?.type === WorkOrderType.ROLLBACK && o.type !== WorkOrderType.ROLLBACK) return;
    m.set(nodeId, o);
  }

  /**
   * Re-reads the tenant's pending and running orders (call under the tenant's lock). One listing
   * of every in-flight status: an order released (running -> pending) or requeued while the read
   * runs is seen, where a listing per status could miss it between two of them and a pass would
   * then issue a second order for the same spec.
   */
  async refreshInFlight(store: Store, tenantId: string): Promise<void> {
    this.orders.delete(tenantId);
    const listed: WorkOrder[] = [];
    let pageToken = "";
    do {
      const page = await store.listWorkOrders({ statuses: IN_FLIGHT, tenantId, pageSize: 1000, pageToken });
      listed.push(...page.items);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    // Added by status in IN_FLIGHT's order, as the sweep's read adds them (the last added for a node wins).
    for (const status of IN_FLIGHT) for (const o of listed) if (o.status === status) this.addInFlight(o);
  }
}

// The tenant a service or volume names in its spec.
function tenantOfSpec(r: Resource): string {
  const k = r.desiredState?.kind;
  return k?.case === "service" || k?.case === "volume" || k?.case === "secret" ? k.value.tenantId : "";
}

function hasTargets(t: Resource): boolean {
  return t.currentState?.kind.case === "tenant" && t.currentState.kind.value.targets.length > 0;
}

// A pass reads resources and never changes them (it writes through the store): scanned, not copied.
function listAll(store: Store, resourceType: ResourceType, includeDeleted: boolean, tenantId?: string): Promise<Resource[]> {
  return scannedResources(store, { resourceType, includeDeleted, tenantId });
}
