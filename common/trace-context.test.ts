import { describe, expect, it } from "vitest";
import { childSpan, formatTraceparent, parseTraceparent } from "./trace-context.js";

describe("traceparent", () => {
  it("reads version 00 and what a later version sends, and refuses what the specification refuses", () => {
    const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    expect(parseTraceparent(ok)).toEqual({ traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", flags: "01" });
    expect(formatTraceparent(parseTraceparent(ok)!)).toBe(ok);
    expect(parseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")?.traceId).toBe(
      "4bf92f3577b34da6a3ce929d0e0e4736",
    );
    for (const bad of [
      undefined,
      "",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
    ])
      expect(parseTraceparent(bad), String(bad)).toBeUndefined();
  });

  it("a child span keeps the trace and its flags with a new span id; without a parent it starts a trace", () => {
    const parent = parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")!;
    const child = childSpan(parent);
    expect(child.traceId).toBe(parent.traceId);
    expect(child.flags).toBe("00");
    expect(child.spanId).toMatch(/^[0-9a-f]{16}$/);
    expect(child.spanId).not.toBe(parent.spanId);
    const fresh = childSpan(undefined);
    expect(parseTraceparent(formatTraceparent(fresh))).toEqual(fresh);
  });

  it("ids drawn from the random pool do not repeat across many pool refills", () => {
    const ids = new Set<string>();
    for (let i = 0; i < 5000; i++) ids.add(childSpan(undefined).spanId);
    expect(ids.size).toBe(5000);
  });
});
