// The reconcile work queue (reconcile/tenant-queue.ts), alone: coalescing, sweeps, adds for later,
// the failure backoff and stop. Timers run on vitest's fake clock.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { PACE_FACTOR, TenantQueue } from "./tenant-queue.js";

const T1 = { requestId: "req-1", correlationId: "corr-1" };
const T2 = { requestId: "req-2", correlationId: "corr-2" };
const NOW = 1_000_000;

let ready: ReturnType<typeof vi.fn<() => void>>;
let q: TenantQueue;

beforeEach(() => {
  vi.useFakeTimers();
  ready = vi.fn<() => void>();
  q = new TenantQueue(ready, { baseMs: 100, maxMs: 1000 });
});
afterEach(() => {
  q.stop();
  vi.useRealTimers();
});

describe("adding tenants", () => {
  it("adding a queued tenant again coalesces into one entry, and the newest trace wins", () => {
    q.add("shop", T1);
    q.add("shop", T2);
    const { sweep, tenants } = q.takeAll();
    expect(sweep).toBe(false);
    expect([...tenants]).toEqual([["shop", T2]]);
    expect(ready).toHaveBeenCalledTimes(2);
  });

  it("an add without a trace keeps the queued trace", () => {
    q.add("shop", T1);
    q.add("shop");
    expect([...q.takeAll().tenants]).toEqual([["shop", T1]]);
  });

  it("an empty tenant id is ignored", () => {
    q.add("");
    expect(q.empty).toBe(true);
    expect(ready).not.toHaveBeenCalled();
  });

  it("takeOne takes the oldest tenant and leaves a queued sweep in place", () => {
    q.add("a");
    q.add("b", T1);
    q.addAll();
    expect(q.takeOne()).toEqual(["a", undefined]);
    expect(q.takeAll()).toEqual({ sweep: true, tenants: new Map([["b", T1]]) });
  });
});

describe("sweeps", () => {
  it("addAll sets a sweep that takeAll returns once", () => {
    q.addAll();
    q.addAll();
    expect(q.empty).toBe(false);
    expect(q.takeAll().sweep).toBe(true);
    expect(q.takeAll().sweep).toBe(false);
    expect(q.empty).toBe(true);
  });
});

describe("adding for later", () => {
  it("queues the tenant when its time comes, not before", () => {
    q.addAt("shop", NOW + 1000, NOW);
    vi.advanceTimersByTime(999);
    expect(q.empty).toBe(true);
    vi.advanceTimersByTime(100);
    expect([...q.takeAll().tenants.keys()]).toEqual(["shop"]);
  });

  it("keeps the earliest time asked for: a later one is ignored, an earlier one replaces it", () => {
    q.addAt("late", NOW + 1000, NOW);
    q.addAt("late", NOW + 5000, NOW);
    q.addAt("early", NOW + 5000, NOW);
    q.addAt("early", NOW + 1000, NOW);
    vi.advanceTimersByTime(1100);
    expect([...q.takeAll().tenants.keys()].sort()).toEqual(["early", "late"]);
    // Each was queued once: no timer is left for the later time.
    vi.advanceTimersByTime(10_000);
    expect(q.empty).toBe(true);
  });
});

describe("backoff of failing passes", () => {
  it("doubles the delay from the base up to the cap, and forget() starts again from the base", () => {
    const delays = Array.from({ length: 6 }, () => q.addRateLimited("shop", NOW));
    expect(delays).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect(q.failuresOf("shop")).toBe(6);
    q.forget("shop");
    expect(q.failuresOf("shop")).toBe(0);
    expect(q.addRateLimited("shop", NOW)).toBe(100);
  });

  it("keeps each tenant's failures apart", () => {
    q.addRateLimited("a", NOW);
    q.addRateLimited("a", NOW);
    expect(q.addRateLimited("b", NOW)).toBe(100);
    expect(q.failuresOf("a")).toBe(2);
  });

  it("queues a failed tenant again once its delay has passed", () => {
    q.addRateLimited("shop", NOW);
    expect(q.empty).toBe(true);
    vi.advanceTimersByTime(200);
    expect([...q.takeAll().tenants]).toEqual([["shop", undefined]]);
  });
});

describe("stop", () => {
  it("drops what is queued, cancels adds for later, and ignores later adds", () => {
    q.add("now");
    q.addAll();
    q.addAt("later", NOW + 100, NOW);
    q.stop();
    expect(q.empty).toBe(true);
    ready.mockClear();
    q.add("after");
    q.addAll();
    q.addAt("after-later", NOW + 100, NOW);
    q.addRateLimited("failed", NOW);
    vi.advanceTimersByTime(10_000);
    expect(q.empty).toBe(true);
    expect(q.takeAll()).toEqual({ sweep: false, tenants: new Map() });
    expect(ready).not.toHaveBeenCalled();
  });
});

describe("paced adds (an order ended)", () => {
  it("queue at once a tenant with no pass yet, or whose last pass ended long enough ago", () => {
    q.addPaced("new");
    expect([...q.takeAll().tenants.keys()]).toEqual(["new"]);
    q.passed("shop", Date.now() - 100, 40);
    q.addPaced("shop");
    expect([...q.takeAll().tenants.keys()]).toEqual(["shop"]);
  });

  it("wait until the time since the last pass is PACE_FACTOR times what it took, and coalesce meanwhile", () => {
    q.passed("shop", Date.now(), 50);
    q.addPaced("shop");
    q.addPaced("shop");
    expect(q.empty).toBe(true);
    expect(q.pacing).toBe(true);
    vi.advanceTimersByTime(PACE_FACTOR * 50 - 10);
    expect(q.empty).toBe(true);
    vi.advanceTimersByTime(20);
    expect(q.pacing).toBe(false);
    expect([...q.takeAll().tenants.keys()]).toEqual(["shop"]);
    vi.advanceTimersByTime(1000);
    expect(q.empty).toBe(true);
  });

  it("a plain add of a paced tenant queues it now and drops the wait", () => {
    q.passed("shop", Date.now(), 50);
    q.addPaced("shop");
    q.add("shop", T1);
    expect(q.pacing).toBe(false);
    expect([...q.takeAll().tenants]).toEqual([["shop", T1]]);
    vi.advanceTimersByTime(1000);
    expect(q.empty).toBe(true);
  });
});
