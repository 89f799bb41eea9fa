// What service implementations depend on. Built once in wiring/service-deps.ts and passed to each factory.
import type { AgentVersions } from "../nodes/agent-versions.js";
import type { CredentialEnds } from "../auth/credential-ends.js";
import type { Store } from "../store/store.js";
import type { Coordination } from "../store/coordination.js";
import type { Logger } from "../../common/logging/logger.js";
import type { KeyedLock } from "../base/keyed-lock.js";
import type { SnapshotWriter } from "../snapshots/snapshot-writer.js";
import type { Reconciler } from "../reconcile/reconciler.js";
import type { ReconcileTriggers } from "../reconcile/triggers.js";
import type { TargetRecords } from "../reconcile/target-records.js";
import type { OrderFeed } from "../dispatch/order-feed.js";
import type { AgentSessions, SessionOnController } from "../dispatch/agent-session.js";
import type { RolloutRecords } from "../rollouts/rollout-records.js";
import type { PemPair } from "../tls/certificate-issuer.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";
import type { ControllerMetrics } from "../metrics/controller-metrics.js";
import type { PromotionTriggers } from "../promotion/promotion-triggers.js";
import type { GitSync } from "../promotion/git-sync.js";
import type { AgentBundles } from "../nodes/agent-bundles.js";

export interface ServiceDeps {
  store: Store;
  logger: Logger;
  /** Clock, replaceable in tests. */
  now: () => Date;
  /** When this controller process started. */
  startedAt: Date;
  /** Controller version reported by the health check. */
  version: string;
  /** Which controller leads among those sharing the store (the health check reports it). */
  coordination: Coordination;
  /** Serialises work per key across every controller on the store (idempotency keys). */
  locks: Pick<KeyedLock, "run">;
  /** Writes tenant and (coalesced) system snapshots after deployments finish. */
  snapshots: SnapshotWriter;
  /** Told of every heartbeat (node liveness is judged from them); `written`: the node is stored online. */
  onHeartbeat?: (nodeId: string, at: Date, intervalMs: number, written?: boolean) => void;
  /** Told of every agent session opening or ending here (a node on a session is online while it is open). */
  onSession?: (change: SessionOnController) => void;
  /** The last heartbeat this process saw from a node (the stored time may lag up to a minute). */
  lastHeartbeat?: (nodeId: string) => Date | undefined;
  /** Orders that became pending, for WatchWorkOrders streams. */
  feed: OrderFeed;
  /** The agents' open Session streams on this controller, one per node. */
  sessions: AgentSessions;
  /** Tells the streams a credential opened that it ended or changed (they then check it). */
  credentialEnds: CredentialEnds;
  /** How long a claim's lease lasts before it must be renewed. */
  leaseMs: number;
  /** The reconcile loop (Apply runs a pass now). */
  reconciler: Reconciler;
  /** What wakes the reconciler: told of every acknowledged change, order end and node report. */
  triggers: ReconcileTriggers;
  /** The owner of tenants' per-node target records (order outcomes and rollbacks write them). */
  records: TargetRecords;
  /** The owner of stored rollouts. */
  rollouts: RolloutRecords;
  /** The admin token is set by configuration (SKIPPER_ADMIN_TOKEN) and cannot be rotated through the API. */
  adminTokenFixed: boolean;
  /** The CA that signs enrolled nodes' certificates; undefined without TLS (enrollment refused). */
  clientCa?: PemPair;
  /** The keys that seal secrets at rest. */
  keyRing: SecretKeyRing;
  /** The controller's metrics (idempotency replays are counted here). */
  metrics: ControllerMetrics;
  /** What wakes the promotion loop (versions recorded, operators' decisions). */
  promotion: PromotionTriggers;
  /** Syncs a Git source now (SyncGitSource; the leader's loop syncs on each interval). */
  gitSync: GitSync;
  /** The agent bundle served to joining hosts, its signing key, the TLS pin and CA they use. */
  agentBundles: AgentBundles;
  /** The agent versions held (agent_version resources and their bytes under the data directory). */
  agentVersions: AgentVersions;
}
