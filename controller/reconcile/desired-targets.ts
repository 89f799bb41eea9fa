// What should run where for one tenant: a pure function of the tenant, its services, the
// networks/volumes/limits they name, and the nodes. The answer is one rendered project per
// node, plus, for services that cannot be placed, the reason.
import { ConvergenceStatus, type DeploymentPolicy, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { referencesOf } from "../resources/kinds.js";
import { hasPlacement, placeOn } from "./placement.js";
import { renderProject, type RenderedProject } from "./render-project.js";
import { composeServiceNames } from "../resources/compose-rules.js";
import { missingSecret, secretRefsOf } from "../resources/secret-refs.js";
import { inNodePool } from "../resources/node-pool.js";
import { tenantImages } from "../delivery/resolve/tenant-images.js";
import { processArtifacts, tenantProcesses } from "../delivery/resolve/tenant-processes.js";
import type { EnvironmentView } from "../delivery/resolve/tenant-environment.js";

export interface TenantWorld {
  /** The tenant, or undefined when it was deleted (everything it ran must go). */
  tenant: Resource | undefined;
  /** The tenant's live services. */
  services: Resource[];
  networks: Map<string, Resource>;
  volumes: Map<string, Resource>;
  limits: Map<string, Resource>;
  /** Every live node. */
  nodes: Resource[];
  /** The tenant's deleted services and volumes (tombstones): they decide which data must go. */
  deleted?: Resource[];
  /** The tenant's live secrets, by id. */
  secrets?: ReadonlyMap<string, Resource>;
  /** Every live environment: what the tenant's artifacts resolve to. */
  environments?: readonly EnvironmentView[];
}

/** A blocker that applies before any node is involved. */
export interface Blocker {
  status: ConvergenceStatus;
  message: string;
}

export interface TenantDesire {
  /** node id -> the project it should run. */
  targets: Map<string, RenderedProject>;
  /** Why the tenant has no targets, when it has none and should. */
  blocker?: Blocker;
  /** Per service id: the nodes it is placed on, or why it is placed nowhere. */
  services: Map<string, { nodeIds: string[]; blocker?: Blocker }>;
  /** Volumes whose data must go from a node where the tenant no longer runs anything. */
  removalVolumes: (nodeId: string) => string[];
  /** The release (of the environment it follows) the rendered projects carry, when they name artifacts. */
  release?: { environmentId: string; releaseId: string };
}

/** Computes the tenant's desired projects per node. */
export function desiredForTenant(w: TenantWorld): TenantDesire {
  const deleted = w.deleted ?? [];
  const out: TenantDesire = { targets: new Map(), services: new Map(), removalVolumes: (nodeId) => volumesToDelete(deleted, [], nodeId) };
  const t = w.tenant;
  if (t?.desiredState?.kind.case !== "tenant") return out;
  const spec = t.desiredState.kind.value;
  // The tenant's node pool confines every placement, whatever its deployment policy says.
  const pool = spec.policy?.nodeSelector ?? {};
  const nodes = Object.keys(pool).length === 0 ? w.nodes : w.nodes.filter((n) => inNodePool(n, pool));
  const secrets = w.secrets ?? new Map<string, Resource>();
  // Artifacts become the images their environment promoted (delivery/resolve/).
  const composeArtifacts = spec.compose?.artifactImages ?? {};
  const named = new Set([...Object.values(composeArtifacts), ...w.services.map(artifactOfService).filter((a) => a !== "")]);
  const asProcess = processArtifacts(spec.processes);
  const resolved = tenantImages(t.id, t.metadata?.labels ?? {}, new Set([...named, ...asProcess]), w.environments ?? [], asProcess);
  out.release = resolved.release;
  // Processes go with every project the tenant runs: until each resolves, nothing is issued.
  const procs = tenantProcesses(spec.processes, resolved);
  if (procs.pending) return blocked(out, w.services, { status: ConvergenceStatus.PROMOTION_PENDING, message: procs.pending });
  const processes = procs.processes;
  const inputs = { tenant: t, networks: w.networks, volumes: w.volumes, limits: w.limits, secrets, images: resolved.images, processes };
  // Nodes given the same services and volume removals get the same project: rendered once (a
  // fleet of a thousand nodes is mostly one or a few), shared read-only.
  const rendered = new Map<string, RenderedProject>();
  const render = (services: Resource[], nodeId: string) => {
    const deleteVolumes = volumesToDelete(deleted, services, nodeId);
    const key = JSON.stringify([services.map((s) => s.id), deleteVolumes]);
    let project = rendered.get(key);
    if (!project) rendered.set(key, (project = renderProject({ ...inputs, services, deleteVolumes })));
    return project;
  };
  if ((spec.compose?.composeFile ?? "").trim() !== "") {
    // The tenant's own compose file: one project on every node the tenant's policy selects.
    const defined = Object.keys(composeArtifacts).length > 0 ? composeServiceNames(spec.compose?.composeFile ?? "") : new Set<string>();
    const absent = Object.keys(composeArtifacts).find((name) => !defined.has(name));
    const missing =
      missingSecret(secretRefsOf(t), secrets) ??
      (absent === undefined ? undefined : `compose.artifact_images names service ${absent}, which the compose file does not define`);
    const pending = Object.values(composeArtifacts)
      .map((a) => resolved.pending.get(a))
      .find((m) => m !== undefined);
    if (missing || pending) {
      // Nothing is issued without every value (or image): a project half-configured is worse than none.
      const blocker = missing
        ? { status: ConvergenceStatus.REFERENCE_MISSING, message: missing }
        : { status: ConvergenceStatus.PROMOTION_PENDING, message: pending! };
      return blocked(out, w.services, blocker);
    }
    return onPolicyNodes(out, spec.deploymentPolicy, nodes, w.services, render);
  }
  // Processes alone (no compose file, no services): on every node the tenant's policy selects.
  if (processes.length > 0 && w.services.length === 0) return onPolicyNodes(out, spec.deploymentPolicy, nodes, [], render);
  const perNode = new Map<string, Resource[]>();
  for (const s of [...w.services].sort((a, b) => (a.id < b.id ? -1 : 1))) {
    if (s.desiredState?.kind.case !== "service") continue;
    const svc = s.desiredState.kind.value;
    const missing = referencesOf(s).find((ref) => ref.type !== "tenant" && ref.type !== "secret" && !has(w, ref.type, ref.id));
    const missingValue = missing ? undefined : missingSecret(secretRefsOf(s), secrets);
    if (missing || missingValue) {
      out.services.set(s.id, {
        nodeIds: [],
        blocker: {
          status: ConvergenceStatus.REFERENCE_MISSING,
          message: missing ? `${missing.field} names ${missing.type} ${missing.id}, which does not exist` : missingValue!,
        },
      });
      continue;
    }
    const promotion = svc.artifactId === "" ? undefined : resolved.pending.get(svc.artifactId);
    if (promotion) {
      out.services.set(s.id, { nodeIds: [], blocker: { status: ConvergenceStatus.PROMOTION_PENDING, message: promotion } });
      continue;
    }
    if (svc.image === "" && svc.artifactId === "") {
      out.services.set(s.id, {
        nodeIds: [],
        blocker: { status: ConvergenceStatus.NOTHING_TO_DEPLOY, message: "the service has no image" },
      });
      continue;
    }
    const policy = hasPlacement(svc.placement) ? svc.placement : spec.deploymentPolicy;
    const nodeIds = placeOn(policy, nodes);
    out.services.set(s.id, nodeIds.length > 0 ? { nodeIds } : { nodeIds, blocker: noNode(hasPlacement(policy), policy) });
    for (const n of nodeIds) perNode.set(n, [...(perNode.get(n) ?? []), s]);
  }
  for (const [n, services] of perNode) out.targets.set(n, render(services, n));
  if (out.targets.size === 0) {
    const first = [...out.services.values()].find((s) => s.blocker)?.blocker;
    out.blocker = first ?? {
      status: ConvergenceStatus.NOTHING_TO_DEPLOY,
      message: "the tenant has no compose file, no services with an image and no processes",
    };
  }
  return out;
}

/**
 * The volumes whose data must still go from node `nodeId`, which runs `live` (the tenant's live
 * services there): those of services and volumes deleted with delete_data whose removal is
 * pending on that node (Deletion.data_pending_on_nodes), unless a live service there uses them.
 * The removal is a one-off: once an order issued after the deletion succeeded on the node, the
 * node leaves the pending list (order-end.ts), so data a later service keeps in a reused
 * volume is never touched.
 */
export function volumesToDelete(deleted: Resource[], live: Resource[], nodeId: string): string[] {
  const inUse = new Set(live.flatMap((s) => (s.desiredState?.kind.case === "service" ? s.desiredState.kind.value.volumeIds : [])));
  const out = new Set<string>();
  for (const r of deleted) {
    if (!r.deletion?.deleteData || !r.deletion.dataPendingOnNodes.includes(nodeId)) continue;
    const k = r.desiredState?.kind;
    const ids = k?.case === "service" ? k.value.volumeIds : r.resourceType === "volume" ? [r.id] : [];
    for (const v of ids) if (!inUse.has(v)) out.add(v);
  }
  return [...out].sort();
}

// One project on every node `policy` selects (a tenant's own compose file, or its processes alone).
function onPolicyNodes(
  out: TenantDesire,
  policy: DeploymentPolicy | undefined,
  nodes: Resource[],
  services: Resource[],
  render: (services: Resource[], nodeId: string) => RenderedProject,
): TenantDesire {
  const nodeIds = placeOn(policy, nodes);
  for (const s of services) out.services.set(s.id, { nodeIds });
  if (nodeIds.length === 0) out.blocker = noNode(policy !== undefined && hasPlacement(policy), policy);
  for (const n of nodeIds) out.targets.set(n, render(services, n));
  return out;
}

// Nothing issued: the tenant and each of its services show why.
function blocked(out: TenantDesire, services: Resource[], blocker: Blocker): TenantDesire {
  for (const s of services) out.services.set(s.id, { nodeIds: [], blocker });
  out.blocker = blocker;
  return out;
}

function artifactOfService(s: Resource): string {
  return s.desiredState?.kind.case === "service" ? s.desiredState.kind.value.artifactId : "";
}

function noNode(hasPolicy: boolean, policy?: DeploymentPolicy): Blocker {
  const required = policy?.requiredCapabilities ?? [];
  const holding = required.length > 0 ? ` holding ${required.join(", ")} (required_capabilities)` : "";
  return {
    status: ConvergenceStatus.NO_MATCHING_NODE,
    message: hasPolicy
      ? `no registered node${holding} matches the placement (node id or node_selector)`
      : "no placement: set deployment_policy.target_node_id or node_selector",
  };
}

function has(w: TenantWorld, type: string, id: string): boolean {
  if (type === "network") return w.networks.has(id);
  if (type === "volume") return w.volumes.has(id);
  if (type === "resource_limits") return w.limits.has(id);
  if (type === "service") return w.services.some((s) => s.id === id);
  return true;
}
