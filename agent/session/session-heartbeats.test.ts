// SessionHeartbeats' timing: a beat at the start, then one every interval; new terms (retime)
// change the interval from then on, and the next beat is a full report naming it.
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { HeartbeatRequestSchema } from "../../gen/skipper/v1/node_service_pb.js";
import type { Heartbeats } from "../heartbeats.js";
import type { SessionLink } from "./session-link.js";
import { SessionHeartbeats } from "./session-heartbeats.js";

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

describe("SessionHeartbeats", () => {
  it("beats every interval, and every new interval once retimed, reporting it", async () => {
    const sent: Array<{ report?: { heartbeatIntervalMs: bigint } }> = [];
    const link = { up: true, send: (k: { value: { report?: { heartbeatIntervalMs: bigint } } }) => sent.push(k.value) };
    const heartbeats = {
      report: async (o: { intervalMs: number }) =>
        create(HeartbeatRequestSchema, { nodeId: "n", heartbeatIntervalMs: BigInt(o.intervalMs) }),
      sentOnSession: () => undefined,
      onUpdaterMoved: () => () => undefined,
    };
    const beats = new SessionHeartbeats(
      heartbeats as unknown as Heartbeats,
      link as unknown as SessionLink,
      pino({ level: "silent" }),
      () => false,
    );
    beats.start(10_000);
    await vi.advanceTimersByTimeAsync(30_000);
    expect(sent).toHaveLength(4); // the start, then 10, 20, 30 s
    expect(sent[0]?.report?.heartbeatIntervalMs).toBe(10_000n);
    expect(sent.slice(1).every((b) => b.report === undefined)).toBe(true); // keepalives: nothing changed
    beats.retime(100_000);
    await vi.advanceTimersByTimeAsync(99_000);
    expect(sent).toHaveLength(4);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(sent).toHaveLength(5);
    expect(sent[4]?.report?.heartbeatIntervalMs).toBe(100_000n); // the report names the new interval
    beats.stop();
  });
});
