// Node liveness from heartbeat age, measured in the node's own heartbeat intervals: online,
// degraded after 3 missed intervals, offline after 6. A heartbeat makes a node online at once
// (node-service.ts); this monitor notices silence, records the change on the node's status with
// a node_degraded / node_offline event, and has the reconciler look again (work for an offline
// node waits, and its status says so). It judges from every beat it is told of (seen()); the
// node's stored last_heartbeat_at is written on changes and at least every 60 s; reads of a node
// through the API show the last beat this monitor saw (lastSeen).
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { NodeLiveness } from "../../gen/skipper/v1/resource_pb.js";
import { boundHeartbeatInterval } from "../../common/heartbeat-interval.js";
import { isSkipperError } from "../base/errors.js";
import type { Store } from "../store/store.js";
import { eachScannedResource } from "../store/each-page.js";
import type { Logger } from "../../common/logging/logger.js";
import { recordEvents, type EventType } from "../events/event-recorder.js";
import { Periodic } from "../base/periodic.js";

/** Interval assumed for agents that do not report theirs (the agent's default poll). */
export const DEFAULT_HEARTBEAT_MS = 5000;
export const DEGRADED_AFTER = 3;
export const OFFLINE_AFTER = 6;

/** The liveness a heartbeat at `last` implies at `now` (intervals within bounds); UNSPECIFIED before any heartbeat. */
export function livenessOf(last: Date | undefined, intervalMs: number, now: Date): NodeLiveness {
  if (!last) return NodeLiveness.UNSPECIFIED;
  // Bounded here too: an interval stored before heartbeats were checked may be anything.
  const missed = (now.getTime() - last.getTime()) / (intervalMs > 0 ? boundHeartbeatInterval(intervalMs) : DEFAULT_HEARTBEAT_MS);
  if (missed > OFFLINE_AFTER) return NodeLiveness.OFFLINE;
  if (missed > DEGRADED_AFTER) return NodeLiveness.DEGRADED;
  return NodeLiveness.ONLINE;
}

const EVENT: Partial<Record<NodeLiveness, EventType>> = {
  [NodeLiveness.ONLINE]: "node_online",
  [NodeLiveness.DEGRADED]: "node_degraded",
  [NodeLiveness.OFFLINE]: "node_offline",
};

export interface LivenessDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  /** Called after any node changed liveness. */
  onChange: () => void;
  everyMs?: number;
}

export class LivenessMonitor {
  private readonly periodic: Periodic;
  // node id -> what its liveness is computed from, as last stored. Loaded from the store at
  // start and kept current by heartbeats (seen()), so a check is arithmetic over a map, not a
  // read of every node.
  private readonly beats = new Map<string, { at: number; intervalMs: number; liveness: NodeLiveness }>();
  private loaded = false;

  constructor(private readonly deps: LivenessDeps) {
    this.periodic = new Periodic(() => this.check(), deps.everyMs ?? 1000);
  }

  start(): void {
    this.periodic.start();
  }

  stop(): Promise<void> {
    return this.periodic.stop();
  }

  /** A heartbeat was stored for the node (it is online as of `at`). */
  seen(nodeId: string, at: Date, intervalMs: number): void {
    this.beats.set(nodeId, { at: at.getTime(), intervalMs, liveness: NodeLiveness.ONLINE });
  }

  /** When the node's last heartbeat arrived, as this process saw it (newer than the stored one). */
  lastSeen(nodeId: string): Date | undefined {
    const b = this.beats.get(nodeId);
    return b ? new Date(b.at) : undefined;
  }

  /** One look at every node; records the ones whose liveness changed. */
  async check(): Promise<void> {
    if (!this.loaded) await this.load();
    const now = this.deps.now();
    let changed = false;
    for (const [nodeId, b] of this.beats) {
      if (livenessOf(new Date(b.at), b.intervalMs, now) === b.liveness) continue;
      if (await this.update(nodeId, now)) changed = true;
    }
    if (changed) this.deps.onChange();
  }

  private async load(): Promise<void> {
    for await (const node of eachScannedResource(this.deps.store, { resourceType: "node" })) {
      const st = node.currentState?.kind.case === "node" ? node.currentState.kind.value : undefined;
      if (st?.lastHeartbeatAt && !this.beats.has(node.id)) {
        // A stored heartbeat time can lag the last beat (quiet beats are written at most every
        // 60 s), and none arrived while this controller was down: judge online nodes from no
        // earlier than now, so a restart does not mark live nodes degraded before they can beat
        // again. A node already degraded or offline keeps its last beat: only a heartbeat
        // brings it back (a restart used to mark offline nodes online, with a node_online event).
        const stored = timestampDate(st.lastHeartbeatAt).getTime();
        const at = st.liveness === NodeLiveness.ONLINE ? Math.max(stored, this.deps.now().getTime()) : stored;
        this.beats.set(node.id, { at, intervalMs: Number(st.heartbeatIntervalMs), liveness: st.liveness });
      }
    }
    this.loaded = true;
  }

  private async update(nodeId: string, now: Date): Promise<boolean> {
    let from = NodeLiveness.UNSPECIFIED;
    let next = NodeLiveness.UNSPECIFIED;
    let last: Date | undefined;
    let wrote = false;
    try {
      // Recomputed under the node's lock from what is stored: a heartbeat that landed meanwhile wins.
      await this.deps.store.updateResource("node", nodeId, (cur) => {
        const s = cur.currentState?.kind.case === "node" ? cur.currentState.kind.value : undefined;
        if (!s?.lastHeartbeatAt || cur.deletion) {
          this.beats.delete(nodeId);
          return cur;
        }
        // The latest beat this controller saw (the stored time may lag it), never older than stored.
        const seenAt = Math.max(this.beats.get(nodeId)?.at ?? 0, timestampDate(s.lastHeartbeatAt).getTime());
        last = new Date(seenAt);
        next = livenessOf(last, Number(s.heartbeatIntervalMs), now);
        this.beats.set(nodeId, { at: seenAt, intervalMs: Number(s.heartbeatIntervalMs), liveness: next });
        if (next === s.liveness) return cur;
        from = s.liveness;
        s.liveness = next;
        s.livenessChangedAt = timestampFromDate(now);
        wrote = true;
        return cur;
      });
    } catch (e) {
      if (isSkipperError(e) && e.code === "RESOURCE_NOT_FOUND") {
        this.beats.delete(nodeId);
        return false;
      }
      throw e;
    }
    if (!wrote) return false;
    const type = EVENT[next];
    if (type) {
      const trace = { requestId: `liveness-${nodeId}-${now.getTime()}`, correlationId: `liveness-${nodeId}` };
      await recordEvents(this.deps.store, [
        {
          type,
          ...trace,
          resourceType: "node",
          resourceId: nodeId,
          nodeId,
          data: { from: NodeLiveness[from] ?? "", to: NodeLiveness[next] ?? "", last_heartbeat_at: last!.toISOString() },
        },
      ]);
    }
    this.deps.logger.warn(
      { action: type ?? "node_liveness", result: NodeLiveness[next], node_id: nodeId },
      `node ${nodeId} is ${NodeLiveness[next]?.toLowerCase()}`,
    );
    return true;
  }
}
