// The terms of an agent's session that scale with the fleet: the heartbeat interval a new session
// is welcomed with, and the new one a session is given (SessionTerms) when the fleet has grown or
// shrunk far from what it was welcomed into.
/** How often an agent on a session heartbeats, at the least: a keepalive, or the full report when it changed. */
export const SESSION_HEARTBEAT_MS = 10_000;
/** The longest interval a fleet makes it (before jitter): keepalives stay inside the connections' idle limits. */
export const MAX_SESSION_HEARTBEAT_MS = 180_000;
/** Heartbeats per second one controller's sessions send at most (the interval grows with the fleet, as Nomad's does). */
export const SESSION_HEARTBEATS_PER_S = 50;

/**
 * The heartbeat interval a new session is given when this controller holds `sessions`:
 * max(10 s, sessions / 50 per s), at most 180 s, plus up to a quarter more at random, so a fleet
 * that connected at once does not beat at once. Liveness does not wait for beats (an open session
 * is the sign: liveness-view.ts); they carry changes, and prove a quiet session still moves.
 */
export function sessionHeartbeatMs(sessions: number, random: () => number = Math.random): number {
  const base = Math.min(MAX_SESSION_HEARTBEAT_MS, Math.max(SESSION_HEARTBEAT_MS, Math.ceil((sessions * 1000) / SESSION_HEARTBEATS_PER_S)));
  return base + Math.floor(random() * (base / 4));
}

/**
 * The new heartbeat interval of a session beating every `currentMs` on a controller that holds
 * `sessions`, when it is outside half to twice what such a fleet asks (sessionHeartbeatMs before
 * jitter); undefined when it is within.
 */
export function retunedHeartbeatMs(currentMs: number, sessions: number, random: () => number = Math.random): number | undefined {
  const base = sessionHeartbeatMs(sessions, () => 0);
  if (currentMs >= base / 2 && currentMs <= base * 2) return undefined;
  return sessionHeartbeatMs(sessions, random);
}
