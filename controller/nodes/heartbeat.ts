// A node's heartbeat: what its agent reports (version, capabilities, labels, the projects and
// processes it runs) becomes the node's status, and every beat counts for liveness. A beat that
// changes nothing but the time is stored at most once a minute (each write is fsynced: at 1,000
// nodes this is the controller's main idle cost); a node_heartbeat_received event is recorded when
// the report changes, or at most hourly; coming online is a node_online event. What the beat
// changed goes to onRecorded (the reconciler's triggers) as soon as it is stored, and is returned.
// A beat is checked first (report-checks.ts: bounded lists and strings, labels, a heartbeat
// interval within bounds); a bad one is refused and changes nothing, liveness included. The
// labels it reports are stored and shown; placement trusts only the keys an admin allowed.
// The agent's counters (AgentCounters) never make a beat a change: they are stored with the
// writes above, at most a minute old, and handed to onAgentCounters with every beat (the
// controller's sums and its in-memory view of them, which reads show when newer).
import { create, equals } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HeartbeatRequest } from "../../gen/skipper/v1/node_service_pb.js";
import {
  NodeLiveness,
  NodeStatusSchema,
  NodeTransport,
  ProjectObservationSchema,
  type AgentCounters,
  type ProjectObservation,
} from "../../gen/skipper/v1/resource_pb.js";
import type { Trace } from "../base/context.js";
import { recordEvents } from "../events/event-recorder.js";
import { sameStatus } from "../resources/resource-rules.js";
import { checkHeartbeat } from "./report-checks.js";
import type { Store } from "../store/store.js";

const HEARTBEAT_PERSIST_MS = 60_000;
const HEARTBEAT_EVENT_EVERY_MS = 60 * 60 * 1000;

/** What one heartbeat changed. */
export interface HeartbeatOutcome {
  nodeId: string;
  /** When the beat was recorded (the node's last_heartbeat_at, the response's server_time). */
  at: Date;
  /** The node was not online before this beat. */
  cameOnline: boolean;
  /** A reported label under a key the admin trusts for placement changed. */
  trustedLabelsChanged: boolean;
  /** The set of projects the node runs changed. */
  projectsChanged: boolean;
  /** When the list changed: the tenants of every project in the old and the new list (by tenant id, else project name). */
  touchedTenants: Set<string>;
}

export interface HeartbeatDeps {
  store: Store;
  now: () => Date;
  /** Told of every beat (liveness is judged from every one, in memory); `written`: the node is stored online. */
  onHeartbeat?: (nodeId: string, at: Date, intervalMs: number, written?: boolean) => void;
  /** Told what a beat changed once it is stored (with its node_online event), before the heartbeat event. */
  onRecorded?: (beat: HeartbeatOutcome) => void;
  /** Told of the agent's counters of every beat that carries them, once the beat is recorded. */
  onAgentCounters?: (nodeId: string, counters: AgentCounters, at: Date) => void;
}

/** Records heartbeats; remembers, per node, when it last recorded a heartbeat event. */
export class HeartbeatRecorder {
  private readonly lastEvent = new Map<string, number>();

  constructor(private readonly deps: HeartbeatDeps) {}

  /** Records `req` from `nodeId` (already authorized to speak for itself), which came over `transport`. */
  async record(
    nodeId: string,
    req: HeartbeatRequest,
    trace: Trace,
    transport: NodeTransport = NodeTransport.UNARY,
  ): Promise<HeartbeatOutcome> {
    checkHeartbeat(req);
    const now = this.deps.now();
    const out: HeartbeatOutcome = {
      nodeId,
      at: now,
      cameOnline: false,
      trustedLabelsChanged: false,
      projectsChanged: false,
      touchedTenants: new Set(),
    };
    let reportChanged = false;
    let intervalMs = 0n;
    await this.deps.store.updateResource("node", nodeId, (node) => {
      const before = node.currentState?.kind.case === "node" ? node.currentState.kind.value : undefined;
      const projects = req.projectsReported ? req.projects : (before?.projects ?? []);
      out.projectsChanged = !sameProjects(before?.projects ?? [], projects);
      if (out.projectsChanged)
        for (const p of [...(before?.projects ?? []), ...projects]) out.touchedTenants.add(p.tenantId || p.projectName);
      out.cameOnline = before?.liveness !== NodeLiveness.ONLINE;
      const trusted = node.desiredState?.kind.case === "node" ? node.desiredState.kind.value.trustedLabelKeys : [];
      out.trustedLabelsChanged = trusted.some((k) => before?.labels[k] !== req.labels[k]);
      const status = create(NodeStatusSchema, {
        lastHeartbeatAt: timestampFromDate(now),
        agentVersion: req.agentVersion,
        capabilities: req.capabilities,
        labels: req.labels,
        uptimeSeconds: req.uptimeSeconds,
        liveness: NodeLiveness.ONLINE,
        livenessChangedAt: out.cameOnline ? timestampFromDate(now) : before?.livenessChangedAt,
        heartbeatIntervalMs: req.heartbeatIntervalMs > 0n ? req.heartbeatIntervalMs : (before?.heartbeatIntervalMs ?? 0n),
        projects,
        processes: req.processes,
        // An agent without counters (an older one) leaves the node's as they were.
        agentCounters: req.agentCounters ?? before?.agentCounters,
        agentCountersAt: req.agentCounters ? timestampFromDate(now) : before?.agentCountersAt,
        // A beat that lists what runs (even nothing) dates that list; one that could not tell keeps both.
        projectsObservedAt: req.projectsReported ? timestampFromDate(now) : before?.projectsObservedAt,
        transport,
        // An SSH node's, sent by its relay; an agent's own node has none.
        ssh: node.desiredState?.kind.case === "node" && node.desiredState.kind.value.ssh ? req.ssh : undefined,
        // What the agent says of its updater (skippy-updater), as it said it; absent from older agents.
        agentUpdate: req.agentUpdate,
      });
      intervalMs = status.heartbeatIntervalMs;
      const comparable = before
        ? {
            ...before,
            lastHeartbeatAt: status.lastHeartbeatAt,
            uptimeSeconds: status.uptimeSeconds,
            agentCounters: status.agentCounters,
            agentCountersAt: status.agentCountersAt,
            // A first date is a change; a later one is stored with the next write (at least once a minute).
            projectsObservedAt: before.projectsObservedAt ? status.projectsObservedAt : undefined,
          }
        : undefined;
      reportChanged =
        !comparable ||
        !sameStatus(
          { $typeName: "skipper.v1.ResourceStatus", kind: { case: "node", value: comparable } },
          { $typeName: "skipper.v1.ResourceStatus", kind: { case: "node", value: status } },
        );
      // Returning the node unchanged writes nothing.
      const storedAt = before?.lastHeartbeatAt ? timestampDate(before.lastHeartbeatAt).getTime() : 0;
      if (!reportChanged && !out.cameOnline && now.getTime() - storedAt < HEARTBEAT_PERSIST_MS) return node;
      node.currentState = { $typeName: "skipper.v1.ResourceStatus", kind: { case: "node", value: status } };
      node.updatedAt = timestampFromDate(now);
      return node;
    });
    this.deps.onHeartbeat?.(nodeId, now, Number(intervalMs), true);
    if (req.agentCounters) this.deps.onAgentCounters?.(nodeId, req.agentCounters, now);
    const ids = { ...trace, resourceType: "node", resourceId: nodeId, nodeId };
    if (out.cameOnline) await recordEvents(this.deps.store, [{ type: "node_online", ...ids }]);
    this.deps.onRecorded?.(out);
    const last = this.lastEvent.get(nodeId) ?? 0;
    if (reportChanged || now.getTime() - last >= HEARTBEAT_EVENT_EVERY_MS) {
      this.lastEvent.set(nodeId, now.getTime());
      const data = {
        agent_version: req.agentVersion,
        changed: reportChanged,
        docker_available: req.capabilities?.dockerAvailable ?? false,
        compose_version: req.capabilities?.composeVersion ?? "",
      };
      await recordEvents(this.deps.store, [{ type: "node_heartbeat_received", ...ids, data }]);
    }
    return out;
  }
}

function sameProjects(a: ProjectObservation[], b: ProjectObservation[]): boolean {
  return a.length === b.length && a.every((p, i) => equals(ProjectObservationSchema, p, b[i]!));
}
