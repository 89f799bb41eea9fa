// The reconcile loop: level-based, per tenant. It takes tenants from the queue (tenant-queue.ts),
// which triggers.ts fills from store, order and node events, and runs one pass for each
// (tenant-pass.ts) under the tenant's TargetRecords lock, so passes, order outcomes and rollbacks
// of one tenant never overlap. A periodic sweep queues every tenant; a pass that throws is
// queued again after a backoff; a pass whose verdict names a retry time is queued for then.
//
//   triggers -> queue -> drain: [sweep? read the world once] -> pass per tenant -> result
//                                                                   |-> ok: forget backoff, retry at verdict time
//                                                                   '-> error: add rate-limited
import type { Logger } from "../../common/logging/logger.js";
import type { Trace } from "../base/context.js";
import type { Store } from "../store/store.js";
import type { ControllerMetrics } from "../metrics/controller-metrics.js";
import { EnvironmentCache, NodeCache } from "./node-cache.js";
import { retryAtOf, TenantPass, type PassDeps, type PassOptions, type PassResult } from "./tenant-pass.js";
import { TenantQueue } from "./tenant-queue.js";
import { loadTenantWorld, loadWorld, type World } from "./world.js";

export interface ReconcilerDeps extends PassDeps {
  store: Store;
  logger: Logger;
  /** Periodic sweep interval (default 30 s); 0 disables the timer. */
  sweepIntervalMs?: number;
  /** Told how long each pass took. */
  metrics?: Pick<ControllerMetrics, "reconcilePassed">;
}

export class Reconciler {
  /** Tenants waiting for a pass; filled by triggers.ts (and the loop's own sweep and retries). */
  readonly queue: TenantQueue;
  private readonly passes: TenantPass;
  private draining: Promise<void> | undefined;
  private scheduled = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  // Every node, kept current by revision, for single-tenant passes (see node-cache.ts).
  private readonly nodeCache = new NodeCache();
  // Every environment likewise (a pass resolves the tenant's artifacts through them).
  private readonly environmentCache = new EnvironmentCache();

  constructor(private readonly deps: ReconcilerDeps) {
    this.queue = new TenantQueue(() => this.schedule());
    this.passes = new TenantPass(deps);
  }

  /** Starts the periodic sweep (and runs one now). */
  start(): void {
    const every = this.deps.sweepIntervalMs ?? 30_000;
    if (every > 0) this.timer = setInterval(() => this.queue.addAll(), every);
    this.timer?.unref();
    this.queue.addAll();
  }

  /** Stops the sweep and waits for the pass under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.queue.stop();
    await this.draining;
  }

  /** Resolves when the queue is empty and no paced pass waits for its time (tests and benchmarks). */
  async idle(): Promise<void> {
    for (;;) {
      if (this.draining || this.scheduled) await (this.draining ?? new Promise((r) => setImmediate(r)));
      else if (this.queue.pacing) await new Promise((r) => setTimeout(r, 1));
      else return;
    }
  }

  /** One pass for one tenant now (Apply), exclusive with its other passes and outcomes; `world` is re-read when not given. */
  async reconcileTenant(tenantId: string, opts: PassOptions = {}, given?: World): Promise<PassResult> {
    const result = await this.deps.records.exclusive(tenantId, async () => {
      const world = given ?? (await loadTenantWorld(this.deps.store, tenantId, this.nodeCache, this.environmentCache));
      if (given) await world.refreshInFlight(this.deps.store, tenantId);
      const started = performance.now();
      let passed: PassResult | undefined;
      try {
        passed = await this.passes.run(tenantId, opts, world);
        return passed;
      } finally {
        const ms = performance.now() - started;
        // Paced by what it cost to plan: the time spent issuing orders (a wave's start writes
        // hundreds) is work that the next pass will not repeat, and would hold it back for
        // twice as long for nothing.
        this.queue.passed(tenantId, Date.now(), Math.max(0, ms - (passed?.issuingMs ?? 0)));
        this.deps.metrics?.reconcilePassed(ms / 1000, passed !== undefined);
      }
    });
    this.queue.forget(tenantId);
    const retryAt = retryAtOf(result);
    if (retryAt !== undefined && !this.stopped) this.queue.addAt(tenantId, retryAt, this.deps.now().getTime());
    return result;
  }

  private schedule(): void {
    if (this.scheduled || this.stopped) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      // A running drain picks the queue up when it loops.
      if (this.draining) return;
      this.draining = this.drain().finally(() => {
        this.draining = undefined;
        if (!this.queue.empty) this.schedule();
      });
    });
  }

  private async drain(): Promise<void> {
    while (!this.stopped && !this.queue.empty) {
      const { sweep, tenants: queued } = this.queue.takeAll();
      try {
        // A sweep reads the world once; a change reads only what its tenant's pass needs.
        const world = sweep ? await loadWorld(this.deps.store) : undefined;
        const tenants = world ? [...new Set([...world.tenantIds(), ...queued.keys()])] : [...queued.keys()];
        // During a sweep, changes that arrive go first, between two tenants of the sweep, so a
        // thousand-tenant sweep does not hold them up; a tenant passed that way (with what it
        // reads fresh) is not passed again with the sweep's older world.
        const fresh = new Set<string>();
        for (const id of tenants) {
          if (world) await this.changesFirst(fresh);
          if (fresh.has(id)) continue;
          await this.passLogged(id, queued.get(id), world);
        }
      } catch (e) {
        this.deps.logger.error({ action: "reconcile", result: "error", err: e }, "could not read the world for a reconcile pass");
        // The tenants taken with the failed read come back after their backoff; the rest of the
        // fleet with the next sweep.
        for (const id of queued.keys()) this.queue.addRateLimited(id, this.deps.now().getTime());
      }
    }
  }

  // Lets requests in (the sweep's reads may all be answered from memory, never yielding), then
  // passes the tenants queued meanwhile.
  private async changesFirst(fresh: Set<string>): Promise<void> {
    await new Promise((r) => setImmediate(r));
    for (let next = this.queue.takeOne(); next && !this.stopped; next = this.queue.takeOne()) {
      fresh.add(next[0]);
      await this.passLogged(next[0], next[1]);
    }
  }

  // A pass that throws is queued again after a backoff instead of waiting for the next sweep.
  private async passLogged(id: string, trace: Trace | undefined, world?: World): Promise<void> {
    try {
      await this.reconcileTenant(id, { trace }, world);
    } catch (e) {
      const retryInMs = this.queue.addRateLimited(id, this.deps.now().getTime());
      this.deps.logger.error(
        {
          action: "reconcile",
          result: "error",
          tenant_id: id,
          err: e,
          metadata: { failures: this.queue.failuresOf(id), retry_in_ms: retryInMs },
        },
        "reconcile pass failed; retrying after a backoff",
      );
    }
  }
}
