// What build() is told: where the data lives, the clock, the loops' periods, the limits at the
// boundary, and the parts tests replace (store, coordination, key ring).
import type { Logger } from "../../../common/logging/logger.js";
import type { BodyBudgets } from "../../boundary/body-limits.js";
import type { Coordination } from "../../store/coordination.js";
import type { Store } from "../../store/store.js";
import type { PemPair } from "../../tls/certificate-issuer.js";
import type { SecretKeyRing } from "../../tls/secret-key-ring.js";
import type { WebhookSettings } from "../../webhooks/webhook-worker.js";

export interface BuildOptions {
  dataDir: string;
  logger: Logger;
  /** The admin token; when absent one is read from (or minted into) the store. */
  adminToken?: string;
  /** Mint a new admin token even if one is stored (only without adminToken). */
  resetAdminToken?: boolean;
  /** Defaults to a FileStore on dataDir. */
  store?: Store;
  now?: () => Date;
  /** Period of the reconcile sweep (default 30 s). */
  reconcileIntervalMs?: number;
  /** Period of the promotion loop's sweep (default 30 s). */
  promotionIntervalMs?: number;
  /** Period of the process reconciler's sweep (default 5 s); its backoff starts at twice that. */
  processIntervalMs?: number;
  /** How often node liveness is checked (default 1 s). */
  livenessCheckMs?: number;
  /** Lease of a work-order claim (default 30 s); lapsed leases are checked every second. */
  leaseMs?: number;
  /** Events older than this are deleted (hourly); 0 or unset keeps them. */
  eventRetentionMs?: number;
  /** Finished work orders older than this and no longer in use are deleted (hourly); 0 or unset keeps them. */
  workOrderRetentionMs?: number;
  /** Whole days of the audit trail older than this are deleted (hourly); 0 or unset keeps them. */
  auditRetentionMs?: number;
  /** Largest request body of an admitted call (default 4 MiB). */
  maxRequestBytes?: number;
  /** The budgets of request bodies (default: DEFAULT_BODY_LIMITS with maxRequestBytes); tests pass small ones. */
  bodyBudgets?: BodyBudgets;
  /** Work-order watch streams one node may hold (default 4; 0: no cap). */
  maxWatchStreamsPerNode?: number;
  /**
   * Leave the background loops (reconcile sweep, node liveness, leases, retention) to start();
   * main calls it once it listens, so their first rounds do not hold up the listen.
   */
  deferLoops?: boolean;
  /** Leadership among controllers sharing the store (default: alone, always leading). */
  coordination?: Coordination;
  /** This controller stopped leading (its loops are stopped): main exits, to start afresh. */
  onLeadershipLost?: () => void;
  /** The CA that signs enrolled nodes' client certificates (tls/client-ca.ts); none: no enrollment. */
  clientCa?: PemPair;
  /** The controller's TLS certificate and key: audit exports are signed with them. */
  tls?: PemPair;
  /** The agent bundle served to joining hosts (default: dist/skippy.mjs beside the controller, if built; false: none). */
  agentBundle?: string | false;
  /** The operator's Ed25519 key that signs agent bundles (default: tls/agent-signing.key, made once). */
  agentSigningKey?: string;
  /** The CA that signed the served certificate (PEM), handed to joining hosts; none for an operator's certificate. */
  tlsCaPem?: string;
  /** The built dashboard served under /ui/ (default: dist/ui beside the controller; false: none). */
  dashboardDir?: string | false;
  /** The keys that seal secrets at rest (default: loaded, or generated, under dataDir/tls). */
  keyRing?: SecretKeyRing;
  /** Pacing of webhook deliveries (webhooks/webhook-worker.ts; tests shorten the retry period). */
  webhooks?: Partial<WebhookSettings>;
  /** Serve GET /metrics without a credential (default: a credential holding READ over every tenant). */
  metricsOpen?: boolean;
  /** Let Git sources use file:// URLs (a repository on the controller's host; tests). */
  allowGitFileUrls?: boolean;
  /** PEM of one more CA for registries over https (--registry-ca-file's text; Node's CAs stay trusted). */
  registryCaPem?: string;
  /** How long the fleet's gauges (nodes, tenants, rollouts, work orders) are kept between scrapes (default 5 s). */
  metricsCensusMs?: number;
}
