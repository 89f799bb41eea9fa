// The observed state of what a tenant's services use but no agent reports by itself: its
// networks and volumes, and the resource limits its services name. Pure: from the services, where
// each is placed and each node's verdict, it says per resource where it runs as desired and
// whether its desired state is now applied.
//   - network, volume: current_state lists the nodes where a service using it is converged;
//     last_applied_state is its desired state once every service using it is converged.
//   - resource_limits (shared by tenants): current_state lists the services it is applied to;
//     this tenant's entries are replaced, other tenants' kept.
import { create } from "@bufbuild/protobuf";
import {
  ConvergenceStatus,
  NetworkStatusSchema,
  ResourceLimitsStatusSchema,
  ResourceStatusSchema,
  type Resource,
  type ResourceStatus,
  VolumeStatusSchema,
} from "../../gen/skipper/v1/resource_pb.js";
import type { TargetVerdict } from "./plan-target.js";

export interface DependencyInput {
  tenantId: string;
  /** The tenant's live services. */
  services: Resource[];
  /** Per service id: the nodes it is placed on. */
  placed: Map<string, { nodeIds: string[] }>;
  /** Per node: this pass's verdict on the tenant's target there. */
  verdicts: Map<string, TargetVerdict>;
  networks: Map<string, Resource>;
  volumes: Map<string, Resource>;
  limits: Map<string, Resource>;
}

export interface DependencyState {
  resource: Resource;
  /** Its current_state as of `resource`. */
  status: ResourceStatus;
  /** Its current_state given the resource as stored now (limits keep other tenants' entries as they are then). */
  statusOf: (current: Resource) => ResourceStatus;
  /** Every service using it is converged: its desired state (as read for this pass) is applied. */
  applied: boolean;
}

/** The state of each network, volume and resource limits the tenant's services use (or the tenant owns). */
export function dependencyStates(input: DependencyInput): DependencyState[] {
  const uses = (pick: (s: ServiceView) => string[]) => {
    const by = new Map<string, ServiceView[]>();
    for (const s of views(input)) for (const id of pick(s)) by.set(id, [...(by.get(id) ?? []), s]);
    return by;
  };
  const out: DependencyState[] = [];
  const perNode = (kind: "network" | "volume", resources: Map<string, Resource>, users: Map<string, ServiceView[]>) => {
    for (const r of [...resources.values()].sort(byId)) {
      const spec = r.desiredState?.kind;
      const owner = spec?.case === "network" || spec?.case === "volume" ? spec.value.tenantId : "";
      const using = users.get(r.id) ?? [];
      if (owner !== input.tenantId && using.length === 0) continue;
      const nodeIds = [...new Set(using.flatMap((s) => s.convergedNodes))].sort();
      const status =
        kind === "network"
          ? create(ResourceStatusSchema, { kind: { case: "network", value: create(NetworkStatusSchema, { nodeIds }) } })
          : create(ResourceStatusSchema, { kind: { case: "volume", value: create(VolumeStatusSchema, { nodeIds }) } });
      out.push({ resource: r, status, statusOf: () => status, applied: using.length > 0 && using.every((s) => s.converged) });
    }
  };
  perNode(
    "network",
    input.networks,
    uses((s) => s.spec.networkIds),
  );
  perNode(
    "volume",
    input.volumes,
    uses((s) => s.spec.volumeIds),
  );
  const limitUsers = uses((s) => (s.spec.resourceLimitsId ? [s.spec.resourceLimitsId] : []));
  const mine = new Set(input.services.map((s) => s.id));
  for (const r of [...input.limits.values()].sort(byId)) {
    const using = limitUsers.get(r.id) ?? [];
    const appliedOf = (cur: Resource) =>
      cur.currentState?.kind.case === "resourceLimits" ? cur.currentState.kind.value.appliedToServiceIds : [];
    if (using.length === 0 && !appliedOf(r).some((id) => mine.has(id))) continue;
    const converged = using.filter((s) => s.converged).map((s) => s.id);
    const statusOf = (cur: Resource) => {
      const others = appliedOf(cur).filter((id) => !mine.has(id));
      const appliedToServiceIds = [...new Set([...others, ...converged])].sort();
      return create(ResourceStatusSchema, {
        kind: { case: "resourceLimits", value: create(ResourceLimitsStatusSchema, { appliedToServiceIds }) },
      });
    };
    out.push({ resource: r, status: statusOf(r), statusOf, applied: using.length > 0 && using.every((s) => s.converged) });
  }
  return out;
}

interface ServiceView {
  id: string;
  spec: { networkIds: string[]; volumeIds: string[]; resourceLimitsId: string };
  convergedNodes: string[];
  converged: boolean;
}

function views(input: DependencyInput): ServiceView[] {
  return input.services.flatMap((s) => {
    if (s.desiredState?.kind.case !== "service") return [];
    const nodeIds = input.placed.get(s.id)?.nodeIds ?? [];
    const convergedNodes = nodeIds.filter((n) => input.verdicts.get(n)?.status === ConvergenceStatus.CONVERGED);
    return [
      {
        id: s.id,
        spec: s.desiredState.kind.value,
        convergedNodes,
        converged: nodeIds.length > 0 && convergedNodes.length === nodeIds.length,
      },
    ];
  });
}

function byId(a: Resource, b: Resource): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}
