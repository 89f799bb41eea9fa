// BusyTime: overlapping tasks count once, gaps between them not at all.
import { describe, expect, it } from "vitest";
import { BusyTime } from "./busy-time.js";

describe("BusyTime", () => {
  it("counts the span during which any task ran: overlaps once, idle gaps never", async () => {
    let now = 0;
    const busy = new BusyTime(() => now);
    const gates: Array<() => void> = [];
    const task = () => busy.time(() => new Promise<void>((r) => gates.push(r)));
    // 0..10: a alone; 10..30: a and b; 30..40: b alone; 40..100: nothing; 100..105: c.
    const a = task();
    now = 10;
    const b = task();
    now = 30;
    gates[0]!();
    await a;
    now = 40;
    gates[1]!();
    await b;
    expect(busy.ms).toBe(40);
    now = 100;
    const c = task();
    now = 103;
    expect(busy.ms).toBe(43);
    now = 105;
    gates[2]!();
    await c;
    expect(busy.ms).toBe(45);
  });

  it("counts a task that throws, and passes its error on", async () => {
    let now = 0;
    const busy = new BusyTime(() => now);
    await expect(
      busy.time(async () => {
        now = 7;
        throw new Error("no");
      }),
    ).rejects.toThrow("no");
    expect(busy.ms).toBe(7);
  });
});
