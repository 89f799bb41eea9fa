// GET /metrics: the controller's metrics in Prometheus' text format, on the API's own listener.
//
// Who may scrape: a credential that holds READ over every tenant, that is the admin token or an
// API key of any role with no tenant scope (a viewer key is the one to give Prometheus, as
// `Authorization: Bearer skk_...`). Not a node (nodes do not hold READ), nor a key limited to some
// tenants: the counts cover them all. With `open` (--metrics-open) anyone who reaches the port may
// scrape, for networks where only Prometheus can. A caller is admitted from its headers before
// anything else; a refusal is answered with the REST envelope, and one of an authenticated caller
// (FORBIDDEN) is audited, as for any call.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { Permission } from "../../gen/skipper/v1/access_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import type { Principal } from "../base/context.js";
import { forbidden, invalid, isSkipperError, type SkipperError } from "../base/errors.js";
import { httpStatusOf } from "./api-errors.js";
import { authorize } from "../auth/admission.js";
import type { Authenticator } from "../auth/authenticator.js";
import { routeRefusalEntry, type AuditSink } from "../auth/audit-policy.js";
import { isUnrestricted } from "../auth/tenant-access.js";
import type { ControllerMetrics } from "../metrics/controller-metrics.js";
import { peerCertificateOf } from "../tls/peer-certificate.js";
import { headerReaderOf, stopReading } from "./request-gate.js";
import { envelope, type TraceIds } from "./rest/envelope.js";
import { send, traceIdsOf } from "./rest/rest-handler.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

/** Where the metrics are served. */
export const METRICS_PATH = "/metrics";

export interface MetricsRouteOptions {
  metrics: Pick<ControllerMetrics, "exposition">;
  authenticator: Authenticator;
  /** Serve without a credential (--metrics-open). */
  open: boolean;
  logger: Logger;
  /** Where the refusals of authenticated callers are recorded. */
  audit?: AuditSink;
}

/** Serves GET /metrics; returns false (and does nothing) for any other path. */
export type MetricsRoute = (req: Request, res: Response) => boolean;

export function createMetricsRoute(opts: MetricsRouteOptions): MetricsRoute {
  return (req, res) => {
    if ((req.url ?? "/").split("?")[0] !== METRICS_PATH) return false;
    const ids = traceIdsOf(req.headers);
    serve(opts, req, res, ids).catch((err: unknown) => {
      opts.logger.error({ action: "metrics", result: "INTERNAL_ERROR", err, request_id: ids.requestId }, "could not serve the metrics");
      if (!res.headersSent) send(res, 500, ids, envelope(ids, null, { code: "INTERNAL_ERROR", message: "internal error", details: {} }));
    });
    return true;
  };
}

async function serve(opts: MetricsRouteOptions, req: Request, res: Response, ids: TraceIds): Promise<void> {
  const method = (req.method ?? "GET").toUpperCase();
  if (method !== "GET" && method !== "HEAD") {
    const e = invalid(`${method} is not allowed on ${METRICS_PATH}; use GET`, { allow: ["GET", "HEAD"] });
    return refuse(opts, req, res, ids, 405, e, { allow: "GET, HEAD" });
  }
  if (!opts.open) {
    try {
      await admitScraper(opts, req, ids);
    } catch (e) {
      if (!isSkipperError(e)) throw e;
      return refuse(opts, req, res, ids, httpStatusOf(e.code), e);
    }
  }
  const { contentType, text } = await opts.metrics.exposition();
  res.statusCode = 200;
  res.setHeader("content-type", contentType);
  res.setHeader("cache-control", "no-store");
  res.setHeader("x-request-id", ids.requestId);
  if (method === "HEAD") res.end();
  else res.end(text);
}

// Logs the refusal and answers it with the envelope, without reading the request's body.
function refuse(
  opts: MetricsRouteOptions,
  req: Request,
  res: Response,
  ids: TraceIds,
  status: number,
  e: SkipperError,
  headers: Record<string, string> = {},
): void {
  opts.logger.info(
    { action: "metrics", result: e.code, request_id: ids.requestId, correlation_id: ids.correlationId, metadata: e.details },
    `metrics scrape refused: ${e.message}`,
  );
  stopReading(req, res);
  send(res, status, ids, envelope(ids, null, { code: e.code, message: e.message, details: { ...e.details } }), headers);
}

/** The caller, when it may scrape; throws UNAUTHORIZED or FORBIDDEN (audited) otherwise. */
async function admitScraper(opts: MetricsRouteOptions, req: Request, ids: TraceIds): Promise<Principal> {
  const principal = await opts.authenticator.authenticate(headerReaderOf(req.headers), peerCertificateOf(req));
  try {
    authorize(Permission.READ, principal);
    if (!isUnrestricted(principal))
      throw forbidden(
        "the metrics count every tenant: they need a credential whose scope is every tenant; the caller's is limited to some",
        {
          scope: "tenants",
        },
      );
  } catch (e) {
    if (isSkipperError(e) && e.code === "FORBIDDEN" && opts.audit)
      await opts.audit(routeRefusalEntry(`GET ${METRICS_PATH}`, principal, { ...ids, outcome: e.code }));
    throw e;
  }
  return principal;
}
