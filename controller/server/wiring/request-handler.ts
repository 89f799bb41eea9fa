// The request handler: GET /metrics, then Connect, gRPC and gRPC-Web (rpc-handler.ts), then the
// dashboard's files, then the REST routes; every call through the same interceptors, admitted by
// one request gate and held to one table of body limits.
import type http from "node:http";
import type http2 from "node:http2";
import { createRouterTransport, type Interceptor, type Transport } from "@connectrpc/connect";
import type { ServiceDeps } from "../../services/deps.js";
import { boundaryInterceptor } from "../../boundary/interceptors.js";
import { admit } from "../../auth/admission.js";
import { createAuthenticator } from "../../auth/authenticator.js";
import { refusalAuditor, type AuditSink } from "../../auth/audit-policy.js";
import { createRequestGate } from "../../boundary/request-gate.js";
import { createRpcHandler } from "../../boundary/rpc-handler.js";
import { BodyBudgets, DEFAULT_BODY_LIMITS } from "../../boundary/body-limits.js";
import { auditSigner } from "../../audit/audit-signer.js";
import { createRestHandler } from "../../boundary/rest/rest-handler.js";
import { dashboardHandler, defaultDashboardDir } from "../../boundary/dashboard.js";
import { fleetCensus } from "../../metrics/fleet-census.js";
import { createMetricsRoute } from "../../boundary/metrics-route.js";
import { createGitWebhookRoute } from "../../boundary/git-webhook-route.js";
import { createAgentBundleRoute } from "../../boundary/agent-bundle-route.js";
import { createAgentVersionRoute } from "../../boundary/agent-version-route.js";
import { AGENT_SERVICES, SERVICES, serviceRoutes } from "./routes.js";
import { NodeService } from "../../../gen/skipper/v1/node_service_pb.js";
import { agentSessionOpener } from "../../services/node-service.js";
import type { BuildOptions } from "./build-options.js";

export type RequestHandler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

const JSON_OPTIONS = { useProtoFieldName: true } as const;
// NodeService and WorkOrderService (what agents call, on the session too): a newer agent's fields are
// read as absent instead of refusing its heartbeats and results (routes.ts).
const AGENT_JSON_OPTIONS = { ...JSON_OPTIONS, ignoreUnknownFields: true } as const;

export type HandlerOptions = Pick<
  BuildOptions,
  "tls" | "bodyBudgets" | "maxRequestBytes" | "metricsCensusMs" | "metricsOpen" | "dashboardDir"
> & {
  /** The hash of the configured admin token; undefined when the store keeps it. */
  fixedAdminHash?: string;
};

/** The handler of every request, and the same services in memory (the REST routes call them through it). */
export function requestHandler(deps: ServiceDeps, opts: HandlerOptions): { handler: RequestHandler; transport: Transport } {
  const { store, logger, metrics, now } = deps;
  const authenticator = createAuthenticator({ store, fixedAdminHash: opts.fixedAdminHash, now, nodes: store });
  // Every audited call's entry goes to the store's hash-chained trail before the call is answered.
  const audit: AuditSink = (entry) => store.appendAuditEntry(entry);
  const boundary = { authenticator, logger, store, audit, metrics };
  const interceptors: Interceptor[] = [boundaryInterceptor(boundary)];
  const onRefused = refusalAuditor(audit);
  const signer = opts.tls ? auditSigner(opts.tls.key, opts.tls.cert) : undefined;
  const routes = serviceRoutes(deps, signer, AGENT_JSON_OPTIONS);
  const gate = createRequestGate({ authenticator, logger, onRefused, metrics });
  // One table of body limits and one set of budgets for every protocol (body-limits.ts).
  const budgets = opts.bodyBudgets ?? new BodyBudgets(withMaxRequestBytes(opts.maxRequestBytes));
  const readMaxBytes = budgets.limits.admitted.maxBytes;
  const rpc = createRpcHandler({
    routes,
    interceptors,
    jsonOptions: JSON_OPTIONS,
    lenientServices: AGENT_SERVICES,
    readMaxBytes,
    budgets,
    gate,
    logger,
    metrics,
    session: {
      method: NodeService.method.session,
      boundary,
      open: agentSessionOpener(deps),
      jsonOptions: AGENT_JSON_OPTIONS,
      readMaxBytes,
      budgets,
    },
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
  const gitWebhook = createGitWebhookRoute({
    store,
    keyRing: deps.keyRing,
    logger,
    sync: (id, ids) => {
      deps.gitSync
        .sync(id, { trace: { requestId: ids.requestId, correlationId: ids.correlationId } })
        .catch((err: unknown) =>
          logger.error(
            { action: "git_sync", result: "error", err, request_id: ids.requestId, metadata: { git_source: id } },
            "webhook sync failed",
          ),
        );
    },
  });
  const agentBundle = createAgentBundleRoute(deps.agentBundles, logger);
  const agentVersion = createAgentVersionRoute({ versions: deps.agentVersions, authenticator, logger, audit });
  const handler: RequestHandler = (req, res) => {
    if (metricsRoute(req, res)) return;
    if (agentBundle(req, res)) return;
    if (agentVersion(req, res)) return;
    if (gitWebhook(req, res)) return;
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
  return { handler, transport };
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
