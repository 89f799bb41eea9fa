// The front door for Connect, gRPC and gRPC-Web requests: a call that is not admitted (no, a
// wrong or another kind of credential) is answered from its headers alone, in its own protocol,
// before any of its body is read. The Connect adapters read and decode a whole message before the
// interceptor runs, so without this an unauthenticated stream that announces a 4 MiB message and
// never finishes holds that memory for as long as it likes. Admitted calls go on to the adapters,
// whose interceptor admits them again (the same rule, auth/admission.ts) and does the rest.
import http2 from "node:http2";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescMethod } from "@bufbuild/protobuf";
import { codeToHttpStatus, endStreamFlag, endStreamToJson, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { encodeEnvelope } from "@connectrpc/connect/protocol";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import type { Logger } from "../../common/logging/logger.js";
import { connectErrorOf } from "./api-errors.js";
import { admit, isOpen, type OnRefused } from "../auth/admission.js";
import type { Authenticator, HeaderReader } from "../auth/authenticator.js";
import { peerCertificateOf } from "../tls/peer-certificate.js";
import { isSkipperError, type SkipperError } from "../base/errors.js";
import type { Principal } from "../base/context.js";
import type { ControllerMetrics } from "../metrics/controller-metrics.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

export interface GateOptions {
  authenticator: Authenticator;
  logger: Logger;
  /** Told of a call refused to an authenticated caller (for the audit trail). */
  onRefused?: (method: DescMethod, headers: Headers) => OnRefused;
  /** Where refused calls are counted (the interceptor never sees them). */
  metrics?: RpcCounter;
}

/** What counts the calls a front door answers itself. */
export type RpcCounter = Pick<ControllerMetrics, "rpcHandled">;

/**
 * Answers a request that may not call `method` (resolving "answered"); otherwise resolves the
 * caller it admitted, or undefined when it left the decision to the interceptor.
 */
export type RequestGate = (req: Request, res: Response, method: DescMethod) => Promise<Principal | "answered" | undefined>;

/** The gate for the RPCs of `opts.services`. */
export function createRequestGate(opts: GateOptions): RequestGate {
  return async (req, res, method) => {
    // Public and enrollment calls need no credential.
    if (isOpen(method)) return undefined;
    try {
      // Read in place: a fetch Headers copy of every header is made only for a refusal's audit entry.
      const refused = opts.onRefused;
      return await admit(opts.authenticator, method, headerReaderOf(req.headers), {
        onRefused: refused && ((principal, e) => refused(method, headersOf(req.headers))(principal, e)),
        peer: peerCertificateOf(req),
      });
    } catch (e) {
      // Anything but a refusal (a store error, say) is left to the interceptor, which admits again.
      if (!isSkipperError(e)) return undefined;
      refuseCall(opts.logger, req, res, method, e, { unread: true, stage: "before body", metrics: opts.metrics });
      return "answered";
    }
  };
}

/** Logs and counts a call refused before it reached the router, and answers it (answerError). */
export function refuseCall(
  logger: Logger,
  req: Request,
  res: Response,
  method: DescMethod,
  e: SkipperError,
  opts: { unread: boolean; stage: string; metrics?: RpcCounter },
): void {
  const action = `${method.parent.name}.${method.name}`;
  logger.warn(
    { action, result: e.code, metadata: { message: e.message, stage: opts.stage, ...e.details } },
    `${action} refused: ${e.code}`,
  );
  opts.metrics?.rpcHandled(method, connectErrorOf(e).code);
  answerError(req, res, e, opts);
}

/**
 * Answers with the error in the request's protocol (gRPC and gRPC-Web trailers-only, a Connect
 * end-of-stream message, or a Connect unary error body). With `unread`, the rest of the request's
 * body is not read (stopReading).
 */
export function answerError(req: Request, res: Response, e: SkipperError, opts: { unread: boolean }): void {
  const err = connectErrorOf(e);
  const type = String(req.headers["content-type"] ?? "");
  const headers: Record<string, string> = {};
  let status = 200;
  let body: Uint8Array = new Uint8Array();
  if (/^application\/grpc(-web)?([+;]|$)/.test(type)) {
    // gRPC and gRPC-Web: a trailers-only response, the status in the headers.
    const h = new Headers();
    setTrailerStatus(h, err);
    h.forEach((v, k) => {
      headers[k] = v;
    });
    headers["content-type"] = type;
  } else if (/^application\/connect\+/.test(type)) {
    // A Connect stream: HTTP 200 and an end-of-stream message that carries the error.
    body = encodeEnvelope(endStreamFlag, new TextEncoder().encode(JSON.stringify(endStreamToJson(new Headers(), err, undefined))));
    headers["content-type"] = type;
  } else {
    // Connect unary (JSON or binary) and anything else: the HTTP status and a JSON error body.
    status = codeToHttpStatus(err.code);
    body = errorToJsonBytes(err, {});
    headers["content-type"] = "application/json";
  }
  if (opts.unread) stopReading(req, res);
  (res as ServerResponse).writeHead(status, headers);
  res.end(body);
}

/**
 * For an answer sent without reading the request's body: over HTTP/1.1 the rest is read and
 * dropped after the answer while it keeps coming (within limits), then a connection whose body
 * has not ended closes; over HTTP/2 the stream is reset with NO_ERROR once the answer is
 * complete, which tells the client to stop sending. Call before the answer's headers are written.
 *
 * The reset waits until the answer's trailers have been asked for and given: Node's HTTP/2
 * compatibility responses always end with trailers, and a stream reset between the end of the
 * answer ("finish") and that request aborts the whole process (an assertion in
 * Http2Stream::OnTrailers, nodejs/node#41458). One unauthenticated gRPC call whose message
 * announced more than the cap was enough. A request whose body has already ended needs no reset.
 */
export function stopReading(req: Request, res: { setHeader(name: string, value: string): unknown; once?: unknown }): void {
  if (req.httpVersionMajor === 1) {
    // The rest of the body is read and dropped after the answer, so a client still uploading is
    // not cut off (a reset) before it reads the answer; a body that stops coming for 5 s (a client
    // that stalls), runs past 16 MiB or 30 s takes its connection with it. The limits are on
    // progress, so a loaded client that is still sending is not cut off. ("connection: close"
    // would have Node close the socket with the body unread, which resets the client; without
    // this Node waits for the rest for as long as the client likes, its keep-alive timer
    // replacing the idle limit.)
    // A client that asked for "connection: close" would otherwise have Node close the socket at
    // once after the answer, with the body unread: the same reset. The connection is kept for the
    // drain; the client closes it after the answer, as it asked.
    const message = req as IncomingMessage;
    (res as ServerResponse).shouldKeepAlive = true;
    (res as ServerResponse).once("finish", () => drainThenClose(message));
    return;
  }
  const stream = (req as Http2ServerRequest).stream;
  if (!stream) return;
  stream.once("wantTrailers", () => {
    // After the compatibility layer's own listener has sent the trailers, and after the native
    // callback that asked for them has returned.
    setImmediate(() => {
      if (!stream.destroyed && !stream.readableEnded) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    });
  });
}

const DRAIN_IDLE_MS = 5_000;
const DRAIN_MAX_MS = 30_000;
const DRAIN_MAX_BYTES = 16 * 1024 * 1024;

// Reads and drops the rest of an HTTP/1.1 request's body, closing its connection when the body
// stalls or runs past the drain's limits.
function drainThenClose(message: IncomingMessage): void {
  if (message.complete) return;
  let drained = 0;
  let idle: NodeJS.Timeout | undefined;
  const close = () => {
    clearTimeout(idle);
    clearTimeout(deadline);
    if (!message.complete) message.socket.destroy();
  };
  const arm = () => {
    clearTimeout(idle);
    idle = setTimeout(close, DRAIN_IDLE_MS).unref();
  };
  const deadline = setTimeout(close, DRAIN_MAX_MS).unref();
  message.on("data", (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > DRAIN_MAX_BYTES) close();
    else arm();
  });
  message.once("end", () => {
    clearTimeout(idle);
    clearTimeout(deadline);
  });
  arm();
  message.resume();
}

/**
 * A request's header, as Headers.get() reads it (repeated values joined by ", "), straight from
 * Node's parsed headers: no copy of the rest, which every admitted call would otherwise pay for.
 */
export function headerReaderOf(raw: IncomingHttpHeaders): HeaderReader {
  return {
    get(name: string): string | null {
      const key = name.toLowerCase();
      if (key.startsWith(":")) return null;
      const v = raw[key];
      if (v === undefined) return null;
      return Array.isArray(v) ? v.join(", ") : v;
    },
  };
}

/** Request headers as a fetch Headers object (HTTP/2 pseudo-headers left out). */
export function headersOf(raw: IncomingHttpHeaders): Headers {
  const h = new Headers();
  for (const [k, v] of Object.entries(raw)) {
    if (k.startsWith(":") || v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) h.append(k, one);
  }
  return h;
}
