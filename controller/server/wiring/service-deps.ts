// What every service implementation is handed (services/deps.ts), with the pieces that depend on
// whether controllers share the store: credential ends and heartbeats are relayed to the others.
import type { ServiceDeps } from "../../services/deps.js";
import { CredentialEnds } from "../../auth/credential-ends.js";
import { relayCredentialEnds, relayHeartbeats, relaySessions } from "../cluster.js";
import type { LivenessMonitor } from "../../nodes/node-liveness.js";
import { VERSION } from "../../base/version.js";
import { AgentSessions } from "../../dispatch/agent-session.js";

export type ServiceDepsParts = Omit<
  ServiceDeps,
  "startedAt" | "version" | "credentialEnds" | "sessions" | "onHeartbeat" | "onSession" | "lastHeartbeat"
> & {
  /** The liveness monitor, once it is built (heartbeats before then are not counted). */
  liveness: () => LivenessMonitor | undefined;
};

/** The services' dependencies; this controller's start is now. `closeRelays` stops what it says to the others. */
export function serviceDeps({ liveness, ...parts }: ServiceDepsParts): ServiceDeps & { closeRelays(): void } {
  const { coordination } = parts;
  const credentialEnds = new CredentialEnds();
  if (coordination.shared) relayCredentialEnds(coordination, credentialEnds);
  const seen = (nodeId: string, at: Date, intervalMs: number, written?: boolean) => liveness()?.seen(nodeId, at, intervalMs, written);
  const sessions = new AgentSessions();
  const sessionRelay = coordination.shared ? relaySessions(coordination, () => liveness()?.view, sessions) : undefined;
  const self = coordination.controllerId;
  parts.metrics.countSessions(() => sessions.size);
  return {
    ...parts,
    startedAt: new Date(),
    version: VERSION,
    credentialEnds,
    sessions,
    onHeartbeat: coordination.shared ? relayHeartbeats(coordination, seen) : seen,
    onSession: sessionRelay?.onSession ?? ((c) => liveness()?.session({ ...c, controller: self })),
    closeRelays: () => sessionRelay?.stop(),
    lastHeartbeat: (nodeId) => liveness()?.lastSeen(nodeId),
  };
}
