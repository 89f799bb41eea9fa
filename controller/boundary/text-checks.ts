// Text PostgreSQL cannot store: a NUL character (U+0000) in a text or jsonb value is refused by
// the server, so a request holding one was a 500 on the PostgreSQL store and stored as it was on
// the file store. Both stores now see the same thing: a person's request holding one is
// INVALID_REQUEST naming the field; what an agent reports (a command's output may hold anything)
// has each NUL replaced by U+FFFD and is stored.
import { isMessage, type Message } from "@bufbuild/protobuf";
import { invalid } from "../base/errors.js";

const NUL = "\u0000";

/** The path (snake_case) of the first string in `message` holding a NUL, or undefined. */
export function nulPath(message: Message): string | undefined {
  return find(message, "", 0);
}

/** Replaces every NUL in `message`'s strings with U+FFFD, in place; returns how many strings changed. */
export function replaceNul(message: Message): number {
  return scrub(message as unknown as Record<string, unknown>, 0);
}

/** Throws INVALID_REQUEST when `message` holds a NUL anywhere. */
export function refuseNul(message: Message): void {
  const path = nulPath(message);
  if (path !== undefined) throw invalid(`${path || "the request"} holds a NUL character, which cannot be stored`, { field: path });
}

function find(v: unknown, path: string, depth: number): string | undefined {
  if (depth > 64) return undefined;
  if (typeof v === "string") return v.includes(NUL) ? path : undefined;
  if (typeof v !== "object" || v === null || v instanceof Uint8Array || v instanceof Date) return undefined;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const hit = find(v[i], `${path}[${i}]`, depth + 1);
      if (hit !== undefined) return hit;
    }
    return undefined;
  }
  const message = isMessage(v);
  for (const [k, x] of Object.entries(v)) {
    if (k === "$typeName") continue;
    // A map's keys are text too.
    const key = message ? snake(k) : k;
    if (!message && k.includes(NUL)) return join(path, key);
    // A oneof ({case, value}) is named by its case, as in proto JSON.
    const oneof = message && typeof x === "object" && x !== null && "case" in x && "value" in x;
    const hit = oneof
      ? find((x as { value: unknown }).value, join(path, snake(String((x as { case: unknown }).case))), depth + 1)
      : find(x, join(path, key), depth + 1);
    if (hit !== undefined) return hit;
  }
  return undefined;
}

function scrub(v: Record<string, unknown> | unknown[], depth: number): number {
  if (depth > 64) return 0;
  let changed = 0;
  const fix = (x: unknown): unknown => {
    if (typeof x === "string" && x.includes(NUL)) {
      changed++;
      return x.replaceAll(NUL, "\uFFFD");
    }
    if (typeof x === "object" && x !== null && !(x instanceof Uint8Array) && !(x instanceof Date)) {
      changed += scrub(x as Record<string, unknown>, depth + 1);
    }
    return x;
  };
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) v[i] = fix(v[i]);
    return changed;
  }
  for (const k of Object.keys(v)) {
    if (k === "$typeName") continue;
    const value = fix(v[k]);
    if (k.includes(NUL)) {
      delete v[k];
      v[k.replaceAll(NUL, "\uFFFD")] = value;
      changed++;
    } else v[k] = value;
  }
  return changed;
}

function join(path: string, key: string): string {
  return path === "" ? key : `${path}.${key}`;
}

function snake(k: string): string {
  return k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
