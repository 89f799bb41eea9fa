import { describe, expect, it } from "vitest";
import { Periodic } from "./periodic.js";

describe("Periodic", () => {
  it("hands a failed run to onError, leaves no rejection unhandled, and runs again on the next tick", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => unhandled.push(e);
    process.on("unhandledRejection", onUnhandled);
    const errors: unknown[] = [];
    let runs = 0;
    let secondRun!: () => void;
    const again = new Promise<void>((resolve) => (secondRun = resolve));
    const p = new Periodic(
      async () => {
        runs++;
        if (runs === 1) throw new Error("the store is not open");
        secondRun();
      },
      5,
      (e) => errors.push(e),
    );
    try {
      p.start();
      await again;
      await p.stop();
      // One more turn of the event loop: an unhandled rejection is reported after the microtasks.
      await new Promise((resolve) => setImmediate(resolve));
      expect(errors.map((e) => (e as Error).message)).toEqual(["the store is not open"]);
      expect(unhandled).toEqual([]);
      expect(runs).toBeGreaterThanOrEqual(2);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });
});
