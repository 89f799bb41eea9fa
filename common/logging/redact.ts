// Secret redaction applied to everything that leaves the process as a record: logs, events,
// snapshots, the explain route, result messages. One walk over a JSON-like value: a value under a
// secret-named key is hidden whole (DB_PASSWORD, API_KEY, *_TOKEN...), at any depth; a compose
// file (compose_file) is redacted as a compose file (redact-compose.ts: block and flow YAML,
// JSON); every other string is scrubbed as text (URL credentials, bearer tokens, secret pairs),
// with the credentials a connection-named key (DATABASE_URL, *_DSN) carries hidden.
import { redactCompose } from "./redact-compose.js";
import { REDACTED, redactText, redactValue } from "./redact-text.js";
import { isSecretKey } from "./secret-names.js";

export { REDACTED, redactLines, redactText, redactValue } from "./redact-text.js";
export { isConnectionKey, isSecretKey } from "./secret-names.js";
export { redactCompose } from "./redact-compose.js";

const COMPOSE_KEYS = new Set(["compose_file", "composeFile"]);
// Fields that name secret values (variable names, secret ids and value names, versions) and never
// hold one: kept as they are, though their names and keys look secret (secret_env: {DB_PASSWORD: …}),
// when they have the shape of references (isReference); anything else under such a name (an env
// variable called secret_env, say) is redacted like any value.
const REFERENCE_KEYS = new Set([
  "secret_env",
  "secretEnv",
  "secret_files",
  "secretFiles",
  "secret_uses",
  "secretUses",
  "registry_secret_ids",
  "registrySecretIds",
]);

/** Returns a deep copy of `value` with secrets replaced by "[REDACTED]". */
export function redact<T>(value: T): T {
  return walk(value, undefined, false, 0) as T;
}

// References are objects of ids, names and versions only: {secretId, key} (proto JSON: secret_id),
// SecretUse (also version), a map of them by name, a list of them, or a list of secret ids.
const REFERENCE_FIELDS = new Set(["$typeName", "secretId", "secret_id", "key", "version"]);
function isReference(v: unknown): boolean {
  const ref = (x: unknown) =>
    typeof x === "object" &&
    x !== null &&
    !Array.isArray(x) &&
    Object.entries(x).every(
      ([k, f]) => REFERENCE_FIELDS.has(k) && (typeof f === "string" || typeof f === "bigint" || typeof f === "number"),
    );
  if (Array.isArray(v)) return v.every((x) => ref(x) || (typeof x === "string" && /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(x)));
  return typeof v === "object" && v !== null && Object.values(v).every(ref);
}

// A secret resource's spec sits under the key `secret` (the resource kind): its values and their
// sealed forms are hidden whole, what describes them (tenant, names, versions, fingerprints, who
// set them) is shown, as for any other resource.
const SECRET_SPEC_FIELDS = new Set(["$typeName", "tenant_id", "tenantId", "values", "remove", "sealed", "entries", "registry"]);
const SECRET_SPEC_VALUES = new Set(["values", "sealed"]);
function isSecretSpec(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && Object.keys(v).every((k) => SECRET_SPEC_FIELDS.has(k));
}
function secretSpec(spec: Record<string, unknown>, depth: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(spec)) out[k] = walk(v, k, SECRET_SPEC_VALUES.has(k), depth + 1);
  return out;
}

function walk(value: unknown, key: string | undefined, secret: boolean, depth: number): unknown {
  if (depth > 32 || value === null || value === undefined) return value;
  if (typeof value === "string") {
    if (value === "") return value;
    if (secret) return REDACTED;
    if (key !== undefined && COMPOSE_KEYS.has(key)) return redactCompose(value);
    return key !== undefined ? redactValue(key, value) : redactText(value);
  }
  if (typeof value !== "object") return secret ? REDACTED : value;
  if (Array.isArray(value)) return value.map((v) => walk(v, key, secret, depth + 1));
  if (value instanceof Date || value instanceof Uint8Array || value instanceof Error) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (k === "secret" && !secret && isSecretSpec(v)) {
      out[k] = secretSpec(v, depth + 1);
      continue;
    }
    out[k] = REFERENCE_KEYS.has(k) && !secret && isReference(v) ? structuredClone(v) : walk(v, k, secret || isSecretKey(k), depth + 1);
  }
  return out;
}
