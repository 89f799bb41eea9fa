import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { LogLineSchema } from "../gen/skipper/v1/work_order_pb.js";
import { LogCursor } from "./log-cursor.js";

const line = (seconds: number, nanos: number, text: string) =>
  create(LogLineSchema, { time: { seconds: BigInt(seconds), nanos }, text, stream: "stdout" });

describe("LogCursor", () => {
  it("prints a line printed in the same millisecond as the last one, and not the ones the inclusive --since sends again", () => {
    const c = new LogCursor();
    // Round 1.
    expect(c.take("web", line(100, 5_000_000, "a"))).toBe(true);
    expect(c.take("web", line(100, 5_000_100, "b"))).toBe(true);
    // Round 2 asks from the millisecond of "b": "a" and "b" come again, "c" is new in that millisecond.
    expect(c.take("web", line(100, 5_000_000, "a"))).toBe(false);
    expect(c.take("web", line(100, 5_000_100, "b"))).toBe(false);
    expect(c.take("web", line(100, 5_000_100, "c"))).toBe(true);
    expect(c.take("web", line(101, 0, "d"))).toBe(true);
    expect(c.take("web", line(100, 5_000_100, "c"))).toBe(false);
  });

  it("tells apart the same text from two containers at one instant", () => {
    const c = new LogCursor();
    expect(c.take("web", line(5, 0, "ready"))).toBe(true);
    expect(c.take("worker", line(5, 0, "ready"))).toBe(true);
    expect(c.take("web", line(5, 0, "ready"))).toBe(false);
  });
});
