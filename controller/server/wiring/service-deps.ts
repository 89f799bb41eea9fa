// What every service implementation is handed (services/deps.ts), with the pieces that depend on
// whether controllers share the store: credential ends and heartbeats are relayed to the others.
import type { ServiceDeps } from "../../services/deps.js";
import { CredentialEnds } from "../../auth/credential-ends.js";
import { relayCredentialEnds, relayHeartbeats } from "../cluster.js";
import type { LivenessMonitor } from "../../nodes/node-liveness.js";
import { VERSION } from "../../base/version.js";
import { AgentSessions } from "../../dispatch/agent-session.js";

export type ServiceDepsParts = Omit<
  ServiceDeps,
  "startedAt" | "version" | "credentialEnds" | "sessions" | "onHeartbeat" | "lastHeartbeat"
> & {
  /** The liveness monitor, once it is built (heartbeats before then are not counted). */
  liveness: () => LivenessMonitor | undefined;
};

/** The services' dependencies; this controller's start is now. */
export function serviceDeps({ liveness, ...parts }: ServiceDepsParts): ServiceDeps {
  const { coordination } = parts;
  const credentialEnds = new CredentialEnds();
  if (coordination.shared) relayCredentialEnds(coordination, credentialEnds);
  const seen = (nodeId: string, at: Date, intervalMs: number) => liveness()?.seen(nodeId, at, intervalMs);
  const sessions = new AgentSessions();
  parts.metrics.countSessions(() => sessions.size);
  return {
    ...parts,
    startedAt: new Date(),
    version: VERSION,
    credentialEnds,
    sessions,
    onHeartbeat: coordination.shared ? relayHeartbeats(coordination, seen) : seen,
    lastHeartbeat: (nodeId) => liveness()?.lastSeen(nodeId),
  };
}
