// Label selectors: "env=prod,region!=us,tier" as used by ListResources, and the equality maps of
// placement policies. Parsed once at the boundary into terms; matching is a pure function.
import { invalid } from "../base/errors.js";

/** One term: the label equals / differs from a value, or merely exists. */
export type LabelTerm = { key: string; op: "=" | "!="; value: string } | { key: string; op: "exists" };

const KEY = /^[A-Za-z0-9]([A-Za-z0-9._/-]{0,126}[A-Za-z0-9])?$/;
const VALUE = /^[A-Za-z0-9._:/@+-]{0,256}$/;

/** Parses a selector string; an empty string selects everything. Throws INVALID_REQUEST naming `field`. */
export function parseLabelSelector(text: string, field = "label_selector"): LabelTerm[] {
  if (text.trim() === "") return [];
  if (text.length > 2048) throw invalid(`${field} is longer than 2048 characters`, { field });
  return text.split(",").map((raw) => {
    const part = raw.trim();
    const m = /^([^=!]+?)\s*(!=|==|=)\s*(.*)$/.exec(part);
    const key = (m ? m[1]! : part).trim();
    if (!KEY.test(key))
      throw invalid(`${field}: ${JSON.stringify(key.slice(0, 64))} is not a label key`, { field, term: part.slice(0, 64) });
    if (!m) return { key, op: "exists" as const };
    const value = m[3]!.trim();
    if (!VALUE.test(value))
      throw invalid(`${field}: ${JSON.stringify(value.slice(0, 64))} is not a label value`, { field, term: part.slice(0, 64) });
    return { key, op: m[2] === "!=" ? ("!=" as const) : ("=" as const), value };
  });
}

/** True when `labels` satisfy every term. */
export function matchesTerms(labels: Record<string, string>, terms: LabelTerm[]): boolean {
  return terms.every((t) => {
    const has = Object.hasOwn(labels, t.key);
    if (t.op === "exists") return has;
    if (t.op === "=") return has && labels[t.key] === t.value;
    return !has || labels[t.key] !== t.value;
  });
}

/** True when `labels` carry every key/value of an equality selector (an empty selector matches all). */
export function matchesSelector(labels: Record<string, string>, selector: Record<string, string>): boolean {
  return Object.entries(selector).every(([k, v]) => Object.hasOwn(labels, k) && labels[k] === v);
}

/** Checks one label key (e.g. of a node's trusted_label_keys). */
export function checkLabelKey(key: string, field: string): void {
  if (!KEY.test(key)) throw invalid(`${field}: ${JSON.stringify(key.slice(0, 64))} is not a label key`, { field });
}

/** Checks the keys and values of an equality selector from a spec (or of a label map). */
export function checkSelector(selector: Record<string, string>, field: string): void {
  for (const [k, v] of Object.entries(selector)) {
    if (!KEY.test(k)) throw invalid(`${field}: ${JSON.stringify(k.slice(0, 64))} is not a label key`, { field });
    if (!VALUE.test(v)) throw invalid(`${field}.${k}: ${JSON.stringify(v.slice(0, 64))} is not a label value`, { field: `${field}.${k}` });
  }
}
