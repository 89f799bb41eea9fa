// The loops only the leader runs, in the order they start: reconcile sweeps and passes, node
// liveness, lapsed leases and due retries, retention of history (when any is configured),
// webhook deliveries, Git sources synced on their intervals, and artifacts' registries watched.
import type { ServiceDeps } from "../../services/deps.js";
import { LivenessMonitor } from "../../nodes/node-liveness.js";
import { LeaseMonitor } from "../../dispatch/lease-monitor.js";
import { HistoryRetention } from "../../dispatch/history-retention.js";
import { WebhookWorker } from "../../webhooks/webhook-worker.js";
import { GitSyncLoop } from "../../promotion/git-sync-loop.js";
import { registryWatchLoop } from "../../promotion/registry-watch-loop.js";
import type { BuildOptions } from "./build-options.js";
import type { LeaderLoop } from "./leadership.js";
import { PromotionLoop } from "../../promotion/promotion-loop.js";
import { runEnvironmentPass } from "../../promotion/environment-pass.js";
import { EnvironmentRecords } from "../../delivery/environment-records.js";
import { ProcessLoop } from "../../reconcile/process-loop.js";
import { queueControllerOrder } from "../../dispatch/queue-order.js";
import { PassLoop } from "../../reconcile/pass-loop.js";
import { runAgentUpdatePass } from "../../reconcile/agent-update-pass.js";

export type LoopOptions = Pick<
  BuildOptions,
  | "livenessCheckMs"
  | "eventRetentionMs"
  | "workOrderRetentionMs"
  | "auditRetentionMs"
  | "webhooks"
  | "promotionIntervalMs"
  | "processIntervalMs"
  | "registryCaPem"
>;

/** Builds the leader's loops (none started); `liveness` also judges the heartbeats this controller stores. */
export function leaderLoops(
  deps: ServiceDeps,
  opts: LoopOptions,
): { liveness: LivenessMonitor; promotion: PromotionLoop; loops: Array<LeaderLoop | undefined> } {
  const { store, logger, now, snapshots, records, feed, triggers, keyRing } = deps;
  const liveness = new LivenessMonitor({
    store,
    logger,
    now,
    onChange: () => triggers.nodesChanged(),
    everyMs: opts.livenessCheckMs,
    controllerId: deps.coordination.controllerId,
  });
  const leaseCheckMs = Math.min(1000, Math.max(50, Math.floor(deps.leaseMs / 4)));
  const leases = new LeaseMonitor({ store, logger, now, snapshots, records, feed, triggers, leaseMs: deps.leaseMs, everyMs: leaseCheckMs });
  const history = new HistoryRetention({
    store,
    logger,
    now,
    eventRetentionMs: opts.eventRetentionMs ?? 0,
    workOrderRetentionMs: opts.workOrderRetentionMs ?? 0,
    auditRetentionMs: opts.auditRetentionMs ?? 0,
  });
  const retention = history.enabled ? history : undefined;
  const webhooks = new WebhookWorker({ store, keyRing, logger, now, feed, settings: opts.webhooks });
  // An agent's attempt waits for its order's end: told at once when it ends on this controller.
  triggers.watch({ orderEnded: (o) => webhooks.orderEnded(o) });
  const environments = new EnvironmentRecords(store, now);
  const promotion = new PromotionLoop({
    store,
    logger,
    now,
    sweepIntervalMs: opts.promotionIntervalMs,
    passed: (seconds, ok) => deps.metrics.promotionPassed(seconds, ok),
    pass: (id, trace) =>
      runEnvironmentPass(
        {
          logger,
          now,
          records: environments,
          orders: { store, now, records, feed },
          wakeTenants: (ids, t) => triggers.environmentChanged(ids, t),
          written: () => deps.promotion.environmentWritten(),
          acted: (action) => deps.metrics.promotionActed(action),
          waiting: (env, n) => deps.metrics.versionsWaiting(env, n),
        },
        id,
        trace,
      ),
  });
  const gitSyncs = new GitSyncLoop({ store, logger, now, sync: deps.gitSync });
  return {
    liveness,
    promotion,
    loops: [
      deps.reconciler,
      liveness,
      leases,
      retention,
      webhooks,
      promotion,
      gitSyncs,
      registryWatchLoop(deps, opts),
      processLoop(deps, opts),
      agentUpdateLoop(deps, opts),
    ],
  };
}

// Process resources' reconciler: woken by a change of one and by the end of one of its orders
// (ids prc-...), else on its sweep.
function processLoop(deps: ServiceDeps, opts: LoopOptions): ProcessLoop {
  const { store, logger, now, records, feed } = deps;
  const sweepMs = opts.processIntervalMs ?? 5000;
  const loop = new ProcessLoop({
    store,
    logger,
    now,
    sweepMs,
    backoffMs: 2 * sweepMs,
    backoffCapMs: 300_000,
    queueOrder: (req, trace, id) => queueControllerOrder({ store, now, records, feed }, req, trace, id),
  });
  deps.triggers.watch({
    resourceChanged: (r) => {
      if (r.resourceType === "process") loop.wake();
    },
    orderEnded: (o) => {
      if (o.id.startsWith("prc-")) loop.wake();
    },
  });
  return loop;
}

// Agent updates' reconciler (agent_update resources rolled out as rollouts of tenant ""): woken by
// a change of an update, of a version, of a node (its agent reports another version or updater
// state), by the end of one of its orders (ids agu-/agr-), by a command on one of its rollouts
// (RolloutService wakes tenant ""), else on the process sweep.
function agentUpdateLoop(deps: ServiceDeps, opts: LoopOptions): PassLoop {
  const { store, logger, now, records, feed } = deps;
  const loop = new PassLoop({
    action: "agent_update",
    logger,
    now,
    sweepMs: opts.processIntervalMs ?? 5000,
    pass: () =>
      runAgentUpdatePass({
        store,
        logger,
        now,
        rollouts: deps.rollouts,
        versions: deps.agentVersions,
        exclusive: (fn) => records.exclusive("", fn),
        queueOrder: (req, trace, id) => queueControllerOrder({ store, now, records, feed }, req, trace, id),
      }),
  });
  deps.triggers.watch({
    resourceChanged: (r) => {
      if (r.resourceType === "agent_update" || r.resourceType === "agent_version") loop.wake();
    },
    orderEnded: (o) => {
      if (o.id.startsWith("agu-") || o.id.startsWith("agr-")) loop.wake();
    },
    rolloutChanged: (tenantId) => {
      if (tenantId === "") loop.wake();
    },
    nodesChanged: () => loop.wake(),
  });
  return loop;
}
