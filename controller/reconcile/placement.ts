// Placement: which nodes a tenant's project, or one service, runs on. A policy names a node by
// id, selects nodes by labels, or both (the union). A node's labels for placement are those an
// admin set (metadata and desired_state.node.labels) and, of those its agent reports, only the
// keys an admin trusts (desired_state.node.trusted_label_keys): a node cannot report its way
// into another tenant's placement. On a clash the admin's value wins.
import type { DeploymentPolicy, Resource } from "../../gen/skipper/v1/resource_pb.js";
import { matchesSelector } from "../domain/label-selector.js";
import { missingCapabilities } from "../../common/node-capabilities.js";

/** A node's labels for placement: metadata, then trusted agent-reported, then admin-set node labels. */
export function nodeLabels(node: Resource): Record<string, string> {
  const reported = node.currentState?.kind.case === "node" ? node.currentState.kind.value.labels : {};
  const spec = node.desiredState?.kind.case === "node" ? node.desiredState.kind.value : undefined;
  const trusted: Record<string, string> = {};
  for (const key of spec?.trustedLabelKeys ?? []) if (Object.hasOwn(reported, key)) trusted[key] = reported[key]!;
  return { ...(node.metadata?.labels ?? {}), ...trusted, ...(spec?.labels ?? {}) };
}

/** True when the policy says something (a node id or a selector). */
export function hasPlacement(p: DeploymentPolicy | undefined): p is DeploymentPolicy {
  return !!p && (p.targetNodeId !== "" || Object.keys(p.nodeSelector).length > 0);
}

/** True when `node` holds every capability the policy requires (reported, or derived from an older agent's report). */
export function holdsRequired(policy: DeploymentPolicy, node: Resource): boolean {
  const caps = node.currentState?.kind.case === "node" ? node.currentState.kind.value.capabilities : undefined;
  return missingCapabilities(caps, policy.requiredCapabilities).length === 0;
}

/** Ids of the live nodes the policy selects (and that hold its required capabilities), sorted. */
export function placeOn(policy: DeploymentPolicy | undefined, nodes: Resource[]): string[] {
  if (!hasPlacement(policy)) return [];
  const selector = policy.nodeSelector;
  const bySelector = Object.keys(selector).length > 0;
  return nodes
    .filter((n) => n.id === policy.targetNodeId || (bySelector && matchesSelector(nodeLabels(n), selector)))
    .filter((n) => holdsRequired(policy, n))
    .map((n) => n.id)
    .sort();
}
