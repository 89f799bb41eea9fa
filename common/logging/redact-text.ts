// Secrets inside text: free text (a node's result message, a command's output, a log string) and
// the lines of a file that did not parse. What is hidden: the password of a URL
// (postgres://user:[REDACTED]@host), a bearer or basic credential, and the value of a
// secret-named pair (DB_PASSWORD=..., "api_key": "...", token: ...). Names and structure stay, so
// the text still says what it was about.
//
// Every function takes `hide`, which turns one secret into what is written instead (by default
// the placeholder). Secrets are met left to right, so a caller can also collect them in order.
import { isConnectionKey, isSecretKey, SECRET_NAME_IN_TEXT } from "./secret-names.js";

export const REDACTED = "[REDACTED]";

/** What replaces one secret found in text. */
export type Hide = (secret: string) => string;

const hideAll: Hide = () => REDACTED;

// One pass, left to right, three alternatives:
//   url:  scheme://user:PASSWORD@  (the password runs to the last "@" of the authority)
//   auth: Bearer TOKEN / Basic TOKEN (a credential has a digit or symbol, so "Basic checks" stays)
//   pair: NAME=VALUE, NAME: VALUE, "NAME": "VALUE" (the value: quoted, an auth credential, or a
//         run up to a space or a separator; a placeholder as a whole), kept unless NAME is a
//         secret name
const SECRETS_IN_TEXT = new RegExp(
  [
    String.raw`(?<url>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@"'<>\[\]{}]*:)(?<urlpw>[^\s/?#"'<>]*)(?=@)`,
    String.raw`(?<auth>\b(?:bearer|basic)\s+)(?<authv>(?=[a-z]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{6,})`,
    String.raw`(?<pk>(?<![A-Za-z0-9_.-])(?<q>["']?)(?<name>${SECRET_NAME_IN_TEXT})\k<q>\s*[:=]\s*)(?<pv>\[REDACTED\]|"[^"]*"|'[^']*'|(?:bearer|basic)\s+\S+|[^\s,;&}\])"']+)`,
  ].join("|"),
  "gi",
);

/** Hides URL credentials, bearer tokens and secret-named pairs in free text. */
export function redactText(text: string, hide: Hide = hideAll): string {
  if (!/[:=]|earer|asic/i.test(text)) return text;
  return text.replace(SECRETS_IN_TEXT, (match: string, ...rest: unknown[]) => {
    const g = rest.at(-1) as Record<string, string | undefined>;
    if (g.url !== undefined) return g.urlpw ? `${g.url}${hide(g.urlpw)}` : match;
    if (g.auth !== undefined) return `${g.auth}${hide(g.authv!)}`;
    if (!isSecretKey(g.name!)) return match;
    return `${g.pk}${hideValue(g.pv!, hide)}`;
  });
}

/**
 * The value of a variable named `key` with its secrets hidden: all of it under a secret name;
 * under a connection name (DATABASE_URL, *_DSN) the credentials, also in a DSN without a scheme
 * (user:password@tcp(host)/db); else whatever free text would hide.
 */
export function redactValue(key: string, value: string, hide: Hide = hideAll): string {
  if (value === "") return value;
  if (isSecretKey(key)) return hide(value);
  if (isConnectionKey(key)) {
    const bare = /^([^\s:/@]+):([^\s@]+)@/.exec(value);
    if (bare && !value.includes("://")) return `${bare[1]}:${hide(bare[2]!)}@${redactText(value.slice(bare[0].length), hide)}`;
  }
  return redactText(value, hide);
}

// A quoted value keeps its quotes; an auth value keeps its scheme.
function hideValue(v: string, hide: Hide): string {
  const q = v[0];
  if ((q === '"' || q === "'") && v.length >= 2 && v.endsWith(q)) return v.length === 2 ? v : `${q}${hide(v.slice(1, -1))}${q}`;
  const auth = /^((?:bearer|basic)\s+)(\S+)$/i.exec(v);
  return auth ? `${auth[1]}${hide(auth[2]!)}` : hide(v);
}

// - NAME=value, quoted or not: the value runs to the end of the item.
const LIST_ITEM = /^(\s*-\s+)(["']?)([A-Za-z0-9_.-]+)=(.*?)\2\s*$/;

// NAME: value / NAME=value / - NAME=value / "NAME": "value", at the start of a line.
const LINE_PAIR = /^(\s*(?:-\s+)?(["']?))([A-Za-z0-9_.-]+)\2(\s*[:=][ \t]*)(.*)$/;

/**
 * Hides secrets line by line in text that did not parse as YAML or JSON (or any config-like
 * text): a secret-named key's value to the end of its line (a JSON line keeps its quotes and
 * trailing comma), the lines of a block scalar (|, >) under such a key, and what redactText hides.
 */
export function redactLines(text: string, hide: Hide = hideAll): string {
  let blockIndent = -1;
  return text
    .split("\n")
    .map((line) => {
      const indent = line.length - line.trimStart().length;
      if (blockIndent >= 0) {
        if (line.trim() === "" || indent > blockIndent)
          return line.trim() === "" ? line : `${line.slice(0, indent)}${hide(line.slice(indent))}`;
        blockIndent = -1;
      }
      const item = LIST_ITEM.exec(line);
      if (item && isSecretKey(item[3]!) && item[4] !== "") return `${item[1]}${item[2]}${item[3]}=${hide(item[4]!)}${item[2]}`;
      const m = LINE_PAIR.exec(line);
      if (!m || !isSecretKey(m[3]!)) return redactText(line, hide);
      const [, head, , key, sep, value] = m as unknown as [string, string, string, string, string, string];
      if (/^[|>][-+0-9]*\s*(#.*)?$/.test(value)) {
        blockIndent = indent;
        return line;
      }
      if (value === "" || value.startsWith("{") || value.startsWith("[") || value.startsWith("#")) return redactText(line, hide);
      const json = /^("(?:[^"\\]|\\.)*")(\s*,?\s*)$/.exec(value);
      const kept = json ? `"${hide(json[1]!.slice(1, -1))}"${json[2]}` : hideValue(value, hide);
      return `${head}${key}${m[2]}${sep}${kept}`;
    })
    .join("\n");
}
