// What an apply changes in a resource, as lines for people: one per field
// (`~ desired_state.tenant.compose.env.GREETING: "hi" -> "hello"`), with a line diff for
// multi-line text (a compose file). The changes themselves, redacted, come from
// common/desired-diff.ts (the controller's Git sync tells drift by the same comparison). Pure.
import type { JsonValue } from "@bufbuild/protobuf";
import { structuredPatch } from "diff";
import type { FieldChange } from "../common/desired-diff.js";

export type { FieldChange } from "../common/desired-diff.js";

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
