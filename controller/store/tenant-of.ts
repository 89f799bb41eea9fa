// Which tenant a resource belongs to: the store indexes resources by it, and every layer above
// asks the same question.
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";

/** The tenant a resource belongs to, when it has one. */
export function tenantOf(r: Resource): string | undefined {
  const k = r.desiredState?.kind;
  if (r.resourceType === "tenant") return r.id;
  if (!k) return undefined;
  switch (k.case) {
    case "service":
    case "deployment":
    case "network":
    case "volume":
    case "rollout":
    case "secret":
    case "freeze":
      return k.value.tenantId || undefined;
    default:
      return undefined;
  }
}
