// Secret redaction applied to everything that leaves the process as a record: logs, events and
// snapshots. A value is hidden when its key looks like a secret, at any depth, including compose
// `env` entries (DB_PASSWORD, API_KEY...) and `KEY=value` / `key: value` lines of compose files.

export const REDACTED = "[REDACTED]";

const SECRET_KEY = /(token|secret|passw(or)?d|passwd|authorization|api[_-]?key|apikey|private[_-]?key|credential|cookie|session[_-]?key)/i;

/** True when a key name looks like it holds a secret. */
export function isSecretKey(key: string): boolean {
  return SECRET_KEY.test(key);
}

const SECRET_LINE =
  /^(\s*(?:-\s*)?["']?[A-Za-z0-9_.-]*(?:token|secret|passw(?:or)?d|passwd|authorization|api[_-]?key|apikey|private[_-]?key|credential)[A-Za-z0-9_.-]*["']?\s*[:=]\s*)(\S.*)$/gim;

/** Hides values of secret-looking keys inside YAML/.env-style text (e.g. a compose file). */
export function redactText(text: string): string {
  return text.replace(SECRET_LINE, (_m, head: string) => `${head}${REDACTED}`);
}

/** Returns a deep copy of `value` with secrets replaced by "[REDACTED]". */
export function redact<T>(value: T): T {
  return walk(value, 0) as T;
}

function walk(value: unknown, depth: number): unknown {
  if (depth > 32 || value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map((v) => walk(v, depth + 1));
  if (value instanceof Date || value instanceof Uint8Array || value instanceof Error) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (isSecretKey(k) && v !== null && v !== undefined && v !== "") out[k] = REDACTED;
    else if ((k === "compose_file" || k === "composeFile") && typeof v === "string") out[k] = redactText(v);
    else out[k] = walk(v, depth + 1);
  }
  return out;
}
