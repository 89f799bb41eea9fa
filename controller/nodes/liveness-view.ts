// What a controller knows of each node's signs of life, in memory, and the liveness they imply.
// Signs: heartbeats (unary beats, and a session's keepalives), sessions opening and ending on any
// controller (this one's directly, the others' relayed: server/cluster.ts), and the other
// controllers' presence (a controller that stops saying it is there has lost its sessions). Every
// controller keeps this view; the leader's monitor (node-liveness.ts) judges from it and writes
// the changes. The rules:
// - a node whose agent holds a session on a live controller is online, unless the session has
//   carried nothing for six of its heartbeat intervals (a lost "ended" message heals so);
// - otherwise it is judged from the age of its last sign in intervals: degraded after 3, offline
//   after 6. A heartbeat counts in the interval it reported; a session's end counts as a sign with
//   SESSION_GONE_INTERVAL_MS (offline 15 s after a session ends unless its agent opens another or
//   beats); a session whose controller vanished ends when that is noticed.
import { NodeLiveness } from "../../gen/skipper/v1/resource_pb.js";
import { boundHeartbeatInterval } from "../../common/heartbeat-interval.js";

/** Interval assumed for agents that do not report theirs (the agent's default poll). */
export const DEFAULT_HEARTBEAT_MS = 5000;
export const DEGRADED_AFTER = 3;
export const OFFLINE_AFTER = 6;
/**
 * A session that ended counts as a last sign with this interval: degraded 7.5 s after it ended,
 * offline after 15 s, unless the agent opens another (its first retry waits at most 0.5 s) or beats.
 */
export const SESSION_GONE_INTERVAL_MS = 2_500;
/**
 * After a controller starts, a node last seen on a session is judged from the start with this
 * interval (a fleet reconnects with backoff of up to 30 s): degraded after 60 s, offline after 120 s.
 */
export const RECONNECT_INTERVAL_MS = 20_000;
/** A controller that has sent nothing (its presence is said every PRESENCE_MS) for this long is gone, with its sessions. */
export const PRESENCE_LAPSE_MS = 5_000;
/** How often a controller says it is there. */
export const PRESENCE_MS = 1_000;

/** The liveness a sign at `last` implies at `now` (intervals within bounds); UNSPECIFIED before any. */
export function livenessOf(last: Date | undefined, intervalMs: number, now: Date): NodeLiveness {
  if (!last) return NodeLiveness.UNSPECIFIED;
  // Bounded here too: an interval stored before heartbeats were checked may be anything.
  const missed = (now.getTime() - last.getTime()) / (intervalMs > 0 ? boundHeartbeatInterval(intervalMs) : DEFAULT_HEARTBEAT_MS);
  if (missed > OFFLINE_AFTER) return NodeLiveness.OFFLINE;
  if (missed > DEGRADED_AFTER) return NodeLiveness.DEGRADED;
  return NodeLiveness.ONLINE;
}

/** Why a node's liveness is what it is (the data of its liveness events). */
export type LivenessCause = "heartbeat" | "session_open" | "session_ended" | "controller_lost" | "controller_restart";

/** A session opening or ending, on this controller or relayed from another. */
export interface SessionChange {
  nodeId: string;
  /** The controller that holds (held) it. */
  controller: string;
  session: string;
  open: boolean;
  at: Date;
  /** The session's heartbeat interval (welcome.heartbeat_interval_ms): its keepalives come at least this often. */
  intervalMs: number;
}

/** One node's last sign of life. */
export interface Sign {
  /** When (ms since the epoch). */
  at: number;
  /** Judged in these intervals. */
  intervalMs: number;
  /** The liveness stored for the node, as this view last knew it. */
  stored: NodeLiveness;
  cause: LivenessCause;
  /** The session its agent holds, while one is open. */
  holder?: { controller: string; session: string };
}

/** The liveness `sign` implies at `now`, with `alive` telling which controllers are there. */
export function judge(sign: Sign, now: Date, alive: (controller: string) => boolean): NodeLiveness {
  const byAge = livenessOf(new Date(sign.at), sign.intervalMs, now);
  if (sign.holder && alive(sign.holder.controller) && byAge !== NodeLiveness.OFFLINE) return NodeLiveness.ONLINE;
  return byAge;
}

export class LivenessView {
  private readonly signs = new Map<string, Sign>();
  // controller id -> when it last said anything; this controller is always there.
  private readonly presence = new Map<string, number>();

  constructor(
    /** This controller's id. */
    private readonly self: string,
    private readonly now: () => Date,
  ) {}

  /** A heartbeat (or a session's keepalive) of the node at `at`, in its interval; `stored`: it was written online. */
  beat(nodeId: string, at: Date, intervalMs: number, stored?: NodeLiveness): void {
    const s = this.signs.get(nodeId);
    if (s && s.at > at.getTime()) return;
    this.signs.set(nodeId, {
      at: at.getTime(),
      intervalMs,
      stored: stored ?? s?.stored ?? NodeLiveness.UNSPECIFIED,
      cause: "heartbeat",
      holder: s?.holder,
    });
  }

  /** A session of the node opened or ended. An end counts only for the session that holds the node. */
  session(c: SessionChange): void {
    this.present(c.controller, this.now());
    const s = this.signs.get(c.nodeId);
    if (c.open) {
      this.signs.set(c.nodeId, {
        at: Math.max(c.at.getTime(), s?.at ?? 0),
        intervalMs: c.intervalMs,
        stored: s?.stored ?? NodeLiveness.UNSPECIFIED,
        cause: "session_open",
        holder: { controller: c.controller, session: c.session },
      });
      return;
    }
    if (!s?.holder || s.holder.session !== c.session || s.holder.controller !== c.controller) return;
    this.ended(c.nodeId, s, Math.max(c.at.getTime(), s.at), "session_ended");
  }

  /** A controller said it is there (any message from it counts). */
  present(controller: string, at: Date): void {
    if (controller === this.self) return;
    const before = this.presence.get(controller) ?? 0;
    if (at.getTime() > before) this.presence.set(controller, at.getTime());
  }

  /** Whether `controller` is there: this one, or one heard from within PRESENCE_LAPSE_MS. */
  alive(controller: string, now = this.now()): boolean {
    if (controller === this.self) return true;
    const at = this.presence.get(controller);
    return at !== undefined && now.getTime() - at <= PRESENCE_LAPSE_MS;
  }

  /** The sessions this controller holds, as the view has them (for a controller that asks). */
  heldHere(): SessionChange[] {
    const out: SessionChange[] = [];
    for (const [nodeId, s] of this.signs) {
      if (s.holder?.controller !== this.self) continue;
      out.push({ nodeId, controller: this.self, session: s.holder.session, open: true, at: new Date(s.at), intervalMs: s.intervalMs });
    }
    return out;
  }

  /** Adds a node as stored at start, unless a sign of it came first. */
  loaded(nodeId: string, sign: Sign): void {
    if (!this.signs.has(nodeId)) this.signs.set(nodeId, sign);
  }

  get(nodeId: string): Sign | undefined {
    return this.signs.get(nodeId);
  }

  forget(nodeId: string): void {
    this.signs.delete(nodeId);
  }

  /** Records what was stored for the node (the monitor wrote or read it). */
  storedAs(nodeId: string, liveness: NodeLiveness): void {
    const s = this.signs.get(nodeId);
    if (s) s.stored = liveness;
  }

  /**
   * Sessions held by controllers that are gone end now; then the nodes whose judged liveness
   * differs from the stored one, with what they are judged.
   */
  due(now = this.now()): Array<{ nodeId: string; sign: Sign; next: NodeLiveness }> {
    const out: Array<{ nodeId: string; sign: Sign; next: NodeLiveness }> = [];
    for (const [nodeId, held] of this.signs) {
      const lost = held.holder !== undefined && !this.alive(held.holder.controller, now);
      const s = lost ? this.ended(nodeId, held, now.getTime(), "controller_lost") : held;
      const next = judge(s, now, (c) => this.alive(c, now));
      if (next !== s.stored) out.push({ nodeId, sign: s, next });
    }
    return out;
  }

  private ended(nodeId: string, s: Sign, at: number, cause: LivenessCause): Sign {
    const gone = { at, intervalMs: SESSION_GONE_INTERVAL_MS, stored: s.stored, cause };
    this.signs.set(nodeId, gone);
    return gone;
  }
}
