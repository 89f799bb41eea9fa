// What an apply changes in a resource: its desired state, labels and annotations, field by field
// (`~ desired_state.tenant.compose.env.GREETING: "hi" -> "hello"`), with a line diff for
// multi-line text (a compose file). Values are shown redacted as the controller redacts what it
// shows (common/logging/redact.ts: secret-shaped keys, credentials in compose files and URLs): a
// change that only a hidden value makes is named, not shown. Pure.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { structuredPatch } from "diff";
import { redact } from "../common/logging/redact.js";

/** One changed field: added (+), removed (-) or changed (~). */
export interface FieldChange {
  op: "+" | "-" | "~";
  path: string;
  /** Redacted, as shown. */
  before?: JsonValue;
  after?: JsonValue;
}

/** The fields that differ between two JSON documents (proto JSON: absent means default). */
export function fieldChanges(before: JsonObject, after: JsonObject, prefix = ""): FieldChange[] {
  const raw = { b: flatten(before, prefix), a: flatten(after, prefix) };
  const shown = { b: flatten(redact(before), prefix), a: flatten(redact(after), prefix) };
  const paths = [...new Set([...raw.b.keys(), ...raw.a.keys()])].sort();
  const out: FieldChange[] = [];
  for (const path of paths) {
    const [b, a] = [raw.b.get(path), raw.a.get(path)];
    if (b !== undefined && a !== undefined && same(b, a)) continue;
    const op = b === undefined ? "+" : a === undefined ? "-" : "~";
    out.push({
      op,
      path,
      ...(b !== undefined ? { before: shown.b.get(path) } : {}),
      ...(a !== undefined ? { after: shown.a.get(path) } : {}),
    });
  }
  return out;
}

/** Lines for people: one per field, a line diff under a changed multi-line text. */
export function renderChanges(changes: FieldChange[], indent = "    "): string[] {
  const lines: string[] = [];
  for (const c of changes) {
    const { before, after } = c;
    if (c.op === "~" && typeof before === "string" && typeof after === "string" && (before.includes("\n") || after.includes("\n"))) {
      lines.push(`${indent}~ ${c.path}:`);
      const hunks = structuredPatch("", "", before, after, "", "", { context: 1 }).hunks;
      if (hunks.length === 0) lines.push(`${indent}    (a hidden value changed)`);
      for (const h of hunks) {
        lines.push(`${indent}    @@ -${h.oldStart},${h.oldLines} +${h.newStart},${h.newLines} @@`);
        for (const l of h.lines) lines.push(`${indent}    ${l}`);
      }
      continue;
    }
    if (c.op === "~") {
      const hidden = JSON.stringify(before) === JSON.stringify(after);
      lines.push(`${indent}~ ${c.path}: ${hidden ? "(a hidden value changed)" : `${show(before)} -> ${show(after)}`}`);
    } else lines.push(`${indent}${c.op} ${c.path}: ${show(c.op === "+" ? after : before)}`);
  }
  return lines;
}

function show(v: JsonValue | undefined): string {
  return typeof v === "string" && v.includes("\n") ? `${JSON.stringify(v.slice(0, 60))}…` : JSON.stringify(v);
}

// Leaves by dotted path: objects (messages and maps) are walked; lists are leaves.
function flatten(value: JsonValue, prefix: string, out = new Map<string, JsonValue>()): Map<string, JsonValue> {
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const entries = Object.entries(value);
    if (entries.length === 0 && prefix !== "") out.set(prefix, {});
    for (const [k, v] of entries) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else out.set(prefix, value);
  return out;
}

function same(a: JsonValue, b: JsonValue): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
