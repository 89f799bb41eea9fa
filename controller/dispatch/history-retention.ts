// History is kept for a retention period and then deleted, from disk and from listings, by an
// hourly job (its first round a minute after start): events (--event-retention, default 30 days)
// and finished work orders with their deployments (--work-order-retention, default 30 days), and
// whole days of the audit trail (--audit-retention, default 365 days; the chain stays checkable
// from the oldest day kept), and webhook deliveries sent or dead-lettered (with the events).
// Without it a controller that runs for months would keep every heartbeat event, and every order
// and deployment it ever made, on disk for ever. Orders and deployments still in use are kept
// whatever their age (dispatch/orders-in-use.ts).
import type { Logger } from "../../common/logging/logger.js";
import { Periodic } from "../base/periodic.js";
import type { Store } from "../store/store.js";
import { historyInUse } from "./orders-in-use.js";

const EVERY_MS = 60 * 60 * 1000;
// The first round waits this long after start: it reads every finished order and deployment,
// and at start that work would hold up the first requests (and recovery) for nothing urgent.
const FIRST_AFTER_MS = 60 * 1000;

export interface RetentionSettings {
  store: Store;
  logger: Logger;
  now: () => Date;
  /** 0 keeps events for ever. */
  eventRetentionMs: number;
  /** 0 keeps finished work orders for ever. */
  workOrderRetentionMs: number;
  /** 0 (or unset) keeps the audit trail for ever. */
  auditRetentionMs?: number;
  everyMs?: number;
  /** Delay of the first round after start (default one minute). */
  firstAfterMs?: number;
}

export class HistoryRetention {
  private readonly periodic: Periodic;
  private first: NodeJS.Timeout | undefined;
  private firstRound: Promise<unknown> | undefined;

  constructor(private readonly deps: RetentionSettings) {
    this.periodic = new Periodic(
      () => this.prune(),
      deps.everyMs ?? EVERY_MS,
      (err) => deps.logger.error({ action: "history_retention", result: "error", err }, "history pruning failed; trying again"),
    );
  }

  /** Whether there is anything to prune at all. */
  get enabled(): boolean {
    return this.deps.eventRetentionMs > 0 || this.deps.workOrderRetentionMs > 0 || (this.deps.auditRetentionMs ?? 0) > 0;
  }

  /** Prunes once a minute after start, then every hour. */
  start(): void {
    this.first = setTimeout(() => {
      this.firstRound = this.prune();
    }, this.deps.firstAfterMs ?? FIRST_AFTER_MS);
    this.first.unref();
    this.periodic.start();
  }

  async stop(): Promise<void> {
    clearTimeout(this.first);
    await this.firstRound;
    await this.periodic.stop();
  }

  /** One round; returns how many events, orders, deployments, audit entries and webhook deliveries it deleted. */
  async prune(): Promise<{ events: number; workOrders: number; deployments: number; audit: number; webhookDeliveries: number }> {
    const { store, eventRetentionMs, workOrderRetentionMs } = this.deps;
    const auditRetentionMs = this.deps.auditRetentionMs ?? 0;
    const events =
      eventRetentionMs > 0 ? await this.round("event_retention", "event(s)", eventRetentionMs, (before) => store.pruneEvents(before)) : 0;
    let deployments = 0;
    const workOrders =
      workOrderRetentionMs > 0
        ? await this.round("work_order_retention", "finished work order(s)", workOrderRetentionMs, async (before) => {
            const keep = await historyInUse(store);
            const n = await store.pruneWorkOrders(before, keep.orders);
            deployments = await store.pruneDeployments(before, keep.deployments);
            if (deployments > 0)
              this.deps.logger.info(
                { action: "deployment_retention", result: "ok", metadata: { pruned: deployments, before: before.toISOString() } },
                `${deployments} finished deployment(s) older than the retention deleted`,
              );
            return n;
          })
        : 0;
    const audit =
      auditRetentionMs > 0
        ? await this.round("audit_retention", "audit entries", auditRetentionMs, (before) => store.pruneAuditEntries(before))
        : 0;
    // Sent and dead-lettered webhook deliveries carry their event: they go with the events.
    const webhookDeliveries =
      eventRetentionMs > 0
        ? await this.round("webhook_delivery_retention", "finished webhook deliveries", eventRetentionMs, (before) =>
            store.pruneWebhookDeliveries(before),
          )
        : 0;
    return { events, workOrders, deployments, audit, webhookDeliveries };
  }

  private async round(action: string, what: string, retentionMs: number, prune: (before: Date) => Promise<number>): Promise<number> {
    const before = new Date(this.deps.now().getTime() - retentionMs);
    try {
      const n = await prune(before);
      if (n > 0)
        this.deps.logger.info(
          { action, result: "ok", metadata: { pruned: n, before: before.toISOString() } },
          `${n} ${what} older than the retention deleted`,
        );
      return n;
    } catch (e) {
      this.deps.logger.error({ action, result: "error", err: e }, `could not delete old ${what}`);
      return 0;
    }
  }
}
