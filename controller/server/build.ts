// build(): the controller's request handler (Connect + gRPC + gRPC-Web under /v1 and at the
// canonical gRPC paths, the REST routes derived from google.api.http, and GET /metrics), with no
// listening.
// listener.ts serve() puts the handler on a port.
// Tests use both with port 0; main.ts adds configuration and signals.
// Each step is a module of wiring/, named for what it does; build() calls them in order.
import type { Transport } from "@connectrpc/connect";
import type { Store } from "../store/store.js";
import { sharedLock, type Coordination } from "../store/coordination.js";
import { SecretKeyRing } from "../tls/secret-key-ring.js";
import { SnapshotWriter } from "../snapshots/snapshot-writer.js";
import type { Reconciler } from "../reconcile/reconciler.js";
import { TargetRecords } from "../reconcile/target-records.js";
import { RolloutRecords } from "../rollouts/rollout-records.js";
import type { LivenessMonitor } from "../nodes/node-liveness.js";
import { DEFAULT_LEASE_MS } from "../domain/work-order-transitions.js";
import type { BuildOptions } from "./wiring/build-options.js";
import { openStore } from "./wiring/open-store.js";
import { settleAdminToken } from "./wiring/admin-token.js";
import { startupRecovery } from "./wiring/recovery.js";
import { Leadership } from "./wiring/leadership.js";
import { reconcileAndFeed } from "./wiring/reconcile-and-feed.js";
import { serviceDeps } from "./wiring/service-deps.js";
import { requestHandler, type RequestHandler } from "./wiring/request-handler.js";
import { leaderLoops } from "./wiring/leader-loops.js";
import { PromotionTriggers } from "../promotion/promotion-triggers.js";
import { leaderPromotionQueue } from "./cluster.js";
import type { PromotionLoop } from "../promotion/promotion-loop.js";
import { GitSync } from "../promotion/git-sync.js";
import { agentBundlesOf } from "./wiring/agent-bundles.js";
import { AgentVersions } from "../nodes/agent-versions.js";

export type { BuildOptions } from "./wiring/build-options.js";
export type { RequestHandler } from "./wiring/request-handler.js";
export { SERVICES } from "./wiring/routes.js";

export interface Controller {
  handler: RequestHandler;
  /** Every service in memory, through the same interceptors (the REST routes use it; so do unit tests). */
  transport: Transport;
  store: Store;
  reconciler: Reconciler;
  /** Set only when this start minted a new admin token; print it once, never log it. */
  generatedAdminToken?: string;
  /** Starts the background loops, when build() was told to defer them (idempotent). */
  start(): void;
  /** Who leads among the controllers on this store (alone: this one). */
  coordination: Coordination;
  /** Closes the store. The server (if any) is closed by whoever listens. */
  close(): Promise<void>;
}

/** Opens the store, recovers interrupted transitions and returns the request handler. */
export async function build(opts: BuildOptions): Promise<Controller> {
  const { logger } = opts;
  const { store, coordination, metrics } = await openStore(opts);
  const { fixedAdminHash, generatedAdminToken } = await settleAdminToken(store, opts);
  const keyRing = opts.keyRing ?? (await SecretKeyRing.load({ dataDir: opts.dataDir }));
  const snapshots = new SnapshotWriter(store, logger);
  const now = opts.now ?? (() => new Date());
  // Tenants' records and idempotency keys are locked across every controller on the store.
  const locks = sharedLock(coordination);
  const records = new TargetRecords(store, locks);
  const rollouts = new RolloutRecords(store);
  const recover = startupRecovery({ store, snapshots, records, logger, now });
  if (!coordination.shared) await recover();

  const leadership = new Leadership({ coordination, logger, recover, onLeadershipLost: opts.onLeadershipLost });
  const parts = { store, logger, now, coordination, metrics, snapshots, locks, records, rollouts };
  // The promotion loop is the leader's: its triggers reach its queue while it runs here.
  let promotionLoop: PromotionLoop | undefined;
  const localPromotion = () => (leadership.running ? promotionLoop?.queue : undefined);
  const promotion = new PromotionTriggers(
    coordination.shared
      ? leaderPromotionQueue(
          coordination,
          () => promotionLoop?.queue,
          () => leadership.running,
        )
      : localPromotion,
  );
  const { feed, reconciler, triggers } = reconcileAndFeed({
    ...parts,
    onTenantRelease: (_tenant, environmentIds) => promotion.tenantRelease(environmentIds),
    loopsRunning: () => leadership.running,
    sweepIntervalMs: opts.reconcileIntervalMs,
    maxWatchStreamsPerNode: opts.maxWatchStreamsPerNode,
  });
  let liveness: LivenessMonitor | undefined;
  const agentBundles = await agentBundlesOf(opts);
  const deps = serviceDeps({
    agentBundles,
    agentVersions: new AgentVersions(store, opts.dataDir, agentBundles.signingKey, now),
    ...parts,
    reconciler,
    triggers,
    feed,
    keyRing,
    clientCa: opts.clientCa,
    leaseMs: opts.leaseMs ?? DEFAULT_LEASE_MS,
    adminTokenFixed: fixedAdminHash !== undefined,
    liveness: () => liveness,
    promotion,
    gitSync: new GitSync({
      store,
      logger,
      now,
      locks,
      dataDir: opts.dataDir,
      allowFileUrls: opts.allowGitFileUrls ?? false,
      keyRing,
      changed: (r) => triggers.resourceChanged(r),
      dataNodes: (r) => records.nodesRunning(r),
    }),
  });
  triggers.watch(promotion);
  const { handler, transport } = requestHandler(deps, { ...opts, fixedAdminHash });
  const leader = leaderLoops(deps, opts);
  liveness = leader.liveness;
  promotionLoop = leader.promotion;
  leadership.runs(leader.loops);
  if (!opts.deferLoops) leadership.start();
  return {
    handler,
    transport,
    store,
    reconciler,
    generatedAdminToken,
    start: () => leadership.start(),
    coordination,
    close: async () => {
      deps.closeRelays();
      await leadership.stop();
      await snapshots.flush();
      await coordination.close();
      await store.close();
    },
  };
}
