// How records look on disk. Contract messages are proto JSON with proto field names, pretty
// printed so an operator can read and diff them; the store's own records (idempotency replays,
// credentials) are plain JSON with snake_case keys and RFC 3339 timestamps.
import { fromJson, toJson, type DescMessage, type JsonObject, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { ResourceDiffSchema, SnapshotSchema, type Snapshot } from "../../gen/skipper/v1/snapshot_pb.js";
import { ResourceSchema } from "../../gen/skipper/v1/resource_pb.js";
import { ApiKeySchema } from "../../gen/skipper/v1/access_pb.js";
import { EnrollmentTokenSchema } from "../../gen/skipper/v1/enrollment_service_pb.js";
import type { AdminCredential, ApiKeyRecord, EnrollmentTokenRecord, IdempotencyRecord, NodeCertificate, NodeCredential } from "./store.js";

/** Proto JSON text for `msg`: 2-space indent and a trailing newline. */
export function encodeMessage<D extends DescMessage>(schema: D, msg: MessageShape<D>): string {
  return `${JSON.stringify(toJson(schema, msg, { useProtoFieldName: true }), null, 2)}\n`;
}

/**
 * encodeMessage(SnapshotSchema, s), the same text, made a slice of resources and diffs at a time
 * with a yield to the event loop in between: a system snapshot holds every resource, and encoding
 * it in one go would hold up every other call for as long.
 */
export async function encodeSnapshot(s: Snapshot, slice = 200): Promise<string> {
  const opts = { useProtoFieldName: true } as const;
  const head = toJson(SnapshotSchema, { ...s, resources: [], diffs: [] }, opts) as JsonObject;
  const arrays = new Map<string, string>();
  const sliced = async <T>(key: string, list: T[], one: (m: T) => JsonValue): Promise<void> => {
    if (list.length === 0) return; // toJson leaves empty repeated fields out
    const texts: string[] = [];
    for (let i = 0; i < list.length; i += slice) {
      if (i > 0) await new Promise((r) => setImmediate(r));
      // Each element as JSON.stringify(…, null, 2) writes it two levels down.
      for (const m of list.slice(i, i + slice)) texts.push(JSON.stringify(one(m), null, 2).replace(/^/gm, "    "));
    }
    arrays.set(key, `[\n${texts.join(",\n")}\n  ]`);
  };
  await sliced("resources", s.resources, (r) => toJson(ResourceSchema, r, opts));
  await sliced("diffs", s.diffs, (d) => toJson(ResourceDiffSchema, d, opts));
  // The fields in the order toJson writes them (declaration order), each array as a marker that
  // its text then replaces.
  const ordered: JsonObject = {};
  for (const f of SnapshotSchema.fields) {
    if (arrays.has(f.name)) ordered[f.name] = `\u0000${f.name}`;
    else if (head[f.name] !== undefined) ordered[f.name] = head[f.name]!;
  }
  let text = JSON.stringify(ordered, null, 2);
  for (const [key, value] of arrays) text = text.replace(JSON.stringify(`\u0000${key}`), () => value);
  return `${text}\n`;
}

/** Parses proto JSON text; unknown fields (from a newer controller) are tolerated. */
export function decodeMessage<D extends DescMessage>(schema: D, text: string): MessageShape<D> {
  return fromJson(schema, JSON.parse(text) as JsonValue, { ignoreUnknownFields: true });
}

/** Plain JSON text with the same layout as messages. */
export function encodePlain(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
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
  return encodePlain({
    node_id: c.nodeId,
    token_hash: c.tokenHash,
    created_at: c.createdAt.toISOString(),
    ...(c.certificates === undefined ? {} : { certificates: c.certificates.map(encodeNodeCertificate) }),
  });
}

/** Parses a node credential; throws on a malformed one. */
export function decodeNodeCredential(text: string): NodeCredential {
  const o = object(JSON.parse(text));
  const certs = o.certificates;
  if (certs !== undefined && !Array.isArray(certs)) throw new Error("certificates must be a list");
  return {
    nodeId: str(o, "node_id"),
    tokenHash: str(o, "token_hash"),
    createdAt: date(o, "created_at"),
    ...(certs === undefined
      ? {}
      : {
          certificates: certs.map(decodeNodeCertificate),
        }),
  };
}

/** One certificate of a node credential, as the file store and the PostgreSQL store keep it. */
export function encodeNodeCertificate(c: NodeCertificate): Record<string, unknown> {
  return {
    serial: c.serial,
    not_after: c.notAfter.toISOString(),
    ...(c.lifetimeMs === undefined ? {} : { lifetime_ms: c.lifetimeMs }),
    ...(c.underTokenHash === undefined ? {} : { under_token_hash: c.underTokenHash }),
  };
}

/** Parses what encodeNodeCertificate wrote; throws on a malformed one. */
export function decodeNodeCertificate(v: unknown): NodeCertificate {
  const c = object(v);
  const lifetime = c.lifetime_ms;
  if (lifetime !== undefined && typeof lifetime !== "number") throw new Error("lifetime_ms must be a number");
  const under = c.under_token_hash;
  if (under !== undefined && typeof under !== "string") throw new Error("under_token_hash must be a string");
  return {
    serial: str(c, "serial"),
    notAfter: date(c, "not_after"),
    ...(lifetime === undefined ? {} : { lifetimeMs: lifetime }),
    ...(under === undefined ? {} : { underTokenHash: under }),
  };
}

/** auth/enrollment/<id>.json: the token as the API shows it, and its secret's hash. */
export function encodeEnrollmentToken(r: EnrollmentTokenRecord): string {
  return encodePlain({ token: toJson(EnrollmentTokenSchema, r.token, { useProtoFieldName: true }), secret_hash: r.secretHash });
}

/** Parses an enrollment token record; throws on a malformed one. */
export function decodeEnrollmentToken(text: string): EnrollmentTokenRecord {
  const o = object(JSON.parse(text));
  return { token: fromJson(EnrollmentTokenSchema, o.token as JsonValue, { ignoreUnknownFields: true }), secretHash: str(o, "secret_hash") };
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

/** auth/keys/<id>.json: the key as the API shows it, and its secrets' hashes. */
export function encodeApiKey(r: ApiKeyRecord): string {
  return encodePlain({
    key: toJson(ApiKeySchema, r.key, { useProtoFieldName: true }),
    secret_hash: r.secretHash,
    ...(r.previousSecretHash === undefined ? {} : { previous_secret_hash: r.previousSecretHash }),
  });
}

/** Parses an API key record; throws on a malformed one. */
export function decodeApiKey(text: string): ApiKeyRecord {
  const o = object(JSON.parse(text));
  const previous = o.previous_secret_hash;
  if (previous !== undefined && typeof previous !== "string") throw new Error("previous_secret_hash must be a string");
  return {
    key: fromJson(ApiKeySchema, o.key as JsonValue, { ignoreUnknownFields: true }),
    secretHash: str(o, "secret_hash"),
    ...(previous === undefined ? {} : { previousSecretHash: previous }),
  };
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
