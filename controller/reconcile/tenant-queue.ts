// The reconcile work queue, keyed by tenant (after controller-runtime's workqueue): adding a
// tenant that is already queued coalesces (a burst of changes becomes one pass); a sweep marks
// every tenant at once; a tenant can be added for later (the earliest time asked wins); a tenant
// whose pass failed comes back after an exponential backoff that resets when a pass succeeds.
// The queue holds no store state and runs nothing: the loop (reconciler.ts) takes from it.
import type { Trace } from "../context.js";

/** Backoff of a tenant whose passes keep failing: base * 2^(failures-1), capped. */
export interface QueueBackoff {
  baseMs: number;
  maxMs: number;
}

const DEFAULT_BACKOFF: QueueBackoff = { baseMs: 200, maxMs: 30_000 };

/** Tenants waiting for a pass, with the trace of the change that asked (none for sweeps and retries). */
export class TenantQueue {
  private readonly pending = new Map<string, Trace | undefined>();
  private all = false;
  private stopped = false;
  private readonly later = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private readonly failures = new Map<string, number>();

  /** `onReady` is called (synchronously) whenever something was added. */
  constructor(
    private readonly onReady: () => void,
    private readonly backoff: QueueBackoff = DEFAULT_BACKOFF,
  ) {}

  /** Queues one tenant; the newest trace wins, an add without one keeps the queued trace. */
  add(tenantId: string, trace?: Trace): void {
    if (this.stopped || tenantId === "") return;
    this.pending.set(tenantId, trace ?? this.pending.get(tenantId));
    this.onReady();
  }

  /** Queues every tenant (a sweep). */
  addAll(): void {
    if (this.stopped) return;
    this.all = true;
    this.onReady();
  }

  /** Queues a tenant at `at` (epoch ms); an earlier time already asked for stands. */
  addAt(tenantId: string, at: number, now: number): void {
    const prev = this.later.get(tenantId);
    if (this.stopped || (prev && prev.at <= at)) return;
    if (prev) clearTimeout(prev.timer);
    const timer = setTimeout(
      () => {
        this.later.delete(tenantId);
        this.add(tenantId);
      },
      Math.max(0, at - now) + 5,
    );
    timer.unref();
    this.later.set(tenantId, { at, timer });
  }

  /** Queues a tenant whose pass failed after its backoff; returns the delay in ms. */
  addRateLimited(tenantId: string, now: number): number {
    const n = (this.failures.get(tenantId) ?? 0) + 1;
    this.failures.set(tenantId, n);
    const delay = Math.min(this.backoff.maxMs, this.backoff.baseMs * 2 ** Math.min(n - 1, 30));
    this.addAt(tenantId, now + delay, now);
    return delay;
  }

  /** A pass of the tenant succeeded: its backoff starts again from the base. */
  forget(tenantId: string): void {
    this.failures.delete(tenantId);
  }

  /** How many passes of the tenant failed in a row. */
  failuresOf(tenantId: string): number {
    return this.failures.get(tenantId) ?? 0;
  }

  /** True when nothing is queued now (tenants queued for later do not count). */
  get empty(): boolean {
    return !this.all && this.pending.size === 0;
  }

  /** Takes everything queued now: whether a sweep was asked for, and the tenants with their traces. */
  takeAll(): { sweep: boolean; tenants: Map<string, Trace | undefined> } {
    const taken = { sweep: this.all, tenants: new Map(this.pending) };
    this.all = false;
    this.pending.clear();
    return taken;
  }

  /** Takes one queued tenant (oldest first), leaving a queued sweep in place. */
  takeOne(): [string, Trace | undefined] | undefined {
    const first = this.pending.entries().next();
    if (first.done) return undefined;
    this.pending.delete(first.value[0]);
    return first.value;
  }

  /** Drops what is queued and every timer; later adds are ignored. */
  stop(): void {
    this.stopped = true;
    for (const l of this.later.values()) clearTimeout(l.timer);
    this.later.clear();
    this.pending.clear();
    this.all = false;
  }
}
