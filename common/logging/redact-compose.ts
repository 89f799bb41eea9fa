// Secrets in a compose file, whether it is block YAML, flow YAML ({DB_PASSWORD: x}, [A=b]) or
// JSON. The file is parsed (the `yaml` package reads all three) and only the scalars that hold a
// secret are rewritten in place, by their source offsets: the rest of the file keeps its bytes,
// comments and layout, and the result parses as the original did. What holds a secret:
//   - any value under a secret-named key (environment maps, x- extensions, anything nested under
//     such a key, an alias used there: its anchor is hidden too);
//   - a KEY=value list item (environment lists, command flags) with a secret KEY;
//   - credentials inside a value: URL passwords anywhere, and what a connection-named key
//     (DATABASE_URL, *_DSN) carries.
// The names under compose's own `secrets:` element are references, not values, and stay.
// A file that does not parse is scrubbed line by line (redactLines) instead.
import { isAlias, isMap, isScalar, isSeq, parseDocument, type Document, type Node, type Scalar } from "yaml";
import { isSecretKey } from "./secret-names.js";
import { REDACTED, redactLines, redactText, redactValue, type Hide } from "./redact-text.js";

/** One scalar of a parsed compose file that holds secrets. */
export interface SecretScalar {
  node: Scalar;
  /** Where it is, stable across edits of other values: services.db.environment.DB_PASSWORD. */
  path: string;
  /** Its value as text (a number's or boolean's as written). */
  value: string;
  /** The value with each secret replaced by the placeholder. */
  redacted: string;
  /** The secrets it holds, in order. */
  secrets: string[];
  /** Its source offsets [start, end). */
  range: [number, number];
}

// Redacted compose files by their text. A fleet deploys the same few files over and over, and
// each snapshot, event and diff redacts them again: parsing YAML was most of a snapshot's cost.
// Bounded in entries and in the size of each text kept.
const CACHE_ENTRIES = 256;
const CACHE_MAX_TEXT = 16 * 1024;
const redacted = new Map<string, string>();

/** Hides the secrets of a compose file (YAML or JSON); one that does not parse, line by line. */
export function redactCompose(text: string): string {
  if (text.length > CACHE_MAX_TEXT) return redactComposeText(text);
  let out = redacted.get(text);
  if (out === undefined) {
    out = redactComposeText(text);
    if (redacted.size >= CACHE_ENTRIES) redacted.delete(redacted.keys().next().value!);
    redacted.set(text, out);
  }
  return out;
}

function redactComposeText(text: string): string {
  if (text.trim() === "") return text;
  const doc = parseCompose(text);
  if (!doc) return redactLines(text);
  const edits = secretScalars(doc, text)
    .filter((s) => s.redacted !== s.value)
    .map((s) => ({ range: s.range, text: JSON.stringify(s.redacted) }));
  return redactComments(splice(text, edits));
}

/** The parsed file, or undefined when it does not parse (or holds more than one document). */
export function parseCompose(text: string): Document | undefined {
  try {
    const doc = parseDocument(text, { uniqueKeys: false });
    return doc.errors.length > 0 ? undefined : doc;
  } catch {
    return undefined;
  }
}

const KEY_VALUE = /^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$/s;

/** Every scalar of `doc` (parsed from `text`) that holds a secret, in document order. */
export function secretScalars(doc: Document, text: string): SecretScalar[] {
  const out = new Map<Scalar, SecretScalar>();
  const visit = (node: unknown, path: string, key: string | undefined, secret: boolean, names: boolean, depth: number): void => {
    if (depth > 64 || node === null || node === undefined) return;
    if (isAlias(node)) {
      // An alias under a secret key hides what it points at, where it is defined.
      const target = secret ? node.resolve(doc) : undefined;
      if (target) visit(target, path, key, true, names, depth + 1);
      return;
    }
    if (isScalar(node)) {
      const found = secretScalar(node, text, path, key, secret);
      if (found && !out.has(node)) out.set(node, found);
      return;
    }
    if (isMap(node)) {
      for (const pair of node.items) {
        const k = isScalar(pair.key) ? String(pair.key.value) : undefined;
        const references = k === "secrets"; // compose's secrets: names and files, not values
        visit(
          pair.value,
          `${path}.${k ?? "?"}`,
          references ? undefined : k,
          secret || (names && !references && k !== undefined && isSecretKey(k)),
          names && !references,
          depth + 1,
        );
      }
      return;
    }
    if (isSeq(node)) {
      node.items.forEach((item, i) => {
        const kv = isScalar(item) && typeof item.value === "string" ? KEY_VALUE.exec(item.value) : null;
        visit(item, kv ? `${path}.${kv[1]}` : `${path}[${i}]`, key, secret, names, depth + 1);
      });
    }
  };
  visit(doc.contents as Node | null, "", undefined, false, true, 0);
  return [...out.values()].sort((a, b) => a.range[0] - b.range[0]);
}

function secretScalar(node: Scalar, text: string, path: string, key: string | undefined, secret: boolean): SecretScalar | undefined {
  const range = node.range;
  if (!range || node.value === null || node.value === undefined) return undefined;
  const source = text.slice(range[0], range[1]);
  const value = typeof node.value === "string" ? node.value : source.trimEnd();
  if (value === "" || (!secret && typeof node.value !== "string")) return undefined;
  const secrets: string[] = [];
  const hide: Hide = (s) => {
    secrets.push(s);
    return REDACTED;
  };
  const kv = KEY_VALUE.exec(value);
  const redacted = secret
    ? hide(value)
    : kv
      ? `${kv[1]}=${redactValue(kv[1]!, kv[2]!, hide)}`
      : key !== undefined
        ? redactValue(key, value, hide)
        : redactText(value, hide);
  return secrets.length > 0 ? { node, path, value, redacted, secrets, range: [range[0], range[1]] } : undefined;
}

/** `text` with each range replaced; a replaced block scalar keeps the line break after it. */
export function splice(text: string, edits: { range: [number, number]; text: string }[]): string {
  let out = "";
  let at = 0;
  for (const e of [...edits].sort((a, b) => a.range[0] - b.range[0])) {
    if (e.range[0] < at) continue;
    const old = text.slice(e.range[0], e.range[1]);
    out += text.slice(at, e.range[0]) + e.text + old.slice(old.trimEnd().length);
    at = e.range[1];
  }
  return out + text.slice(at);
}

// Comments are not part of the parsed values: a secret written in one is hidden line by line.
function redactComments(text: string): string {
  if (!text.includes("#")) return text;
  return text
    .split("\n")
    .map((line) => {
      const at = line.search(/(^|\s)#/);
      if (at < 0) return line;
      const start = line.indexOf("#", at);
      return line.slice(0, start + 1) + redactLines(line.slice(start + 1));
    })
    .join("\n");
}
