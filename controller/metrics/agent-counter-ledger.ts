// Per node, the counters its agent last reported to this controller (AgentCounters, in a
// heartbeat received here), and what each report adds to the fleet's sums (the skipper_agent_*
// counters of controller-metrics.ts). A sum never goes back:
// - a beat that follows one received here from the same boot (heartbeats_acknowledged one more,
//   or the same: a beat sent again after its answer was lost) adds the difference;
// - a boot's first beat (heartbeats_acknowledged 0, a new boot id) adds everything it carries,
//   since nobody counted any of it, and one start;
// - any other beat adds nothing and is the base for the next: this controller missed the beat
//   before (it went to another controller sharing the store, or was lost), or it restarted.
// So an agent's restart (a new boot id, counts from zero) never takes a sum back; and with
// several controllers each increase is added by the one that received the beats on both sides
// of it and by no other (unless an answer was lost just as the agent's beats moved between
// controllers): summing over controllers counts it once, and what happens between two beats
// that reached different controllers is not counted at all.
//
// A node not heard from for a day (deleted, or gone for good) is forgotten at the next sweep, so
// the ledger holds the nodes that beat here lately, not every node ever seen. Its next beat, if it
// comes back, is a base only, as after a controller's restart: nothing is counted twice.
import type { AgentCounters } from "../../gen/skipper/v1/resource_pb.js";

/** What one report adds to the fleet's sums. */
export interface AgentIncrease {
  /** Orders ended, by the type and code the agent wrote (not yet bounded as labels). */
  orders: { type: string; code: string; count: number }[];
  /** Agent processes started (their first beat). */
  starts: number;
  heartbeatFailures: number;
  claimsRefused: number;
  leasesLost: number;
  reportRetries: number;
  watchReconnects: number;
  sessionReconnects: number;
  sessionFallbacks: number;
}

/** The last report of an agent heard here. */
export interface HeardCounters {
  counters: AgentCounters;
  /** When the beat that carried them was received. */
  at: Date;
}

/** A node silent this long is forgotten. */
export const FORGET_AFTER_MS = 24 * 60 * 60 * 1000;
/** Sweeps for silent nodes at most this often (by the beats' receive times). */
const SWEEP_EVERY_MS = 60 * 60 * 1000;

export class AgentCounterLedger {
  private readonly heard = new Map<string, HeardCounters>();
  private sweptAt = -Infinity;

  /** Records a report of `nodeId`'s agent received at `at`; returns what it adds to the sums. */
  record(nodeId: string, counters: AgentCounters, at: Date): AgentIncrease {
    this.sweep(at.getTime());
    const prev = this.heard.get(nodeId)?.counters;
    this.heard.set(nodeId, { counters, at });
    const sameBoot = prev?.bootId === counters.bootId;
    const follows =
      sameBoot &&
      (counters.heartbeatsAcknowledged === prev!.heartbeatsAcknowledged ||
        counters.heartbeatsAcknowledged === prev!.heartbeatsAcknowledged + 1n);
    if (follows) return difference(counters, prev!, 0);
    if (!sameBoot && counters.heartbeatsAcknowledged === 0n) return difference(counters, undefined, 1);
    return difference(counters, counters, 0);
  }

  /** The counters `nodeId`'s agent last reported here, and when; undefined when none were. */
  latest(nodeId: string): HeardCounters | undefined {
    return this.heard.get(nodeId);
  }

  /** How many nodes the ledger holds. */
  get size(): number {
    return this.heard.size;
  }

  // Forgets the nodes last heard FORGET_AFTER_MS before `now`, at most once per SWEEP_EVERY_MS.
  private sweep(now: number): void {
    if (now - this.sweptAt < SWEEP_EVERY_MS) return;
    this.sweptAt = now;
    for (const [nodeId, h] of this.heard) if (now - h.at.getTime() >= FORGET_AFTER_MS) this.heard.delete(nodeId);
  }
}

/** `now` less `base` (zero when undefined), never below zero. */
function difference(now: AgentCounters, base: AgentCounters | undefined, starts: number): AgentIncrease {
  const less = (a: bigint, b: bigint | undefined) => (a > (b ?? 0n) ? Number(a - (b ?? 0n)) : 0);
  const before = new Map((base?.orders ?? []).map((o) => [`${o.type}\0${o.code}`, o.count]));
  return {
    orders: now.orders
      .map((o) => ({ type: o.type, code: o.code, count: less(o.count, before.get(`${o.type}\0${o.code}`)) }))
      .filter((o) => o.count > 0),
    starts,
    heartbeatFailures: less(now.heartbeatFailures, base?.heartbeatFailures),
    claimsRefused: less(now.claimsRefused, base?.claimsRefused),
    leasesLost: less(now.leasesLost, base?.leasesLost),
    reportRetries: less(now.reportRetries, base?.reportRetries),
    watchReconnects: less(now.watchReconnects, base?.watchReconnects),
    sessionReconnects: less(now.sessionReconnects, base?.sessionReconnects),
    sessionFallbacks: less(now.sessionFallbacks, base?.sessionFallbacks),
  };
}
