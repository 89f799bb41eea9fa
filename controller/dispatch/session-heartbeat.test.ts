// The heartbeat interval a session is welcomed with grows with the sessions its controller holds
// (about 50 beats per second at most), within bounds, with jitter that spreads a fleet.
import { describe, expect, it } from "vitest";
import { MAX_SESSION_HEARTBEAT_MS, SESSION_HEARTBEAT_MS, retunedHeartbeatMs, sessionHeartbeatMs } from "./session-terms.js";

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

  it("retunes a session welcomed while the fleet was small once the fleet is large, and back", () => {
    // Welcomed at 10 s while 300 sessions were open; 5,000 now ask 100 s.
    expect(retunedHeartbeatMs(10_000, 300)).toBeUndefined();
    expect(retunedHeartbeatMs(10_000, 5_000, () => 0)).toBe(100_000);
    expect(retunedHeartbeatMs(60_000, 5_000)).toBeUndefined();
    // The fleet shrank to 100: 10 s again.
    expect(retunedHeartbeatMs(100_000, 100, () => 0)).toBe(10_000);
  });
});
