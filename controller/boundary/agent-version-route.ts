// /v1/agent-versions/{version}/skippy.mjs: the bytes of the agent versions the controller holds.
//   PUT  (ADMIN)          adds the bundle in the body as agent version {version}: the controller
//                         checks the version it states, stores the bytes, signs the manifest and
//                         writes the agent_version resource (nodes/agent-versions.ts). 201 when
//                         added, 200 when the same bytes were already held (a retry); the
//                         resource in the envelope. ?notes=... is kept with it.
//   GET  (READ or NODE)   the bytes, with the manifest in x-skipper-agent-{version,sha256,size,
//                         signature} headers: what an agent downloads for an update_agent order.
// Plain HTTPS like the agent bundle route (a bundle of a few MiB is not an RPC message: it would not
// fit the admitted body cap as JSON, and it is fetched as a file), behind the same credentials and
// permissions as the API; the manifest and the list are the agent_version resources.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { toJson } from "@bufbuild/protobuf";
import { Permission } from "../../gen/skipper/v1/access_pb.js";
import { ResourceSchema } from "../../gen/skipper/v1/resource_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import type { Principal } from "../base/context.js";
import { invalid, isSkipperError, type SkipperError } from "../base/errors.js";
import { authorize } from "../auth/admission.js";
import type { Authenticator } from "../auth/authenticator.js";
import { routeRefusalEntry, type AuditSink } from "../auth/audit-policy.js";
import { MAX_BUNDLE_BYTES, type AgentVersions } from "../nodes/agent-versions.js";
import { peerCertificateOf } from "../tls/peer-certificate.js";
import { httpStatusOf } from "./api-errors.js";
import { headerReaderOf, stopReading } from "./request-gate.js";
import { envelope, type TraceIds } from "./rest/envelope.js";
import { decodeSegment } from "./rest/path-template.js";
import { readBodyBytes } from "./rest/read-body.js";
import { send, traceIdsOf } from "./rest/rest-handler.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

const PATH = /^\/v1\/agent-versions\/([^/?]+)\/skippy\.mjs$/;
/** An upload of the largest bundle at 10 Mbit/s. */
const BODY_DEADLINE_MS = 60_000;

export interface AgentVersionRouteOptions {
  versions: AgentVersions;
  authenticator: Authenticator;
  logger: Logger;
  audit?: AuditSink;
}

/** Serves the route; false (nothing done) for any other path. */
export function createAgentVersionRoute(opts: AgentVersionRouteOptions): (req: Request, res: Response) => boolean {
  return (req, res) => {
    const m = PATH.exec((req.url ?? "/").split("?")[0] ?? "");
    if (!m) return false;
    const ids = traceIdsOf(req.headers);
    serve(opts, m[1]!, req, res, ids).catch((e: unknown) => {
      if (!isSkipperError(e)) {
        opts.logger.error(
          { action: "agent_version", result: "INTERNAL_ERROR", err: e, request_id: ids.requestId },
          "agent version route failed",
        );
        if (!res.headersSent) send(res, 500, ids, envelope(ids, null, { code: "INTERNAL_ERROR", message: "internal error", details: {} }));
        return;
      }
      refuse(opts, req, res, ids, e);
    });
    return true;
  };
}

async function serve(opts: AgentVersionRouteOptions, raw: string, req: Request, res: Response, ids: TraceIds): Promise<void> {
  const version = decodeSegment(raw);
  if (version === undefined) throw invalid("the version in the path is not a valid percent-encoded segment", { field: "version" });
  const method = (req.method ?? "GET").toUpperCase();
  if (method !== "GET" && method !== "HEAD" && method !== "PUT")
    throw Object.assign(invalid(`${method} is not allowed here; use GET or PUT`, { allow: ["GET", "HEAD", "PUT"] }), { status: 405 });
  const principal = await opts.authenticator.authenticate(headerReaderOf(req.headers), peerCertificateOf(req));
  const route = `${method === "PUT" ? "PUT" : "GET"} /v1/agent-versions/{version}/skippy.mjs`;
  try {
    authorize(method === "PUT" ? Permission.ADMIN : Permission.READ_OR_NODE, principal);
  } catch (e) {
    if (isSkipperError(e) && e.code === "FORBIDDEN" && opts.audit)
      await opts.audit(routeRefusalEntry(route, principal, { ...ids, outcome: e.code }));
    throw e;
  }
  if (method === "PUT") return upload(opts, version, req, res, ids, principal, route);
  const { spec, bytes } = await opts.versions.bytesOf(version);
  res.writeHead(200, {
    "content-type": "text/javascript; charset=utf-8",
    "content-length": String(bytes.length),
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    "x-request-id": ids.requestId,
    "x-skipper-agent-version": spec.version,
    "x-skipper-agent-sha256": spec.sha256,
    "x-skipper-agent-size": String(spec.size),
    "x-skipper-agent-signature": spec.signature,
  });
  if (method === "HEAD") res.end();
  else res.end(bytes);
  opts.logger.info(
    { action: "agent_version_download", result: "ok", request_id: ids.requestId, metadata: { version, caller: principal.kind } },
    `agent version ${version} downloaded`,
  );
}

async function upload(
  opts: AgentVersionRouteOptions,
  version: string,
  req: Request,
  res: Response,
  ids: TraceIds,
  principal: Principal,
  route: string,
): Promise<void> {
  const notes = new URL(req.url ?? "/", "http://x").searchParams.get("notes") ?? "";
  const bytes = await readBodyBytes(req, MAX_BUNDLE_BYTES, { deadlineMs: BODY_DEADLINE_MS }).catch(() => {
    throw invalid(`the bundle must arrive whole within ${BODY_DEADLINE_MS / 1000} s and be at most ${MAX_BUNDLE_BYTES} bytes`, {
      field: "body",
    });
  });
  const trace = { requestId: ids.requestId, correlationId: ids.correlationId };
  const { resource, added } = await opts.versions.add(version, bytes, notes, trace);
  if (opts.audit) await opts.audit(routeRefusalEntry(route, principal, { ...ids, outcome: added ? "OK" : "OK_UNCHANGED" }));
  opts.logger.info(
    {
      action: "agent_version_added",
      result: added ? "ok" : "unchanged",
      request_id: ids.requestId,
      metadata: { version, size: bytes.length },
    },
    added ? `agent version ${version} added` : `agent version ${version} already held with these bytes`,
  );
  send(res, added ? 201 : 200, ids, envelope(ids, { resource: toJson(ResourceSchema, resource) }, null));
}

function refuse(opts: AgentVersionRouteOptions, req: Request, res: Response, ids: TraceIds, e: SkipperError): void {
  const status = (e as SkipperError & { status?: number }).status ?? httpStatusOf(e.code);
  opts.logger.info(
    { action: "agent_version", result: e.code, request_id: ids.requestId, correlation_id: ids.correlationId, metadata: e.details },
    `agent version request refused: ${e.message}`,
  );
  stopReading(req, res);
  if (!res.headersSent) send(res, status, ids, envelope(ids, null, { code: e.code, message: e.message, details: { ...e.details } }));
}
