// How records look on disk. Contract messages are proto JSON with proto field names, pretty
// printed so an operator can read and diff them; the store's own records (idempotency replays,
// credentials) are plain JSON with snake_case keys and RFC 3339 timestamps.
import { fromJson, toJson, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import type { AdminCredential, IdempotencyRecord, NodeCredential } from "./store.js";

/** Proto JSON text for `msg`: 2-space indent and a trailing newline. */
export function encodeMessage<D extends DescMessage>(schema: D, msg: MessageShape<D>): string {
  return JSON.stringify(toJson(schema, msg, { useProtoFieldName: true }), null, 2) + "\n";
}

/** Parses proto JSON text; unknown fields (from a newer controller) are tolerated. */
export function decodeMessage<D extends DescMessage>(schema: D, text: string): MessageShape<D> {
  return fromJson(schema, JSON.parse(text) as JsonValue, { ignoreUnknownFields: true });
}

/** Plain JSON text with the same layout as messages. */
export function encodePlain(value: unknown): string {
  return JSON.stringify(value, null, 2) + "\n";
}

/** idempotency/<key>.json */
export function encodeIdempotency(r: IdempotencyRecord): string {
  return encodePlain({
    key: r.key,
    request_hash: r.requestHash,
    response: r.response,
    created_at: r.createdAt.toISOString(),
    expires_at: r.expiresAt.toISOString(),
  });
}

/** Parses an idempotency record; throws on a malformed one. */
export function decodeIdempotency(text: string): IdempotencyRecord {
  const o = object(JSON.parse(text));
  return {
    key: str(o, "key"),
    requestHash: str(o, "request_hash"),
    response: o.response,
    createdAt: date(o, "created_at"),
    expiresAt: date(o, "expires_at"),
  };
}

/** auth/nodes/<node_id>.json */
export function encodeNodeCredential(c: NodeCredential): string {
  return encodePlain({ node_id: c.nodeId, token_hash: c.tokenHash, created_at: c.createdAt.toISOString() });
}

/** Parses a node credential; throws on a malformed one. */
export function decodeNodeCredential(text: string): NodeCredential {
  const o = object(JSON.parse(text));
  return { nodeId: str(o, "node_id"), tokenHash: str(o, "token_hash"), createdAt: date(o, "created_at") };
}

/** auth/admin.json */
export function encodeAdminCredential(c: AdminCredential): string {
  return encodePlain({ token_hash: c.tokenHash, created_at: c.createdAt.toISOString() });
}

/** Parses the admin credential; throws on a malformed one. */
export function decodeAdminCredential(text: string): AdminCredential {
  const o = object(JSON.parse(text));
  return { tokenHash: str(o, "token_hash"), createdAt: date(o, "created_at") };
}

function object(v: unknown): Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new Error("expected a JSON object");
  return v as Record<string, unknown>;
}

function str(o: Record<string, unknown>, k: string): string {
  const v = o[k];
  if (typeof v !== "string") throw new Error(`${k} must be a string`);
  return v;
}

function date(o: Record<string, unknown>, k: string): Date {
  const d = new Date(str(o, k));
  if (Number.isNaN(d.getTime())) throw new Error(`${k} must be an RFC 3339 timestamp`);
  return d;
}
