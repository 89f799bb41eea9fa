// The RPC side of the front door (Connect, gRPC and gRPC-Web, under /v1 and at the canonical
// paths), in the order a request meets it:
//   1. admission from headers alone (request-gate.ts): an unadmitted call is refused unread;
//   2. the body, read here under its class's limits (body-limits.ts: a cap, smaller for open calls,
//      which nobody vouches for; a deadline for the whole body; its bytes reserved against the
//      connection's, the address's and the controller's budgets), refused as soon as a declared
//      length or an envelope's announced length is over the cap;
//   3. a compressed body inflated here (body-encoding.ts), and the request message decoded here
//      once: bytes that are not the method's request message
//      are INVALID_REQUEST (Connect's own decoder reports binary garbage as `internal`, from
//      before any interceptor can map it, and a 5xx must mean a bug of ours);
//   4. the Connect router's handler for the method, given the bytes already read (a request
//      stream, which never ends while its session lives, is handed over unread: the router reads
//      each message under readMaxBytes) -- except an agent's Session on the wires skippy and
//      typed clients use, which session-route.ts serves itself (the router's streaming pipeline
//      holds about 20 KB per open stream).
// The router's interceptors (interceptors.ts) then run as for any call.
import { fromBinary, fromJsonString, type DescMethod, type JsonReadOptions } from "@bufbuild/protobuf";
import type { ConnectRouterOptions, ConnectRouter } from "@connectrpc/connect";
import { Code, ConnectError, createConnectRouter, createContextValues } from "@connectrpc/connect";
import { createAsyncIterable } from "@connectrpc/connect/protocol";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { Logger } from "../../common/logging/logger.js";
import { isOpen } from "../auth/admission.js";
import { type BodyBudgets, connectionOf } from "./body-limits.js";
import { budgetedStream } from "./stream-budget.js";
import { invalid, SkipperError } from "../base/errors.js";
import { admittedKey, peerCertificateKey } from "../base/context.js";
import { peerCertificateOf } from "../tls/peer-certificate.js";
import { refuseCall, type RequestGate, type RpcCounter } from "./request-gate.js";
import { bodyRefusal, readBodyBytes } from "./rest/read-body.js";
import { vouchFor } from "./connection-vouch.js";
import { connectGetProblem, encodingOf, inflate, inflateEnvelopes } from "./body-encoding.js";
import { serveSession, type SessionRouteOptions } from "./session-route.js";
import { sessionWireOf } from "./session-wire.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

export interface RpcHandlerOptions {
  routes: (router: ConnectRouter) => void;
  interceptors: ConnectRouterOptions["interceptors"];
  jsonOptions: Partial<JsonReadOptions> & ConnectRouterOptions["jsonOptions"];
  /** The services whose JSON requests read unknown fields as absent (what agents call: routes.ts). */
  lenientServices?: ReadonlySet<string>;
  /** Largest request body the router decompresses (a compressed body is checked by it). */
  readMaxBytes: number;
  /** The limits and budgets of request bodies, by the method's class. */
  budgets: BodyBudgets;
  gate: RequestGate;
  logger: Logger;
  /** Where calls refused here (body over the cap, undecodable) are counted. */
  metrics?: RpcCounter;
  /** NodeService.Session, served outside the router for the wires session-wire.ts names. */
  session?: SessionRouteOptions;
}

/** Serves RPC paths; returns false (and does nothing) for any other path. */
export type RpcHandler = (req: Request, res: Response) => boolean;

/**
 * Responses smaller than this are sent uncompressed whatever the client accepts. Gzip of a few
 * kilobytes (a resource, a work order, a heartbeat's answer) cost the controller more CPU than the
 * call's own work (6 % of its main thread serving GetResource, ahead of the store), to save bytes
 * that do not matter on the links controllers and agents use; listings and snapshots of many
 * records still go compressed.
 */
export const COMPRESS_MIN_BYTES = 16 * 1024;

export function createRpcHandler(opts: RpcHandlerOptions): RpcHandler {
  const router = createConnectRouter({
    interceptors: opts.interceptors,
    jsonOptions: opts.jsonOptions,
    readMaxBytes: opts.readMaxBytes,
    acceptCompression: [compressionGzip, compressionBrotli],
    compressMinBytes: COMPRESS_MIN_BYTES,
  });
  opts.routes(router);
  const handlers = new Map(router.handlers.map((h) => [h.requestPath, h]));
  return (req, res) => {
    const path = (req.url ?? "/").split("?")[0]!;
    const canonical = path.startsWith("/v1/skipper.v1.") ? path.slice(3) : path;
    if (!canonical.startsWith("/skipper.v1.")) return false;
    const handler = handlers.get(canonical);
    if (!handler) {
      (res as ServerResponse).writeHead(404);
      res.end();
      return true;
    }
    serveCall(opts, handler, req, res).catch((err: unknown) => {
      if (ConnectError.from(err).code === Code.Aborted) return;
      opts.logger.error({ action: "rpc", result: "INTERNAL_ERROR", err }, "RPC handler failed");
      if (!res.headersSent) {
        (res as ServerResponse).writeHead(500);
        res.end();
      }
    });
    return true;
  };
}

type UniversalHandler = ReturnType<typeof createConnectRouter>["handlers"][number];

async function serveCall(opts: RpcHandlerOptions, handler: UniversalHandler, req: Request, res: Response): Promise<void> {
  const admitted = await opts.gate(req, res, handler.method);
  if (admitted === "answered") return;
  if (admitted && admitted.kind !== "anonymous") vouchFor(req);
  if (admitted && opts.session?.method === handler.method) {
    const wire = sessionWireOf(req.method, req.httpVersion, req.headers);
    if (wire) return serveSession(opts.session, req as Http2ServerRequest, res as Http2ServerResponse, wire, admitted);
  }
  // The interceptor authenticates a call without credentials in its headers by the client
  // certificate of its connection.
  const values = createContextValues().set(peerCertificateKey, peerCertificateOf(req)).set(admittedKey, admitted);
  const uReq = universalRequestFromNodeRequest(req, res, undefined, values);
  const refuse = (e: SkipperError, stage: string, unread: boolean) =>
    refuseCall(opts.logger, req, res, handler.method, e, { unread, stage, metrics: opts.metrics });
  if ((req.method ?? "GET") === "GET") {
    const query = (req.url ?? "").split("?")[1] ?? "";
    const rawMessage = /(?:^|&)message=([^&]*)/.exec(query)?.[1];
    const problem = connectGetProblem(
      new URLSearchParams(query),
      (bytes, json) => {
        if (json)
          fromJsonString(handler.method.input, new TextDecoder("utf-8", { fatal: true }).decode(bytes), jsonFor(opts, handler.method));
        else fromBinary(handler.method.input, bytes);
      },
      rawMessage,
    );
    if (problem) return refuse(problem, "query", false);
  } else if (handler.method.methodKind === "bidi_streaming" && !req.httpVersion.startsWith("2")) {
    // Both ways at once needs HTTP/2 (Connect would answer 505): a client's mistake, said as one.
    const e = invalid(
      `${handler.method.name} is a bidirectional stream: call it over HTTP/2 (this request came over HTTP/${req.httpVersion})`,
      {
        field: "http_version",
      },
    );
    return refuse(e, "protocol", true);
  } else if (streamsIn(handler.method)) {
    // A request stream (an agent's Session) has no end to wait for: the router reads its messages
    // as they come, each under readMaxBytes (decompressed too), and a message that is not the
    // method's request is refused by the interceptor (interceptors.ts) as INVALID_REQUEST. Each
    // message under way holds its bytes against the budgets and must arrive whole within the
    // class's deadline (stream-budget.ts).
    const { cls, budget } = opts.budgets.of(handler.method);
    const { connection, address } = connectionOf(req);
    if (isAsyncIterable(uReq.body)) uReq.body = budgetedStream(uReq.body, () => budget.reserve(connection, address), cls.deadlineMs);
  } else {
    const type = bodyTypeOf(req.headers["content-type"]);
    const { cls, budget } = opts.budgets.of(handler.method);
    let encoding: ReturnType<typeof encodingOf> = "identity";
    try {
      if (type) encoding = encodingOf(req.headers[type.encodingHeader], type.encodingHeader);
    } catch (e) {
      return refuse(e as SkipperError, "body", true);
    }
    if (isOpen(handler.method) && encoding !== "identity") {
      // Nobody vouches for an open caller's zip bomb.
      return refuse(new SkipperError("INVALID_REQUEST", "open calls take uncompressed bodies only", { field: "body" }), "body", true);
    }
    const { connection, address } = connectionOf(req);
    const reservation = budget.reserve(connection, address);
    // The bytes stay reserved until the call is answered or the stream goes (a client's reset
    // included: it closes the response before the read returns).
    res.once("close", () => reservation.release());
    let body: Buffer;
    try {
      body = await readBodyBytes(req, cls.maxBytes, { enveloped: type?.enveloped ?? false, deadlineMs: cls.deadlineMs, reservation });
    } catch (e) {
      const refusal = bodyRefusal(e, cls.maxBytes);
      if (!refusal) throw e;
      return refuse(refusal, "body", true);
    }
    // Reset by the client while it was read: a body cut short, and nobody left to answer.
    if (isGone(req, res)) {
      reservation.release();
      return;
    }
    if (type) {
      try {
        // Opened here, under the class's cap; the router gets plain bytes.
        if (type.enveloped) body = inflateEnvelopes(body, encoding, cls.maxBytes);
        else if (encoding !== "identity") body = inflate(body, encoding, cls.maxBytes);
      } catch (e) {
        if (!(e instanceof SkipperError)) throw e;
        return refuse(e, "decode", false);
      }
      // The router checks a declared length against what it is given: the plain bytes now.
      uReq.header.delete(type.encodingHeader);
      uReq.header.delete("content-length");
      const problem = undecodable(handler.method, body, type, jsonFor(opts, handler.method));
      if (problem) {
        const e = new SkipperError("INVALID_REQUEST", `the request is not a valid ${handler.method.input.typeName}: ${problem}`, {
          field: "body",
        });
        return refuse(e, "decode", false);
      }
    }
    uReq.body = createAsyncIterable([new Uint8Array(body.buffer, body.byteOffset, body.byteLength)]);
  }
  const uRes = await handler(uReq);
  await universalResponseToNodeResponse(uRes, res);
}

function isAsyncIterable(v: unknown): v is AsyncIterable<Uint8Array> {
  return typeof v === "object" && v !== null && Symbol.asyncIterator in v;
}

// True for methods whose request is a stream of messages (client or bidirectional streaming).
function streamsIn(method: DescMethod): boolean {
  return method.methodKind === "client_streaming" || method.methodKind === "bidi_streaming";
}

// The client reset the stream or closed the connection (the body read ends early then).
function isGone(req: Request, res: Response): boolean {
  const stream = (req as Http2ServerRequest).stream;
  if (stream) return stream.aborted || stream.destroyed;
  // HTTP/1.1: a request is destroyed once read; the connection is what goes.
  return (res as ServerResponse).socket?.destroyed ?? true;
}

/** How a request body is framed and encoded, from its content type; undefined when not one of ours. */
interface BodyType {
  enveloped: boolean;
  json: boolean;
  /** The header that names the compression of the body or of its compressed envelopes. */
  encodingHeader: string;
}

function bodyTypeOf(contentType: string | undefined): BodyType | undefined {
  const m = /^application\/(proto|json|connect\+(proto|json)|grpc(?:-web)?(?:\+(proto|json))?)\s*(;|$)/i.exec(contentType ?? "");
  if (!m) return undefined;
  const kind = m[1]!.toLowerCase();
  if (kind === "proto" || kind === "json") return { enveloped: false, json: kind === "json", encodingHeader: "content-encoding" };
  if (kind.startsWith("connect+"))
    return { enveloped: true, json: m[2]!.toLowerCase() === "json", encodingHeader: "connect-content-encoding" };
  return { enveloped: true, json: (m[3] ?? "").toLowerCase() === "json", encodingHeader: "grpc-encoding" };
}

/** Why `body` is not the method's request message (framed as `type` says), or undefined when it is. */
function undecodable(method: DescMethod, body: Buffer, type: BodyType, jsonOptions: Partial<JsonReadOptions>): string | undefined {
  const decode = (bytes: Uint8Array): void => {
    if (type.json) fromJsonString(method.input, new TextDecoder("utf-8", { fatal: true }).decode(bytes), jsonOptions);
    else fromBinary(method.input, bytes);
  };
  try {
    if (!type.enveloped) {
      decode(body);
      return undefined;
    }
    let offset = 0;
    let messages = 0;
    while (offset < body.length) {
      if (offset + 5 > body.length) return "the last message's 5-byte prefix is incomplete";
      const flags = body[offset]!;
      const length = body.readUInt32BE(offset + 1);
      const end = offset + 5 + length;
      if (end > body.length) return `a message announces ${length} bytes but the body ends after ${body.length - offset - 5}`;
      // Compressed messages were inflated before (body-encoding.ts).
      if ((flags & 0b1) === 0) decode(body.subarray(offset + 5, end));
      offset = end;
      messages++;
    }
    return messages === 0 ? "the body holds no message" : undefined;
  } catch (e) {
    // protobuf-es names the message again ("cannot decode message X from JSON: ..."); the caller already does.
    return (e instanceof Error ? e.message : String(e)).replace(/^cannot decode message \S+ from JSON: /, "");
  }
}

// The JSON read options of `method`: lenient for the services agents call, strict otherwise.
function jsonFor(opts: RpcHandlerOptions, method: DescMethod): Partial<JsonReadOptions> {
  return opts.lenientServices?.has(method.parent.typeName) ? { ...opts.jsonOptions, ignoreUnknownFields: true } : opts.jsonOptions;
}
