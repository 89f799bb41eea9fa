// ListResources' node filters (capabilities, liveness): a node is listed when it holds every
// capability asked for (as reported, or derived from an older agent's report:
// common/node-capabilities.ts) and its liveness is one of those asked for. Other resource types
// pass no such filter: a listing that asks for one lists no other type.
import { NodeLiveness, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { ListResourcesRequest } from "../../gen/skipper/v1/resource_service_pb.js";
import { isCapabilityName, missingCapabilities } from "../../common/node-capabilities.js";
import { invalid } from "../base/errors.js";

/** The request's node filters as a predicate (every resource passes when it asks for none). Throws INVALID_REQUEST. */
export function nodeFilter(req: Pick<ListResourcesRequest, "capabilities" | "liveness">): (r: Resource) => boolean {
  const bad = req.capabilities.find((c) => !isCapabilityName(c));
  if (bad !== undefined)
    throw invalid(`capabilities: ${JSON.stringify(bad.slice(0, 64))} is not a capability name`, { field: "capabilities" });
  if (req.liveness.some((l) => !(l in NodeLiveness))) throw invalid("liveness holds an unknown value", { field: "liveness" });
  if (req.capabilities.length === 0 && req.liveness.length === 0) return () => true;
  return (r) => {
    const st = r.resourceType === "node" && r.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined;
    if (r.resourceType !== "node") return false;
    if (missingCapabilities(st?.capabilities, req.capabilities).length > 0) return false;
    return req.liveness.length === 0 || req.liveness.includes(st?.liveness ?? NodeLiveness.UNSPECIFIED);
  };
}
