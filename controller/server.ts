// build(): the controller's request handler (Connect + gRPC + gRPC-Web under /v1 and at the
// canonical gRPC paths, the REST routes derived from google.api.http, and GET /metrics), with no
// listening.
// listener.ts serve() puts the handler on a port.
// Tests use both with port 0; main.ts adds configuration and signals.
import type http from "node:http";
import type http2 from "node:http2";
import type { ConnectRouter, Interceptor, Transport } from "@connectrpc/connect";
import { createRouterTransport } from "@connectrpc/connect";
import type { DescService } from "@bufbuild/protobuf";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { HealthService } from "../gen/skipper/v1/health_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { SnapshotService } from "../gen/skipper/v1/snapshot_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { RolloutService } from "../gen/skipper/v1/rollout_service_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { AuditService } from "../gen/skipper/v1/audit_service_pb.js";
import { SecretService } from "../gen/skipper/v1/secret_service_pb.js";
import { secretService } from "./services/secret-service.js";
import { WebhookService } from "../gen/skipper/v1/webhook_service_pb.js";
import { webhookService } from "./services/webhook-service.js";
import { WebhookWorker, type WebhookSettings } from "./webhooks/webhook-worker.js";
import { auditService } from "./services/audit-service.js";
import { auditSigner } from "./audit/audit-signer.js";
import type { PemPair } from "./tls/certificate-issuer.js";
import { SecretKeyRing } from "./tls/secret-key-ring.js";
import type { Store } from "./store/store.js";
import { FileStore } from "./store/file/file-store.js";
import { sharedLock, soleCoordination, type Coordination } from "./store/coordination.js";
import { leaderQueue, relayCredentialEnds, relayHeartbeats, relayOrders } from "./cluster.js";
import { CredentialEnds } from "./auth/credential-ends.js";
import type { Logger } from "../common/logging/logger.js";
import { boundaryInterceptor } from "./interceptors.js";
import { admit } from "./auth/admission.js";
import { createAuthenticator } from "./auth/authenticator.js";
import { createRequestGate } from "./request-gate.js";
import { createRpcHandler } from "./rpc-handler.js";
import { BodyBudgets, DEFAULT_BODY_LIMITS } from "./body-limits.js";
import { hashToken, mintAdminToken } from "./auth/tokens.js";
import type { ServiceDeps } from "./services/deps.js";
import { healthService } from "./services/health-service.js";
import { resourceService } from "./services/resource-service.js";
import { workOrderService } from "./services/work-order-service.js";
import { nodeService } from "./services/node-service.js";
import { deploymentService } from "./services/deployment-service.js";
import { snapshotService } from "./services/snapshot-service.js";
import { eventService } from "./services/event-service.js";
import { rolloutService } from "./services/rollout-service.js";
import { accessService } from "./services/access-service.js";
import { enrollmentService } from "./services/enrollment-service.js";
import { refusalAuditor, type AuditSink } from "./auth/audit-policy.js";
import { RolloutRecords } from "./rollouts/rollout-records.js";
import { createRestHandler } from "./rest/rest-handler.js";
import { dashboardHandler, defaultDashboardDir } from "./dashboard.js";
import { recoverOrderOutcomes } from "./dispatch/order-outcome.js";
import { SnapshotWriter } from "./snapshots/snapshot-writer.js";
import { v4 as uuidv4 } from "uuid";
import { Reconciler } from "./reconcile/reconciler.js";
import { ReconcileTriggers } from "./reconcile/triggers.js";
import { TargetRecords } from "./reconcile/target-records.js";
import { failUnissuedDeployments } from "./reconcile/unissued-deployments.js";
import { LivenessMonitor } from "./nodes/node-liveness.js";
import { LeaseMonitor } from "./dispatch/lease-monitor.js";
import { HistoryRetention } from "./dispatch/history-retention.js";
import { OrderFeed } from "./dispatch/order-feed.js";
import { DEFAULT_LEASE_MS } from "./domain/work-order-transitions.js";
import { VERSION } from "./version.js";
import { ControllerMetrics } from "./metrics/controller-metrics.js";
import { meteredStore } from "./metrics/metered-store.js";
import { fleetCensus } from "./metrics/fleet-census.js";
import { createMetricsRoute } from "./metrics-route.js";

/** Every service the controller serves, in the order REST routes are listed. */
export const SERVICES: DescService[] = [
  HealthService,
  ResourceService,
  WorkOrderService,
  NodeService,
  DeploymentService,
  SnapshotService,
  EventService,
  RolloutService,
  AccessService,
  EnrollmentService,
  AuditService,
  SecretService,
  WebhookService,
];

const JSON_OPTIONS = { useProtoFieldName: true } as const;

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
  /** The built dashboard served under /ui/ (default: dist/ui beside the controller; false: none). */
  dashboardDir?: string | false;
  /** The keys that seal secrets at rest (default: loaded, or generated, under dataDir/tls). */
  keyRing?: SecretKeyRing;
  /** Pacing of webhook deliveries (webhooks/webhook-worker.ts; tests shorten the retry period). */
  webhooks?: Partial<WebhookSettings>;
  /** Serve GET /metrics without a credential (default: a credential holding READ over every tenant). */
  metricsOpen?: boolean;
  /** How long the fleet's gauges (nodes, tenants, rollouts, work orders) are kept between scrapes (default 5 s). */
  metricsCensusMs?: number;
}

export type RequestHandler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

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
  const logger = opts.logger;
  const backend =
    opts.store ??
    new FileStore(opts.dataDir, {
      onWarning: (msg: string, meta: object) => logger.warn({ action: "store", metadata: meta }, msg),
      onInfo: (msg: string, meta: object) => logger.info({ action: "store", result: "ok", metadata: meta }, msg),
    });
  await backend.open();
  const coordination = opts.coordination ?? soleCoordination();
  const metrics = new ControllerMetrics({ version: VERSION, backend: backend.backend, leading: () => coordination.leading });
  // Everything the controller writes goes through here: timed, with the work-order transitions
  // counted, whichever backend it is.
  const store = meteredStore(backend, metrics);
  // The admin token is either fixed by configuration or kept (hashed) in the store, where
  // RotateAdminToken replaces it; the authenticator reads the store's on every admin call.
  let generatedAdminToken: string | undefined;
  const fixedAdminHash = opts.adminToken === undefined ? undefined : hashToken(opts.adminToken);
  if (fixedAdminHash === undefined && (opts.resetAdminToken || !(await store.getAdminCredential()))) {
    generatedAdminToken = mintAdminToken();
    await store.putAdminCredential({ tokenHash: hashToken(generatedAdminToken), createdAt: new Date() });
  }
  const keyRing = opts.keyRing ?? (await SecretKeyRing.load({ dataDir: opts.dataDir }));
  const snapshots = new SnapshotWriter(store, logger);
  const now = opts.now ?? (() => new Date());
  // Tenants' records and idempotency keys are locked across every controller on the store.
  const locks = sharedLock(coordination);
  const records = new TargetRecords(store, locks);
  const rollouts = new RolloutRecords(store);
  // Replays what a stop interrupted. Alone on its store, a controller does it before it serves;
  // sharing one, the leader does when it takes over (the old leader's loops may have left work).
  const recover = async () => {
    const repaired = (await recoverOrderOutcomes({ store, snapshots, records })) + (await failUnissuedDeployments(store, now()));
    if (repaired > 0)
      logger.warn({ action: "recover", result: "ok", metadata: { repaired } }, "replayed interrupted work-order transitions");
    // In the background: it reads every tenant's latest snapshot, which start-up need not wait for
    // (a snapshot read waits for it instead).
    void snapshots
      .catchUp({ requestId: `startup-${uuidv4()}`, correlationId: "startup" })
      .then((owed) => {
        if (owed > 0) logger.info({ action: "recover", result: "ok", metadata: { snapshots: owed } }, "writing snapshots a stop left owed");
      })
      .catch((e: unknown) => logger.error({ action: "recover", result: "error", err: e }, "could not look for snapshots a stop left owed"));
  };
  if (!coordination.shared) await recover();

  const feed = new OrderFeed(opts.maxWatchStreamsPerNode);
  let liveness: LivenessMonitor | undefined;
  const reconciler = new Reconciler({
    store,
    logger,
    now,
    records,
    rollouts,
    sweepIntervalMs: opts.reconcileIntervalMs,
    metrics,
    onOrderCreated: (o) => feed.publish(o),
    onServicesApplied: (tenantId, trace) => snapshots.afterChange(tenantId, trace),
  });
  // Sharing a store, only the leader runs passes: the others send it their triggers.
  let loopsRunning = false;
  const triggers = new ReconcileTriggers(
    coordination.shared ? leaderQueue(coordination, reconciler.queue, () => loopsRunning) : reconciler.queue,
  );
  if (coordination.shared) relayOrders(coordination, feed, store);
  const credentialEnds = new CredentialEnds();
  if (coordination.shared) relayCredentialEnds(coordination, credentialEnds);
  const seen = (nodeId: string, at: Date, intervalMs: number) => liveness?.seen(nodeId, at, intervalMs);
  const deps: ServiceDeps = {
    store,
    logger,
    now,
    startedAt: new Date(),
    version: VERSION,
    coordination,
    locks,
    snapshots,
    reconciler,
    triggers,
    records,
    rollouts,
    leaseMs: opts.leaseMs ?? DEFAULT_LEASE_MS,
    feed,
    credentialEnds,
    onHeartbeat: coordination.shared ? relayHeartbeats(coordination, seen) : seen,
    lastHeartbeat: (nodeId) => liveness?.lastSeen(nodeId),
    adminTokenFixed: fixedAdminHash !== undefined,
    clientCa: opts.clientCa,
    keyRing,
    metrics,
  };
  const authenticator = createAuthenticator({ store, fixedAdminHash, now });
  // Every audited call's entry goes to the store's hash-chained trail before the call is answered.
  const audit: AuditSink = (entry) => store.appendAuditEntry(entry);
  const interceptors: Interceptor[] = [boundaryInterceptor({ authenticator, logger, store, audit, metrics })];
  const onRefused = refusalAuditor(audit);
  const signer = opts.tls ? auditSigner(opts.tls.key, opts.tls.cert) : undefined;
  const routes = (router: ConnectRouter) => {
    router.service(HealthService, healthService(deps));
    router.service(ResourceService, resourceService(deps));
    router.service(WorkOrderService, workOrderService(deps));
    router.service(NodeService, nodeService(deps));
    router.service(DeploymentService, deploymentService(deps));
    router.service(SnapshotService, snapshotService(deps));
    router.service(EventService, eventService(deps));
    router.service(RolloutService, rolloutService(deps));
    router.service(AccessService, accessService(deps));
    router.service(EnrollmentService, enrollmentService(deps));
    router.service(AuditService, auditService({ store, signer }));
    router.service(SecretService, secretService(deps));
    router.service(WebhookService, webhookService(deps));
  };
  const gate = createRequestGate({ authenticator, logger, onRefused, metrics });
  // One table of body limits and one set of budgets for every protocol (body-limits.ts).
  const budgets = opts.bodyBudgets ?? new BodyBudgets(withMaxRequestBytes(opts.maxRequestBytes));
  const readMaxBytes = budgets.limits.admitted.maxBytes;
  const rpc = createRpcHandler({
    routes,
    interceptors,
    jsonOptions: JSON_OPTIONS,
    readMaxBytes,
    budgets,
    gate,
    logger,
    metrics,
  });
  const transport = createRouterTransport(routes, {
    router: { interceptors, jsonOptions: JSON_OPTIONS, readMaxBytes },
  });
  const rest = createRestHandler({
    services: SERVICES,
    transport,
    budgets,
    logger,
    admit: (method, headers, peer) => admit(authenticator, method, headers, { onRefused: onRefused(method, headers), peer }),
    metrics,
  });
  metrics.countFleet(fleetCensus(store, { ttlMs: opts.metricsCensusMs }));
  const metricsRoute = createMetricsRoute({ metrics, authenticator, open: opts.metricsOpen ?? false, logger, audit });

  const dashboard = dashboardHandler(opts.dashboardDir === false ? undefined : (opts.dashboardDir ?? defaultDashboardDir()));
  const handler: RequestHandler = (req, res) => {
    if (metricsRoute(req, res)) return;
    // Connect, gRPC and gRPC-Web (rpc-handler.ts); the dashboard's files; the REST routes otherwise.
    if (rpc(req, res)) return;
    if (dashboard(req, res)) return;
    rest.handle(req, res).then(
      (handled: boolean) => {
        if (!handled) rest.unrouted(req, res, 404);
      },
      (err: unknown) => {
        logger.error({ action: "rest", result: "INTERNAL_ERROR", err }, "REST handler failed");
        if (!res.headersSent) rest.unrouted(req, res, 500);
      },
    );
  };
  liveness = new LivenessMonitor({ store, logger, now, onChange: () => triggers.nodesChanged(), everyMs: opts.livenessCheckMs });
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
  const webhooks = new WebhookWorker({ store, keyRing, logger, now, settings: opts.webhooks });
  let started = false;
  let leading: Promise<void> | undefined;
  // The singleton loops run where the coordination says this controller leads (always, alone).
  const lead = async () => {
    if (coordination.shared) {
      logger.info({ action: "leader", result: "ok", metadata: { controller_id: coordination.controllerId } }, "this controller now leads");
      await recover();
    }
    reconciler.start();
    loopsRunning = true;
    liveness?.start();
    leases.start();
    retention?.start();
    webhooks.start();
  };
  const stopLoops = async () => {
    loopsRunning = false;
    await webhooks.stop();
    await leases.stop();
    await retention?.stop();
    await liveness?.stop();
    await reconciler.stop();
  };
  const start = () => {
    if (started) return;
    started = true;
    void coordination
      .start((isLeader) => {
        if (isLeader) {
          leading = lead().catch((e: unknown) => {
            logger.error({ action: "leader", result: "error", err: e }, "could not take over the loops");
            opts.onLeadershipLost?.();
          });
          return;
        }
        // The store no longer knows this controller as the leader: another may start the loops.
        logger.error(
          { action: "leader", result: "error", metadata: { controller_id: coordination.controllerId } },
          "this controller lost leadership (its database session ended)",
        );
        void stopLoops().finally(() => opts.onLeadershipLost?.());
      })
      .catch((e: unknown) => logger.error({ action: "leader", result: "error", err: e }, "could not seek leadership"));
  };
  if (!opts.deferLoops) start();
  return {
    handler,
    transport,
    store,
    reconciler,
    generatedAdminToken,
    start,
    coordination,
    close: async () => {
      await leading?.catch(() => undefined);
      await stopLoops();
      await snapshots.flush();
      await coordination.close();
      await store.close();
    },
  };
}

// The default table, with the admitted cap an operator set (--max-request-bytes); a connection
// may always hold at least one full body.
function withMaxRequestBytes(maxBytes: number | undefined): typeof DEFAULT_BODY_LIMITS {
  if (maxBytes === undefined) return DEFAULT_BODY_LIMITS;
  const admitted = DEFAULT_BODY_LIMITS.admitted;
  return {
    ...DEFAULT_BODY_LIMITS,
    admitted: {
      ...admitted,
      maxBytes,
      perConnection: Math.max(admitted.perConnection, maxBytes),
      perAddress: Math.max(admitted.perAddress, maxBytes),
      total: Math.max(admitted.total, maxBytes),
    },
  };
}
