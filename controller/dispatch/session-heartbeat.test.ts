// The heartbeat interval a session is welcomed with grows with the sessions its controller holds
// (about 50 beats per second at most), within bounds, with jitter that spreads a fleet.
import { describe, expect, it } from "vitest";
import { MAX_SESSION_HEARTBEAT_MS, SESSION_HEARTBEAT_MS, sessionHeartbeatMs } from "./agent-session.js";

describe("sessionHeartbeatMs", () => {
  it("is 10 s for a small fleet, sessions / 50 per s for a large one, at most 180 s, before jitter", () => {
    const none = () => 0;
    expect(sessionHeartbeatMs(1, none)).toBe(SESSION_HEARTBEAT_MS);
    expect(sessionHeartbeatMs(500, none)).toBe(10_000);
    expect(sessionHeartbeatMs(2_000, none)).toBe(40_000);
    expect(sessionHeartbeatMs(10_000, none)).toBe(MAX_SESSION_HEARTBEAT_MS);
  });

  it("adds up to a quarter at random, so 10,000 sessions beat about 50 times a second", () => {
    expect(sessionHeartbeatMs(2_000, () => 0.999)).toBe(49_990);
    let rate = 0;
    for (let i = 0; i < 2_000; i++) rate += 1000 / sessionHeartbeatMs(2_000);
    expect(rate).toBeGreaterThan(40);
    expect(rate).toBeLessThanOrEqual(50);
  });
});
