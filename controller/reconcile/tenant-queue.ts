// The reconcile work queue, keyed by tenant (after controller-runtime's workqueue): adding a
// tenant that is already queued coalesces (a burst of changes becomes one pass); a sweep marks
// every tenant at once; a tenant can be added for later (the earliest time asked wins); a tenant
// whose pass failed comes back after an exponential backoff that resets when a pass succeeds;
// routine progress (an order ended) queues a tenant paced by what its last pass cost.
// The queue holds no store state and runs nothing: the loop (reconciler.ts) takes from it.
import type { Trace } from "../base/context.js";

/** Backoff of a tenant whose passes keep failing: base * 2^(failures-1), capped. */
export interface QueueBackoff {
  baseMs: number;
  maxMs: number;
}

const DEFAULT_BACKOFF: QueueBackoff = { baseMs: 200, maxMs: 30_000 };

/**
 * A paced add waits until the time since the tenant's last pass ended is this many times as long
 * as that pass took: passes asked by routine progress then use at most a third of the
 * controller's time, however fast orders end (a pass over a thousand nodes costs tens of ms; one
 * per finished order would keep the controller busy with nothing but passes).
 */
export const PACE_FACTOR = 2;

/** Tenants waiting for a pass, with the trace of the change that asked (none for sweeps and retries). */
export class TenantQueue {
  private readonly pending = new Map<string, Trace | undefined>();
  private all = false;
  private stopped = false;
  private readonly later = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private readonly failures = new Map<string, number>();
  // Per tenant, when its last pass ended and how long it took (real time, ms).
  private readonly lastPass = new Map<string, { endedAt: number; tookMs: number }>();
  // Tenants whose paced add waits for its time.
  private readonly paced = new Map<string, NodeJS.Timeout>();

  /** `onReady` is called (synchronously) whenever something was added. */
  constructor(
    private readonly onReady: () => void,
    private readonly backoff: QueueBackoff = DEFAULT_BACKOFF,
  ) {}

  /** Queues one tenant; the newest trace wins, an add without one keeps the queued trace. */
  add(tenantId: string, trace?: Trace): void {
    if (this.stopped || tenantId === "") return;
    clearTimeout(this.paced.get(tenantId));
    this.paced.delete(tenantId);
    this.pending.set(tenantId, trace ?? this.pending.get(tenantId));
    this.onReady();
  }

  /**
   * Queues a tenant for routine progress (an order of it ended): at once when its last pass was
   * long enough ago (PACE_FACTOR), else when it will have been.
   */
  addPaced(tenantId: string, trace?: Trace): void {
    if (this.stopped || tenantId === "" || this.pending.has(tenantId) || this.paced.has(tenantId)) return;
    const last = this.lastPass.get(tenantId);
    const wait = last ? last.endedAt + PACE_FACTOR * last.tookMs - Date.now() : 0;
    if (wait <= 0) {
      this.add(tenantId, trace);
      return;
    }
    const timer = setTimeout(() => {
      this.paced.delete(tenantId);
      this.add(tenantId, trace);
    }, wait);
    timer.unref();
    this.paced.set(tenantId, timer);
  }

  /** True while a paced add waits for its time (the work it stands for is not done yet). */
  get pacing(): boolean {
    return this.paced.size > 0;
  }

  /** Notes that a pass of the tenant ended at `endedAt` after `tookMs` (real time), for addPaced. */
  passed(tenantId: string, endedAt: number, tookMs: number): void {
    this.lastPass.set(tenantId, { endedAt, tookMs });
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
    this.lastPass.clear();
    for (const t of this.paced.values()) clearTimeout(t);
    this.paced.clear();
    for (const l of this.later.values()) clearTimeout(l.timer);
    this.later.clear();
    this.pending.clear();
    this.all = false;
  }
}
