// What one environment's pass reads, in one place: the environment, its delivery, the artifacts it
// promotes and their versions (one id-prefix range each), its upstream environments' statuses,
// the tenants that follow it (listed, or selected by label) with their release records and latest
// rollouts, the freezes, and the orders of its verifications. Reads only; the plan is pure.
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { ArtifactSpec, DeliverySpec, EnvironmentSpec, EnvironmentStatus } from "../../gen/skipper/v1/delivery_pb.js";
import { ConvergenceStatus, NodeLiveness, type Resource, type TenantRelease } from "../../gen/skipper/v1/resource_pb.js";
import type { Rollout } from "../../gen/skipper/v1/rollout_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { artifactOf, versionOf, versionStatusOf } from "../delivery/artifact-versions.js";
import { environmentOf, environmentStatusOf } from "../delivery/environment-records.js";
import { environmentsOfTenant } from "../delivery/resolve/tenant-environment.js";
import type { Freeze } from "../rollouts/rollout-stops.js";
import { rolloutOf } from "../rollouts/rollout-records.js";
import { scannedResources } from "../store/each-page.js";
import type { Store } from "../store/store.js";

/** A recorded version as the plan reads it. */
export interface VersionRecord {
  id: string;
  artifactId: string;
  version: string;
  digest: string;
  reference: string;
  createdAtMs: number;
  metadata: Record<string, string>;
  markedBad?: NonNullable<ReturnType<typeof versionStatusOf>>["markedBad"];
}

/** A tenant that follows the environment. */
export interface TenantRecord {
  id: string;
  release?: TenantRelease;
  rollout?: Rollout;
  /** Online nodes whose target is converged on the tenant's desired spec. */
  convergedNodes: string[];
  /** A node that gave up on the tenant's desired spec, and why (TenantView.failed). */
  failed?: string;
}

/** Everything one pass of one environment reads. */
export interface EnvironmentWorld {
  id: string;
  spec: EnvironmentSpec;
  status: EnvironmentStatus;
  delivery: DeliverySpec;
  artifacts: Map<string, ArtifactSpec>;
  /** Per artifact, every recorded version (unordered). */
  versions: Map<string, VersionRecord[]>;
  upstream: Map<string, EnvironmentStatus>;
  tenants: TenantRecord[];
  freezes: Freeze[];
  /** Orders of the verifications the status names, by id. */
  orders: Map<string, WorkOrder>;
}

/** Reads environment `id`'s world, or undefined when it is gone (or its delivery is). */
export async function readEnvironmentWorld(store: Store, id: string): Promise<EnvironmentWorld | undefined> {
  const env = await store.getResource("environment", id);
  const spec = environmentOf(env);
  if (!spec) return undefined;
  const status = environmentStatusOf(env);
  const deliveryResource = await store.getResource("delivery", spec.deliveryId);
  if (!deliveryResource || deliveryResource.deletion || deliveryResource.desiredState?.kind.case !== "delivery") return undefined;
  const delivery = deliveryResource.desiredState.kind.value;
  const artifactIds = [...new Set(spec.artifactIds)];
  const [artifacts, versions, upstream, tenants, freezes, orders] = await Promise.all([
    readArtifacts(store, artifactIds),
    readVersions(store, artifactIds),
    readUpstream(store, spec),
    readTenants(store, id, spec),
    scannedResources(store, { resourceType: "freeze" }).then((fs) =>
      fs.flatMap((f) => (f.desiredState?.kind.case === "freeze" ? [{ id: f.id, spec: f.desiredState.kind.value }] : [])),
    ),
    readOrders(store, status),
  ]);
  return { id, spec, status, delivery, artifacts, versions, upstream, tenants, freezes, orders };
}

async function readArtifacts(store: Store, ids: string[]): Promise<Map<string, ArtifactSpec>> {
  const out = new Map<string, ArtifactSpec>();
  for (const r of await Promise.all(ids.map((a) => store.getResource("artifact", a)))) {
    const a = artifactOf(r);
    if (r && a) out.set(r.id, a);
  }
  return out;
}

async function readVersions(store: Store, ids: string[]): Promise<Map<string, VersionRecord[]>> {
  const lists = await Promise.all(ids.map((a) => scannedResources(store, { resourceType: "artifact_version", idPrefix: `${a}.` })));
  return new Map(ids.map((a, i) => [a, lists[i]!.flatMap((r) => versionRecord(r))]));
}

function versionRecord(r: Resource): VersionRecord[] {
  const v = versionOf(r);
  if (!v) return [];
  return [
    {
      id: r.id,
      artifactId: v.artifactId,
      version: v.version,
      digest: v.digest,
      reference: v.reference,
      createdAtMs: r.createdAt ? timestampMs(r.createdAt) : 0,
      metadata: v.metadata,
      markedBad: versionStatusOf(r)?.markedBad,
    },
  ];
}

async function readUpstream(store: Store, spec: EnvironmentSpec): Promise<Map<string, EnvironmentStatus>> {
  const out = new Map<string, EnvironmentStatus>();
  for (const d of spec.dependsOn) {
    const r = await store.getResource("environment", d.environmentId);
    if (environmentOf(r)) out.set(d.environmentId, environmentStatusOf(r));
  }
  return out;
}

// The tenants the environment holds: listed ones directly, selected ones by scanning tenants (only
// when it has a selector). A tenant held by another environment as well is still read: the plan
// sees that it does not run the release (its resolution says why).
async function readTenants(store: Store, envId: string, spec: EnvironmentSpec): Promise<TenantRecord[]> {
  const listed = await Promise.all(spec.tenantIds.map((t) => store.getResource("tenant", t)));
  const selected =
    spec.tenantSelector === ""
      ? []
      : (await scannedResources(store, { resourceType: "tenant" })).filter(
          (t) =>
            !t.deletion &&
            environmentsOfTenant(t.id, t.metadata?.labels ?? {}, [{ id: envId, spec, status: {} as EnvironmentStatus }]).length > 0,
        );
  const tenants = new Map<string, Resource>();
  for (const t of [...listed, ...selected]) if (t && !t.deletion) tenants.set(t.id, t);
  // Only the nodes the tenants' targets name, by id: a scan of every node cost each environment's
  // pass 1.7 ms of CPU at 2,000 nodes (bench:promotion's file-store figure).
  const nodeIds = new Set(
    [...tenants.values()].flatMap((t) =>
      (t.currentState?.kind.case === "tenant" ? t.currentState.kind.value.targets : []).map((x) => x.nodeId),
    ),
  );
  const nodes = new Map(
    (await Promise.all([...nodeIds].map((n) => store.getResource("node", n)))).flatMap((n) => (n ? [[n.id, n] as const] : [])),
  );
  return Promise.all(
    [...tenants.values()]
      .sort((a, b) => (a.id < b.id ? -1 : 1))
      .map(async (t) => {
        const st = t.currentState?.kind.case === "tenant" ? t.currentState.kind.value : undefined;
        const rollout = st?.rolloutId ? rolloutOf(await store.getResource("rollout", st.rolloutId)) : undefined;
        const convergedNodes = (st?.targets ?? [])
          .filter((x) => x.desiredHash !== "" && x.convergence?.status === ConvergenceStatus.CONVERGED)
          .filter((x) => {
            const n = nodes.get(x.nodeId);
            return n?.currentState?.kind.case === "node" && n.currentState.kind.value.liveness === NodeLiveness.ONLINE;
          })
          .map((x) => x.nodeId)
          .sort();
        const gaveUp = (st?.targets ?? []).find(
          (x) =>
            x.desiredHash !== "" &&
            (x.convergence?.status === ConvergenceStatus.ORDER_FAILED || x.convergence?.status === ConvergenceStatus.ROLLED_BACK),
        );
        const failed = gaveUp ? `node ${gaveUp.nodeId}: ${gaveUp.convergence?.message ?? ""}` : undefined;
        return { id: t.id, release: st?.release, rollout, convergedNodes, failed };
      }),
  );
}

async function readOrders(store: Store, status: EnvironmentStatus): Promise<Map<string, WorkOrder>> {
  const ids = (status.inFlight?.verifications ?? []).map((v) => v.workOrderId).filter((id) => id !== "");
  const orders = await Promise.all(ids.map((id) => store.getWorkOrder(id)));
  return new Map(orders.flatMap((o) => (o ? [[o.id, o] as const] : [])));
}
