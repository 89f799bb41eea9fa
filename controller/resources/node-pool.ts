// A tenant's node pool (TenantPolicy.node_selector): the nodes whose admin-set labels match it.
// Only labels an admin sets count (metadata.labels, desired_state.node.labels): an agent cannot
// report its node into a pool.
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { matchesSelector } from "../domain/label-selector.js";

/** A node's labels as an admin set them: metadata, then desired_state.node.labels. */
export function adminNodeLabels(node: Resource): Record<string, string> {
  const spec = node.desiredState?.kind.case === "node" ? node.desiredState.kind.value : undefined;
  return { ...(node.metadata?.labels ?? {}), ...(spec?.labels ?? {}) };
}

/** True when `node` is in the pool `selector` names (every node, for an empty selector). */
export function inNodePool(node: Resource, selector: Record<string, string>): boolean {
  return Object.keys(selector).length === 0 || matchesSelector(adminNodeLabels(node), selector);
}
