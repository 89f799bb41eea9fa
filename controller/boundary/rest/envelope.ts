// The seed's REST envelope and the mapping of RPC outcomes onto it:
//   { schema_version, request_id, correlation_id, data, error, metadata: { timestamp } }
// Success: `data` is the response in proto3 JSON (proto field names, implicit fields emitted)
// without `meta`, or only the `response_body` field (null when unset); enum values by their full
// names, or with `enums=short` by the seed's short ones (enum-style.ts). Failure: the ApiError
// carried as a Connect error detail, else one derived from the Connect code; HTTP status by code.
import { toJson, type JsonObject, type JsonValue, type Message } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { ApiErrorSchema } from "../../../gen/skipper/v1/envelope_pb.js";
import { errorCodeOf } from "../api-errors.js";
import { isSkipperError } from "../../base/errors.js";
import type { RestRoute } from "./route-table.js";
import { shortEnums, type EnumStyle } from "./enum-style.js";
import { SCHEMA_VERSION } from "../../../common/schema-version.js";

/** The `error` member of an envelope. */
export interface EnvelopeError {
  code: string;
  message: string;
  details: JsonObject;
}

/** The JSON body of every REST response. */
export interface Envelope {
  schema_version: typeof SCHEMA_VERSION;
  request_id: string;
  correlation_id: string;
  data: JsonValue;
  error: EnvelopeError | null;
  metadata: { timestamp: string };
}

const JSON_OPTIONS = { useProtoFieldName: true, alwaysEmitImplicit: true } as const;

/** Request and correlation ids of one REST exchange. */
export interface TraceIds {
  requestId: string;
  correlationId: string;
}

/** The `data` member for a successful call, plus the response's own timestamp when it has one. */
export function successData(route: RestRoute, message: Message, enums: EnumStyle = "full"): { data: JsonValue; timestamp?: string } {
  const json = toJson(route.rpc.output, message, JSON_OPTIONS) as JsonObject;
  if (enums === "short") shortEnums(route.rpc.output, json);
  const meta = json.meta as JsonObject | undefined;
  const timestamp = typeof meta?.timestamp === "string" ? meta.timestamp : undefined;
  delete json.meta;
  // An unset message field is omitted from proto3 JSON: that is the `null` of "no work order".
  const data = route.responseField ? (json[route.responseField.name] ?? null) : json;
  return timestamp === undefined ? { data } : { data, timestamp };
}

/** The envelope error for a REST-layer SkipperError or whatever the RPC call threw, with the
 * ids the RPC layer attached; `unexpected` marks a throw that was not a Connect error. */
export function errorOf(e: unknown): { error: EnvelopeError; ids: Partial<TraceIds>; unexpected: boolean } {
  if (isSkipperError(e)) return { error: { code: e.code, message: e.message, details: { ...e.details } }, ids: {}, unexpected: false };
  const unexpected = !(e instanceof ConnectError);
  const err = ConnectError.from(e);
  const ids = {
    requestId: err.metadata.get("x-request-id") ?? undefined,
    correlationId: err.metadata.get("x-correlation-id") ?? undefined,
  };
  const detail = err.findDetails(ApiErrorSchema)[0];
  if (detail) return { error: { code: detail.code, message: detail.message, details: detail.details ?? {} }, ids, unexpected };
  const code = errorCodeOf(err.code);
  // Only Connect errors are trusted to carry client-safe messages.
  return { error: { code, message: unexpected ? "internal error" : err.rawMessage, details: {} }, ids, unexpected };
}

/** A complete envelope. */
export function envelope(ids: TraceIds, data: JsonValue, error: EnvelopeError | null, timestamp?: string): Envelope {
  return {
    schema_version: SCHEMA_VERSION,
    request_id: ids.requestId,
    correlation_id: ids.correlationId,
    data: error ? null : data,
    error,
    metadata: { timestamp: timestamp ?? new Date().toISOString() },
  };
}
