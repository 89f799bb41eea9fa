// How the CLI shows what it read: tables (`-o table`, `-o wide`) in kubectl's plain style, drawn by
// cli-table3, or documents (`-o json`, `-o yaml`) in the REST API's own JSON shape (proto field
// names), so `skipper get ... -o yaml > f && skipper apply -f f` goes round.
import { toJson, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import Table from "cli-table3";
import { stringify } from "yaml";
import { CliError } from "./errors.js";

export const OUTPUT_FORMATS = ["table", "wide", "json", "yaml"] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

/** `-o` checked. */
export function outputFormat<F extends OutputFormat = OutputFormat>(
  text: string | undefined,
  allowed: readonly F[] = OUTPUT_FORMATS as readonly OutputFormat[] as readonly F[],
): F {
  const f = (text ?? "table") as F;
  if (!allowed.includes(f)) throw new CliError(`-o must be one of ${allowed.join(", ")}, got ${JSON.stringify(text)}`);
  return f;
}

const PLAIN = {
  top: "",
  "top-mid": "",
  "top-left": "",
  "top-right": "",
  bottom: "",
  "bottom-mid": "",
  "bottom-left": "",
  "bottom-right": "",
  left: "",
  "left-mid": "",
  mid: "",
  "mid-mid": "",
  right: "",
  "right-mid": "",
  middle: "   ",
};

/** A table without borders: a header row of capitals, then one row per item. */
export function table(head: string[], rows: string[][]): string {
  const t = new Table({ head, chars: PLAIN, style: { head: [], border: [], "padding-left": 0, "padding-right": 0 } });
  t.push(...rows);
  return t
    .toString()
    .split("\n")
    .map((l) => l.trimEnd())
    .join("\n");
}

/** A proto message as the REST API shows it. */
export function asJson<D extends DescMessage>(schema: D, msg: MessageShape<D>): JsonValue {
  return toJson(schema, msg, { useProtoFieldName: true });
}

/** One document (or a list: a JSON array, YAML documents one after the other). */
export function documents(format: "json" | "yaml", values: JsonValue[], list: boolean): string {
  if (format === "json") return JSON.stringify(list ? values : values[0], null, 2);
  return values.map((v) => stringify(v, { lineWidth: 0 }).trimEnd()).join("\n---\n");
}

/** How long ago `ts` was, as kubectl shows ages: 45s, 12m, 3h, 5d; "-" when unset. */
export function age(ts: Timestamp | undefined, now = Date.now()): string {
  if (!ts) return "-";
  const s = Math.max(0, Math.round((now - timestampDate(ts).getTime()) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172_800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86_400)}d`;
}

/** A timestamp as RFC 3339 (seconds), "-" when unset. */
export function when(ts: Timestamp | undefined): string {
  return ts
    ? timestampDate(ts)
        .toISOString()
        .replace(/\.\d{3}Z$/, "Z")
    : "-";
}

/** `a=1,b=2`, or "-" for none. */
export function labels(map: Record<string, string> | undefined): string {
  const entries = Object.entries(map ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return entries.length > 0 ? entries.map(([k, v]) => `${k}=${v}`).join(",") : "-";
}

/** An enum value's short name (CONVERGED for CONVERGENCE_STATUS_CONVERGED), "-" when unspecified. */
export function enumName(e: Record<number, string>, value: number): string {
  return value === 0 ? "-" : (e[value] ?? String(value));
}

/** `text` cut to `max` characters with an ellipsis. */
export function cut(text: string, max: number): string {
  const one = text.replace(/\s+/g, " ").trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}
