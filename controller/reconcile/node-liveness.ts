// Node liveness from heartbeat age, measured in the node's own heartbeat intervals: online,
// degraded after 3 missed intervals, offline after 6. A heartbeat makes a node online at once
// (node-service.ts); this monitor notices silence, records the change on the node's status with
// a node_degraded / node_offline event, and has the reconciler look again (work for an offline
// node waits, and its status says so).
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { NodeLiveness, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { Store } from "../store/store.js";
import type { Logger } from "../logging/logger.js";
import { recordEvents, type EventType } from "../events/event-recorder.js";

/** Interval assumed for agents that do not report theirs (the agent's default poll). */
export const DEFAULT_HEARTBEAT_MS = 5000;
export const DEGRADED_AFTER = 3;
export const OFFLINE_AFTER = 6;

/** The liveness a heartbeat at `last` implies at `now`; UNSPECIFIED before any heartbeat. */
export function livenessOf(last: Date | undefined, intervalMs: number, now: Date): NodeLiveness {
  if (!last) return NodeLiveness.UNSPECIFIED;
  const missed = (now.getTime() - last.getTime()) / (intervalMs > 0 ? intervalMs : DEFAULT_HEARTBEAT_MS);
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
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(private readonly deps: LivenessDeps) {}

  start(): void {
    this.timer = setInterval(() => {
      if (!this.running) this.running = this.check().finally(() => (this.running = undefined));
    }, this.deps.everyMs ?? 1000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }

  /** One look at every node; records the ones whose liveness changed. */
  async check(): Promise<void> {
    const now = this.deps.now();
    let changed = false;
    let pageToken = "";
    do {
      const page = await this.deps.store.listResources({ resourceType: "node", pageSize: 1000, pageToken });
      for (const node of page.items) if (await this.update(node, now)) changed = true;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    if (changed) this.deps.onChange();
  }

  private async update(node: Resource, now: Date): Promise<boolean> {
    const st = node.currentState?.kind.case === "node" ? node.currentState.kind.value : undefined;
    if (!st?.lastHeartbeatAt) return false;
    const next = livenessOf(timestampDate(st.lastHeartbeatAt), Number(st.heartbeatIntervalMs), now);
    if (next === st.liveness) return false;
    let from = st.liveness;
    let wrote = false;
    // Recomputed under the node's lock: a heartbeat that landed meanwhile wins.
    await this.deps.store.updateResource("node", node.id, (cur) => {
      const s = cur.currentState?.kind.case === "node" ? cur.currentState.kind.value : undefined;
      if (!s?.lastHeartbeatAt) return cur;
      const again = livenessOf(timestampDate(s.lastHeartbeatAt), Number(s.heartbeatIntervalMs), now);
      if (again === s.liveness) return cur;
      from = s.liveness;
      s.liveness = again;
      s.livenessChangedAt = timestampFromDate(now);
      wrote = true;
      return cur;
    });
    if (!wrote) return false;
    const type = EVENT[next];
    if (type) {
      const trace = { requestId: `liveness-${node.id}-${now.getTime()}`, correlationId: `liveness-${node.id}` };
      await recordEvents(this.deps.store, [
        { type, ...trace, resourceType: "node", resourceId: node.id, nodeId: node.id, data: { from: NodeLiveness[from] ?? "", to: NodeLiveness[next] ?? "", last_heartbeat_at: timestampDate(st.lastHeartbeatAt).toISOString() } },
      ]);
    }
    this.deps.logger.warn({ action: type ?? "node_liveness", result: NodeLiveness[next], node_id: node.id }, `node ${node.id} is ${NodeLiveness[next]?.toLowerCase()}`);
    return true;
  }
}
