// The heartbeat intervals the controller accepts, which the agent's --poll-interval keeps to: a
// node's liveness is judged in its own intervals (degraded after 3 missed, offline after 6), so
// an unbounded interval would let a node that stopped beating stay online for ever.

/** The shortest heartbeat interval a node may report, in ms. */
export const MIN_HEARTBEAT_INTERVAL_MS = 100;
/** The longest: a silent node is offline within half an hour (6 intervals). */
export const MAX_HEARTBEAT_INTERVAL_MS = 300_000;

/** True when `ms` is an interval a node may report. */
export function isHeartbeatInterval(ms: number): boolean {
  return Number.isFinite(ms) && ms >= MIN_HEARTBEAT_INTERVAL_MS && ms <= MAX_HEARTBEAT_INTERVAL_MS;
}

/** `ms` brought within the bounds (an interval stored before they existed). */
export function boundHeartbeatInterval(ms: number): number {
  return Math.min(MAX_HEARTBEAT_INTERVAL_MS, Math.max(MIN_HEARTBEAT_INTERVAL_MS, ms));
}
