// Node liveness, judged by the leader from every controller's signs of life (liveness-view.ts:
// sessions open on any controller, heartbeats, the controllers' presence). A heartbeat makes a
// node online at once (heartbeat.ts); this monitor notices the rest: a session that ended and was
// not replaced, a controller that vanished with its sessions, silence. Each look collects every
// node whose liveness changed and writes them together (concurrent writes, which the stores
// commit in groups, and one batch of node_online / node_degraded / node_offline events), then
// has the reconciler look again (work for an offline node waits, and its status says so). The
// node's stored last_heartbeat_at is written on changes and at least every 60 s; reads of a node
// through the API show the last beat this controller saw (lastSeen).
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { NodeLiveness, NodeTransport } from "../../gen/skipper/v1/resource_pb.js";
import { isSkipperError } from "../base/errors.js";
import type { Store } from "../store/store.js";
import { eachScannedResource } from "../store/each-page.js";
import type { Logger } from "../../common/logging/logger.js";
import { recordEvents, type EventInput, type EventType } from "../events/event-recorder.js";
import { Periodic } from "../base/periodic.js";
import { LivenessView, RECONNECT_INTERVAL_MS, livenessOf, type SessionChange, type Sign } from "./liveness-view.js";

export { DEFAULT_HEARTBEAT_MS, DEGRADED_AFTER, OFFLINE_AFTER, livenessOf } from "./liveness-view.js";

const EVENT: Partial<Record<NodeLiveness, EventType>> = {
  [NodeLiveness.ONLINE]: "node_online",
  [NodeLiveness.DEGRADED]: "node_degraded",
  [NodeLiveness.OFFLINE]: "node_offline",
};

/** Node writes one look makes at once (the stores group concurrent commits). */
const WRITES_AT_ONCE = 64;

export interface LivenessDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  /** Called after any node changed liveness. */
  onChange: () => void;
  everyMs?: number;
  /** This controller's id (its own sessions' controller is always there). */
  controllerId?: string;
}

export class LivenessMonitor {
  private readonly periodic: Periodic;
  /** Every controller's signs of life, kept by every controller (the one that leads judges). */
  readonly view: LivenessView;
  private loaded = false;

  constructor(private readonly deps: LivenessDeps) {
    this.periodic = new Periodic(
      () => this.check(),
      deps.everyMs ?? 1000,
      (err) => deps.logger.error({ action: "node_liveness", result: "error", err }, "node liveness check failed; trying again"),
    );
    this.view = new LivenessView(deps.controllerId ?? "sole", deps.now);
  }

  start(): void {
    this.periodic.start();
  }

  stop(): Promise<void> {
    return this.periodic.stop();
  }

  /** A heartbeat of the node at `at`; `written`: this controller stored it online (a full report). */
  seen(nodeId: string, at: Date, intervalMs: number, written = false): void {
    this.view.beat(nodeId, at, intervalMs, written ? NodeLiveness.ONLINE : undefined);
  }

  /** A session of the node opened or ended (here, or relayed). */
  session(change: SessionChange): void {
    this.view.session(change);
  }

  /** When the node's last sign arrived, as this process saw it (newer than the stored one). */
  lastSeen(nodeId: string): Date | undefined {
    const s = this.view.get(nodeId);
    return s?.cause === "heartbeat" || s?.holder ? new Date(s.at) : undefined;
  }

  /** One look at every node; records the ones whose liveness changed, together. */
  async check(): Promise<void> {
    if (!this.loaded) await this.load();
    const now = this.deps.now();
    const due = this.view.due(now);
    if (due.length === 0) return;
    const events: EventInput[] = [];
    for (let i = 0; i < due.length; i += WRITES_AT_ONCE) {
      const slice = due.slice(i, i + WRITES_AT_ONCE);
      const written = await Promise.all(slice.map((d) => this.update(d.nodeId, d.sign, d.next, now)));
      for (const e of written) if (e) events.push(e);
    }
    if (events.length === 0) return;
    await recordEvents(this.deps.store, events);
    this.deps.onChange();
  }

  private async load(): Promise<void> {
    const now = this.deps.now().getTime();
    for await (const node of eachScannedResource(this.deps.store, { resourceType: "node" })) {
      const st = node.currentState?.kind.case === "node" ? node.currentState.kind.value : undefined;
      if (!st?.lastHeartbeatAt) continue;
      // A stored heartbeat time can lag the last beat (quiet beats are written at most every
      // 60 s), and none arrived while this controller was down: judge online nodes from no
      // earlier than now, so a restart does not mark live nodes degraded before they can come
      // back; a node that was on a session gets the fleet's reconnect window. A node already
      // degraded or offline keeps its last beat: only a sign of life brings it back.
      const stored = timestampDate(st.lastHeartbeatAt).getTime();
      const online = st.liveness === NodeLiveness.ONLINE;
      const onSession = st.transport === NodeTransport.SESSION;
      this.view.loaded(node.id, {
        at: online ? Math.max(stored, now) : stored,
        intervalMs: online && onSession ? RECONNECT_INTERVAL_MS : Number(st.heartbeatIntervalMs),
        stored: st.liveness,
        cause: online && onSession ? "controller_restart" : "heartbeat",
      });
    }
    this.loaded = true;
  }

  // Writes `next` under the node's lock, unless what is stored says otherwise: a heartbeat stored
  // after the sign (by another controller, or one this one has not heard of) is judged instead.
  // Returns the event to record.
  private async update(nodeId: string, sign: Sign, next: NodeLiveness, now: Date): Promise<EventInput | undefined> {
    let from = NodeLiveness.UNSPECIFIED;
    let wrote = false;
    try {
      await this.deps.store.updateResource("node", nodeId, (cur) => {
        const s = cur.currentState?.kind.case === "node" ? cur.currentState.kind.value : undefined;
        if (cur.deletion) {
          this.view.forget(nodeId);
          return cur;
        }
        if (!s?.lastHeartbeatAt) {
          // Never reported (a session opened before its first report was stored): it stays
          // never seen until a report is; judged again when a sign changes what it implies.
          this.view.storedAs(nodeId, next);
          return cur;
        }
        const storedAt = timestampDate(s.lastHeartbeatAt).getTime();
        if (!sign.holder && storedAt > sign.at) {
          const interval = Number(s.heartbeatIntervalMs);
          this.view.beat(nodeId, new Date(storedAt), interval);
          next = livenessOf(new Date(storedAt), interval, now);
        }
        this.view.storedAs(nodeId, next);
        if (next === s.liveness) return cur;
        from = s.liveness;
        s.liveness = next;
        s.livenessChangedAt = timestampFromDate(now);
        wrote = true;
        return cur;
      });
    } catch (e) {
      if (isSkipperError(e) && e.code === "RESOURCE_NOT_FOUND") {
        this.view.forget(nodeId);
        return undefined;
      }
      throw e;
    }
    if (!wrote) return undefined;
    const type = EVENT[next];
    this.deps.logger.warn(
      { action: type ?? "node_liveness", result: NodeLiveness[next], node_id: nodeId, metadata: { cause: sign.cause } },
      `node ${nodeId} is ${NodeLiveness[next]?.toLowerCase()} (${sign.cause.replaceAll("_", " ")})`,
    );
    if (!type) return undefined;
    return {
      type,
      requestId: `liveness-${nodeId}-${now.getTime()}`,
      correlationId: `liveness-${nodeId}`,
      resourceType: "node",
      resourceId: nodeId,
      nodeId,
      data: {
        from: NodeLiveness[from] ?? "",
        to: NodeLiveness[next] ?? "",
        cause: sign.cause,
        last_sign_at: new Date(sign.at).toISOString(),
      },
    };
  }
}
