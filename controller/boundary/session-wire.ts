// The wire of an agent's Session stream where the controller serves it itself (session-route.ts),
// not through the Connect router: Connect's streaming protocol and gRPC, each in JSON or binary
// protobuf, uncompressed, over HTTP/2. Each message is an envelope (a flags byte, a 4-byte
// big-endian length, the payload); the stream ends with Connect's end-of-stream message (flags
// 0x02, JSON: the error and metadata) or with gRPC's trailers (grpc-status, grpc-message,
// grpc-status-details-bin). Anything else (gRPC-Web, a compressed stream, a deadline header,
// HTTP/1.1) is left to the router, which serves every variant; this wire exists because the
// router's streaming pipeline holds about 20 KB of generators and closures per open stream, and
// a controller holds one such stream per agent for as long as the agent runs.
//
// The error encodings are Connect's own (endStreamToJson, setTrailerStatus), so a client cannot
// tell the two routes apart.
import { fromBinary, fromJsonString, toBinary, toJsonString, type JsonReadOptions, type JsonWriteOptions } from "@bufbuild/protobuf";
import type { ConnectError } from "@connectrpc/connect";
import { endStreamFlag, endStreamToJson } from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus, grpcStatusOk } from "@connectrpc/connect/protocol-grpc";
import { encodeEnvelope } from "@connectrpc/connect/protocol";
import type { IncomingHttpHeaders } from "node:http2";
import {
  SessionRequestSchema,
  SessionResponseSchema,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/skipper/v1/node_service_pb.js";
import { invalid } from "../base/errors.js";
import type { Envelope } from "./stream-budget.js";

/** How one Session stream is framed and encoded. */
export interface SessionWire {
  protocol: "connect" | "grpc";
  json: boolean;
  /** The response's content type. */
  contentType: string;
}

const CONNECT = /^application\/connect\+(?:(json)(?:; ?charset=utf-?8)?|proto)$/i;
const GRPC = /^application\/grpc(?:\+(?:(json)(?:; ?charset=utf-?8)?|proto))?$/i;

/**
 * The wire of a request this route serves, from its method, HTTP version and headers; undefined
 * when the router should serve it.
 */
export function sessionWireOf(method: string | undefined, httpVersion: string, headers: IncomingHttpHeaders): SessionWire | undefined {
  if (method !== "POST" || httpVersion !== "2.0") return undefined;
  const type = headers["content-type"] ?? "";
  const connect = CONNECT.exec(type);
  const grpc = connect ? undefined : GRPC.exec(type);
  if (!connect && !grpc) return undefined;
  const encoding = connect ? headers["connect-content-encoding"] : headers["grpc-encoding"];
  if (encoding !== undefined && encoding !== "identity") return undefined;
  if (headers["connect-timeout-ms"] !== undefined || headers["grpc-timeout"] !== undefined) return undefined;
  const json = Boolean((connect ?? grpc)![1]);
  const contentType = connect
    ? json
      ? "application/connect+json"
      : "application/connect+proto"
    : json
      ? "application/grpc+json"
      : "application/grpc+proto";
  return { protocol: connect ? "connect" : "grpc", json, contentType };
}

/** The agent's message in `envelope`; INVALID_REQUEST when it is not a SessionRequest. */
export function decodeRequest(wire: SessionWire, envelope: Envelope, options: Partial<JsonReadOptions>): SessionRequest {
  if ((envelope.flags & 0b1) !== 0) {
    throw invalid("a compressed message on a stream that declared no compression", { field: "body" });
  }
  try {
    if (!wire.json) return fromBinary(SessionRequestSchema, envelope.data);
    return fromJsonString(SessionRequestSchema, new TextDecoder("utf-8", { fatal: true }).decode(envelope.data), options);
  } catch (e) {
    const why = (e instanceof Error ? e.message : String(e)).replace(/^cannot decode message \S+ from JSON: /, "");
    throw invalid(`a message on the stream is not a valid ${SessionRequestSchema.typeName}: ${why}`, { field: "body" });
  }
}

/** `message` framed for the wire. */
export function encodeResponse(wire: SessionWire, message: SessionResponse, options: Partial<JsonWriteOptions>): Uint8Array {
  const data = wire.json
    ? new TextEncoder().encode(toJsonString(SessionResponseSchema, message, options))
    : toBinary(SessionResponseSchema, message);
  return encodeEnvelope(0, data);
}

/**
 * How the stream ends, OK or with `error`: Connect's end-of-stream message (to write last), or
 * gRPC's trailers.
 */
export function endOfStream(
  wire: SessionWire,
  error: ConnectError | undefined,
  options: Partial<JsonWriteOptions>,
): { last?: Uint8Array; trailers?: Record<string, string> } {
  if (wire.protocol === "connect") {
    const json = JSON.stringify(endStreamToJson(new Headers(), error, options));
    return { last: encodeEnvelope(endStreamFlag, new TextEncoder().encode(json)) };
  }
  const trailer = new Headers({ "grpc-status": grpcStatusOk });
  setTrailerStatus(trailer, error);
  const trailers: Record<string, string> = {};
  trailer.forEach((value, key) => {
    trailers[key] = value;
  });
  return { trailers };
}
