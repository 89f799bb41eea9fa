// The REST entry point. A request flows:
//   match the route (route-table.ts) -> read the body (read-body.ts) -> build the request message
//   (request-binding.ts) -> call the RPC through the Connect transport -> write the envelope
//   (envelope.ts).
// The transport is the same router, with the same interceptors, that serves Connect and gRPC, so
// auth, request ids, logging and error mapping behave identically on every protocol; this layer
// only translates HTTP <-> messages. Paths outside the table and outside /v1 and /health are left
// to the caller (handle() returns false).
import { randomUUID } from "node:crypto";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import type { PeerCertificate, Principal } from "../../base/context.js";
import { ADMITTED_HEADER, park, release } from "./admitted-calls.js";
import { peerCertificateOf } from "../../tls/peer-certificate.js";
import { isSkipperError, type ErrorCode } from "../../base/errors.js";
import { isValidTraceId } from "../../../common/ids.js";
import { CONNECT_CODE, httpStatusOf } from "../api-errors.js";
import { stopReading, type RpcCounter } from "../request-gate.js";
import { envelope, errorOf, successData, type EnvelopeError, type TraceIds } from "./envelope.js";
import { takeEnumStyle } from "./enum-style.js";
import { bodyRefusal, readBodyBytes } from "./read-body.js";
import { BodyBudgets, connectionOf } from "../body-limits.js";
import { vouchFor } from "../connection-vouch.js";
import { bindRequest } from "./request-binding.js";
import { byPrecedence, deriveRoutes, describeRoutes, findRoute, type RestRoute, type RouteDescription } from "./route-table.js";
import { splitPath } from "./path-template.js";

export type { RestRoute, RouteDescription } from "./route-table.js";
export { describeRoutes } from "./route-table.js";

/** The logging the REST layer needs; a pino logger fits. */
export interface RestLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface RestHandlerOptions {
  /** Services whose google.api.http rules become routes, in the order routes are listed. */
  services: DescService[];
  /** Where each REST call is executed: in production the interceptor-wrapped router transport. */
  transport: Transport;
  /** Admits the caller of `method` from the request's headers before its body is read; throws to refuse. */
  /** Admits a call from its headers (before its body is read); the caller, when it needs one. */
  admit?: (method: DescMethod, headers: Headers, peer?: PeerCertificate) => Promise<Principal | undefined>;
  /** The limits and budgets of request bodies by the method's class (default: body-limits.ts's); a larger body gets 413. */
  budgets?: BodyBudgets;
  logger?: RestLogger;
  /** Where calls refused here, before the RPC, are counted (the interceptor counts the rest). */
  metrics?: RpcCounter;
}

export interface RestHandler {
  /** The derived route table, in contract order. */
  routes: RestRoute[];
  /** The route table as (method, path, rpc) lines. */
  describe(): RouteDescription[];
  /** Answers a REST request; false when the path is neither a route nor under /v1 or /health. */
  handle(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse): Promise<boolean>;
  /** Answers a request nothing else served (404), or one that failed unexpectedly (500), with an envelope and its ids. */
  unrouted(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse, status: 404 | 500): void;
}

type Request = IncomingMessage | Http2ServerRequest;
// The part of the HTTP/1 and HTTP/2 compat responses this layer uses.
type Response = {
  statusCode: number;
  writableEnded: boolean;
  setHeader(name: string, value: string): unknown;
  end(body: string): unknown;
  once(event: "close", listener: () => void): unknown;
};

// Request headers handed to the RPC; everything else (cookies, hop-by-hop...) stays here.
const FORWARDED = new Set(["authorization", "x-admin-token", "x-request-id", "x-correlation-id", "x-idempotency-key", "traceparent"]);

/** Derives the routes of `opts.services` and returns the handler that serves them. */
export function createRestHandler(opts: RestHandlerOptions): RestHandler {
  const routes = deriveRoutes(opts.services, (msg) => opts.logger?.warn({ action: "rest" }, msg));
  const ctx = { ...opts, routes: byPrecedence(routes), budgets: opts.budgets ?? new BodyBudgets() };
  return {
    routes,
    describe: () => describeRoutes(routes),
    handle: (req, res) => handle(ctx, req, res as Response),
    unrouted: (req, res, status) => {
      const ids = traceIdsOf(req.headers);
      const error: EnvelopeError =
        status === 404
          ? { code: "RESOURCE_NOT_FOUND", message: "no such route", details: { path: clip((req.url ?? "/").split("?")[0]!) } }
          : { code: "INTERNAL_ERROR", message: "internal error", details: {} };
      send(res as Response, status, ids, envelope(ids, null, error));
    },
  };
}

// `routes` here are in matching order (byPrecedence), not contract order.
type Context = RestHandlerOptions & { routes: RestRoute[]; budgets: BodyBudgets };

async function handle(ctx: Context, req: Request, res: Response): Promise<boolean> {
  const target = req.url ?? "/";
  const q = target.indexOf("?");
  const rawPath = q < 0 ? target : target.slice(0, q);
  const method = (req.method ?? "GET").toUpperCase();
  const parts = splitPath(rawPath);
  const match = findRoute(ctx.routes, method, parts);
  if (match.kind === "none" && !isRestPath(rawPath)) return false;
  const ids = traceIdsOf(req.headers);
  if (match.kind === "none" && parts.includes("")) {
    // "/v1/resources/" or "a//b": a malformed path rather than a missing resource. Clients that
    // normalise dot segments turn ".../tenant/.." into "/v1/resources/", and it is refused here.
    const error = { code: "INVALID_REQUEST", message: `path ${clip(rawPath)} has an empty segment`, details: { field: "path" } };
    return refuse(ctx, res, 400, ids, error);
  }
  if (match.kind === "none") {
    const error = { code: "RESOURCE_NOT_FOUND", message: `no REST route ${method} ${clip(rawPath)}`, details: { path: clip(rawPath) } };
    return refuse(ctx, res, 404, ids, error);
  }
  if (match.kind === "wrong-method") {
    const allow = match.allow.join(", ");
    const error = {
      code: "INVALID_REQUEST",
      message: `${method} is not allowed on ${clip(rawPath)}; use ${allow}`,
      details: { allow: match.allow },
    };
    return refuse(ctx, res, 405, ids, error, { allow });
  }
  return execute(ctx, req, res, match.route, match.rawVars, q < 0 ? "" : target.slice(q + 1), ids);
}

// Reads and binds the request, calls the RPC and writes the envelope; always answers.
async function execute(
  ctx: Context,
  req: Request,
  res: Response,
  route: RestRoute,
  rawVars: Map<string, string>,
  rawQuery: string,
  ids: TraceIds,
): Promise<true> {
  const aborter = new AbortController();
  res.once("close", () => {
    if (!res.writableEnded) aborter.abort();
  });
  try {
    // An unadmitted caller is refused before a byte of its body is read (and the connection is
    // not kept for the rest of it).
    const peer = peerCertificateOf(req);
    let admitted: Principal | undefined;
    if (ctx.admit) {
      try {
        admitted = await ctx.admit(route.rpc, forwardedHeaders(req.headers), peer);
        if (admitted && admitted.kind !== "anonymous") vouchFor(req);
      } catch (e) {
        stopReading(req, res);
        throw e;
      }
    }
    // The content type is not checked: `curl -d @tenant.json` labels JSON as a form.
    const body = await readRestBody(ctx, req, res, route);
    const asked = takeEnumStyle(rawQuery);
    const input = bindRequest(route, rawVars, asked.rawQuery, body);
    // The in-memory transport does not carry context values to the server side: the caller the
    // front door admitted (and the client certificate) go by a ticket (admitted-calls.ts).
    const headers = forwardedHeaders(req.headers);
    const ticket = park({ principal: admitted, peer });
    headers.set(ADMITTED_HEADER, ticket);
    let out: Awaited<ReturnType<Transport["unary"]>>;
    try {
      out = await ctx.transport.unary(route.rpc, aborter.signal, undefined, headers, input);
    } finally {
      release(ticket);
    }
    const { data, timestamp } = successData(route, out.message, asked.style);
    const replyIds = {
      requestId: out.header.get("x-request-id") ?? ids.requestId,
      correlationId: out.header.get("x-correlation-id") ?? ids.correlationId,
    };
    send(res, route.rpc.name.startsWith("Create") ? 201 : 200, replyIds, envelope(replyIds, data, null, timestamp));
    return true;
  } catch (e) {
    // The client went away (mid-body or mid-call): nobody is left to answer.
    if (aborter.signal.aborted) return true;
    const refusal = bodyRefusal(e, ctx.budgets.of(route.rpc).cls.maxBytes);
    if (refusal) {
      // The rest of the body is not read, and the stream (or connection) is not kept for it.
      stopReading(req, res);
      ctx.metrics?.rpcHandled(route.rpc, CONNECT_CODE[refusal.code]);
      const retryAfter = refusal.details.retry_after_ms;
      const status = refusal.code === "RESOURCE_EXHAUSTED" ? 429 : "deadline_ms" in refusal.details ? 408 : 413;
      const headers: Record<string, string> = typeof retryAfter === "number" ? { "retry-after": String(Math.ceil(retryAfter / 1000)) } : {};
      return refuse(ctx, res, status, ids, { code: refusal.code, message: refusal.message, details: refusal.details }, headers);
    }
    const { error, ids: rpcIds, unexpected } = errorOf(e);
    // An error of the RPC itself comes back as a ConnectError, counted by the interceptor.
    if (!(e instanceof ConnectError)) ctx.metrics?.rpcHandled(route.rpc, CONNECT_CODE[error.code as ErrorCode] ?? Code.Internal);
    if (unexpected) ctx.logger?.error({ action: "rest", result: "INTERNAL_ERROR", err: e, request_id: ids.requestId }, "REST call failed");
    const replyIds = { requestId: rpcIds.requestId ?? ids.requestId, correlationId: rpcIds.correlationId ?? ids.correlationId };
    if (isSkipperError(e)) logRefusal(ctx, replyIds, error);
    send(res, httpStatusOf(error.code), replyIds, envelope(replyIds, null, error));
    return true;
  }
}

// The route's body as text, read under its class's limits (body-limits.ts); a route without one
// discards whatever is sent, so the request ends when the client ends it.
async function readRestBody(ctx: Context, req: Request, res: Response, route: RestRoute): Promise<string | undefined> {
  if (route.body === "") {
    // A body sent anyway is dropped, and the stream (or connection) is not kept open for it
    // once the answer is out.
    if (bodyPending(req)) stopReading(req, res);
    req.resume();
    return undefined;
  }
  const { cls, budget } = ctx.budgets.of(route.rpc);
  const { connection, address } = connectionOf(req);
  const reservation = budget.reserve(connection, address);
  // Registered before the read: a client's reset closes the response while it reads.
  res.once("close", () => reservation.release());
  const bytes = await readBodyBytes(req, cls.maxBytes, { deadlineMs: cls.deadlineMs, reservation });
  return bytes.toString("utf8");
}

// Whether the request still has body to come (an HTTP/2 stream not ended with its headers, an
// HTTP/1.1 request not yet complete).
function bodyPending(req: Request): boolean {
  const stream = (req as Http2ServerRequest).stream;
  if (stream) return !stream.endAfterHeaders && !stream.readableEnded;
  return !(req as IncomingMessage).complete;
}

// Errors raised here never reach the RPC interceptor, so they get their own log line.
function refuse(
  ctx: Context,
  res: Response,
  status: number,
  ids: TraceIds,
  error: EnvelopeError,
  headers: Record<string, string> = {},
): true {
  logRefusal(ctx, ids, error);
  send(res, status, ids, envelope(ids, null, error), headers);
  return true;
}

function logRefusal(ctx: Context, ids: TraceIds, error: EnvelopeError): void {
  ctx.logger?.info(
    { action: "rest", result: error.code, request_id: ids.requestId, correlation_id: ids.correlationId, metadata: error.details },
    `REST request refused: ${error.message}`,
  );
}

/** Writes `body` as the JSON answer with the request's ids in headers. */
export function send(res: Response, status: number, ids: TraceIds, body: object, headers: Record<string, string> = {}): void {
  if (res.writableEnded) return;
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader("content-type", "application/json");
  res.setHeader("content-length", String(Buffer.byteLength(text)));
  res.setHeader("x-request-id", ids.requestId);
  res.setHeader("x-correlation-id", ids.correlationId);
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  res.end(text);
}

function isRestPath(path: string): boolean {
  return path === "/v1" || path.startsWith("/v1/") || path === "/health" || path.startsWith("/health/");
}

/**
 * Ids for errors raised before the RPC runs; same rules as the interceptor (valid header or new,
 * correlation defaults to the request id).
 */
export function traceIdsOf(headers: IncomingHttpHeaders): TraceIds {
  const requestId = validTrace(headers["x-request-id"]) ?? randomUUID();
  return { requestId, correlationId: validTrace(headers["x-correlation-id"]) ?? requestId };
}

function validTrace(v: string | string[] | undefined): string | undefined {
  return typeof v === "string" && isValidTraceId(v) ? v : undefined;
}

function forwardedHeaders(headers: IncomingHttpHeaders): Headers {
  const out = new Headers();
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || !(FORWARDED.has(name) || name.startsWith("x-skipper-"))) continue;
    out.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  return out;
}

// Bounds untrusted path text echoed in messages.
function clip(path: string): string {
  return path.length > 200 ? `${path.slice(0, 200)}…` : path;
}
