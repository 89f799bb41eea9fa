import { describe, expect, it } from "vitest";
import { mapLimit } from "./map-limit.js";

// A call that ends when the test says so.
function gated() {
  const waiting: (() => void)[] = [];
  let running = 0;
  let peak = 0;
  const fn = async (x: number) => {
    running++;
    peak = Math.max(peak, running);
    await new Promise<void>((r) => waiting.push(r));
    running--;
    if (x < 0) throw new Error(`bad ${x}`);
    return x * 10;
  };
  const releaseAll = async () => {
    while (waiting.length > 0 || running > 0) {
      waiting.splice(0).forEach((r) => r());
      await new Promise((r) => setImmediate(r));
    }
  };
  return { fn, releaseAll, peak: () => peak, started: () => running };
}

describe("mapLimit", () => {
  it("answers in the list's order with at most `limit` calls under way", async () => {
    const g = gated();
    const p = mapLimit([1, 2, 3, 4, 5, 6, 7], 3, g.fn);
    await new Promise((r) => setImmediate(r));
    expect(g.started()).toBe(3);
    await g.releaseAll();
    expect(await p).toEqual([10, 20, 30, 40, 50, 60, 70]);
    expect(g.peak()).toBe(3);
  });

  it("rejects with the first failure and starts no call after it", async () => {
    const seen: number[] = [];
    const p = mapLimit([1, -2, 3, 4, 5], 1, async (x) => {
      seen.push(x);
      if (x < 0) throw new Error(`bad ${x}`);
      return x;
    });
    await expect(p).rejects.toThrow("bad -2");
    expect(seen).toEqual([1, -2]);
  });

  it("an empty list answers an empty list", async () => {
    expect(await mapLimit([], 4, async (x: number) => x)).toEqual([]);
  });
});
