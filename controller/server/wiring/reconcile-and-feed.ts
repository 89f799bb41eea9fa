// The reconciler, the feed that rings nodes' watch streams when it issues orders, and the
// triggers that wake it. Sharing a store, only the leader runs passes: the others send it their
// triggers, and relay the order notices to the streams they hold.
import type { Logger } from "../../../common/logging/logger.js";
import type { Store } from "../../store/store.js";
import type { Coordination } from "../../store/coordination.js";
import type { ControllerMetrics } from "../../metrics/controller-metrics.js";
import type { SnapshotWriter } from "../../snapshots/snapshot-writer.js";
import type { RolloutRecords } from "../../rollouts/rollout-records.js";
import { Reconciler } from "../../reconcile/reconciler.js";
import { ReconcileTriggers } from "../../reconcile/triggers.js";
import type { TargetRecords } from "../../reconcile/target-records.js";
import { OrderFeed } from "../../dispatch/order-feed.js";
import { leaderQueue, relayOrders } from "../cluster.js";

export interface ReconcileAndFeedDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  records: TargetRecords;
  rollouts: RolloutRecords;
  snapshots: SnapshotWriter;
  metrics: ControllerMetrics;
  coordination: Coordination;
  /** Whether this controller's loops run (a new leader drops triggers until they do). */
  loopsRunning: () => boolean;
  sweepIntervalMs?: number;
  maxWatchStreamsPerNode?: number;
  /** Told when a tenant's release record changed (the promotion loop's trigger). */
  onTenantRelease?: (tenantId: string, environmentIds: string[]) => void;
}

export interface ReconcileAndFeed {
  feed: OrderFeed;
  reconciler: Reconciler;
  triggers: ReconcileTriggers;
}

/** Builds the reconciler (not yet started: it is a leader's loop), its triggers and the order feed. */
export function reconcileAndFeed(deps: ReconcileAndFeedDeps): ReconcileAndFeed {
  const { store, coordination, snapshots } = deps;
  const feed = new OrderFeed(deps.maxWatchStreamsPerNode);
  const reconciler = new Reconciler({
    store,
    logger: deps.logger,
    now: deps.now,
    records: deps.records,
    rollouts: deps.rollouts,
    sweepIntervalMs: deps.sweepIntervalMs,
    metrics: deps.metrics,
    onOrderCreated: (o) => feed.publish(o),
    onServicesApplied: (tenantId, trace) => snapshots.afterChange(tenantId, trace),
    onTenantRelease: deps.onTenantRelease,
  });
  const triggers = new ReconcileTriggers(
    coordination.shared ? leaderQueue(coordination, reconciler.queue, deps.loopsRunning) : reconciler.queue,
  );
  if (coordination.shared) relayOrders(coordination, feed, store);
  return { feed, reconciler, triggers };
}
