// The inverse of redaction, for a spec stored without its secrets (a deployment record, a
// finished order) that must run again (a rollback): each placeholder is filled with the secret
// found at the same place in the current spec (the same compose path or env key). A value whose
// non-secret part changed meanwhile keeps its stored form with the current secrets in it
// (postgres://u:[REDACTED]@old-host -> postgres://u:<current password>@old-host). When the
// secrets did not change, the restored text is byte for byte what was stored before redaction.
import { parseCompose, secretScalars, splice } from "./redact-compose.js";
import { REDACTED, redactValue, type Hide } from "./redact-text.js";

/** Thrown when a placeholder has no current secret to fill it: `missing` names where. */
export class SecretsUnavailable extends Error {
  override readonly name = "SecretsUnavailable";
  constructor(readonly missing: string[]) {
    super(`no current value for the secrets at ${missing.join(", ")}`);
  }
}

/** True when `text` holds a placeholder left by redaction. */
export function hasPlaceholder(text: string): boolean {
  return text.includes(REDACTED);
}

/** The stored compose file with its placeholders filled from the current one. */
export function restoreCompose(stored: string, current: string): string {
  if (!hasPlaceholder(stored)) return stored;
  const doc = parseCompose(stored);
  if (!doc) throw new SecretsUnavailable(["compose_file (it does not parse)"]);
  const curDoc = parseCompose(current);
  const now = new Map((curDoc ? secretScalars(curDoc, current) : []).map((s) => [s.path, s]));
  const missing: string[] = [];
  const edits = secretScalars(doc, stored)
    .filter((s) => hasPlaceholder(s.value))
    .flatMap((s) => {
      const cur = now.get(s.path);
      const filled = cur ? fill(s.value, cur.secrets) : undefined;
      if (!cur || filled === undefined) {
        missing.push(`compose_file${s.path}`);
        return [];
      }
      // Unchanged, the current scalar's own source is spliced back (its quoting and all); a
      // block scalar's lines are only valid at its own indentation, so it is written quoted.
      const block = cur.node.type === "BLOCK_LITERAL" || cur.node.type === "BLOCK_FOLDED";
      const text = filled === cur.value && !block ? current.slice(cur.range[0], cur.range[1]).trimEnd() : JSON.stringify(filled);
      return [{ range: s.range, text }];
    });
  if (missing.length > 0) throw new SecretsUnavailable(missing);
  return splice(stored, edits);
}

/** The stored env with its placeholders filled from the current env. */
export function restoreEnv(stored: Record<string, string>, current: Record<string, string>): Record<string, string> {
  const missing: string[] = [];
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(stored)) {
    if (!hasPlaceholder(v)) {
      out[k] = v;
      continue;
    }
    const secrets: string[] = [];
    const collect: Hide = (s) => {
      secrets.push(s);
      return REDACTED;
    };
    if (current[k] !== undefined) redactValue(k, current[k], collect);
    const filled = current[k] === undefined ? undefined : fill(v, secrets);
    if (filled === undefined) missing.push(`env.${k}`);
    else out[k] = filled;
  }
  if (missing.length > 0) throw new SecretsUnavailable(missing);
  return out;
}

// The placeholders of `redacted`, in order, replaced by `secrets`; undefined when they differ in number.
function fill(redacted: string, secrets: string[]): string | undefined {
  const parts = redacted.split(REDACTED);
  if (parts.length - 1 !== secrets.length) return undefined;
  return parts.reduce((acc, part, i) => (i === 0 ? part : acc + secrets[i - 1] + part), "");
}
