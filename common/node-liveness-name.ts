// One name per node liveness, for every surface a person reads (the CLI's tables, the dashboard):
// the enum's short name, and NEVER_SEEN for a node whose agent has never sent a heartbeat (the
// API leaves liveness unset then: NODE_LIVENESS_UNSPECIFIED). Imported by the dashboard too: no
// Node APIs here.
import { NodeLiveness } from "../gen/skipper/v1/resource_pb.js";

export type LivenessName = "ONLINE" | "DEGRADED" | "OFFLINE" | "NEVER_SEEN";

/** ONLINE, DEGRADED, OFFLINE, or NEVER_SEEN when no heartbeat has come yet. */
export function livenessName(liveness: NodeLiveness | undefined): LivenessName {
  switch (liveness) {
    case NodeLiveness.ONLINE:
      return "ONLINE";
    case NodeLiveness.DEGRADED:
      return "DEGRADED";
    case NodeLiveness.OFFLINE:
      return "OFFLINE";
    default:
      return "NEVER_SEEN";
  }
}
