// The audit trail's chain, shared by both stores and the verifier: how an entry is stored and how
// its hash is made. An entry is kept as one line of canonical proto JSON: proto field names,
// fields at their default value left out, keys sorted at every level, no spaces (canonical-json.ts).
// Its hash is hex SHA-256 of
//
//   previous_hash + "\n" + the canonical JSON of the entry without `hash` and `previous_hash`
//
// ("" as previous_hash for the first entry ever written). The hash is taken over the JSON as
// stored, not over a parsed message, so that anyone can check a chain with a JSON parser and
// SHA-256 (docs/audit.md), and a field the contract gains later leaves the hashes of older
// entries as they were.
import { clone, create, fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import { AuditEntrySchema, type AuditEntry } from "../../gen/skipper/v1/audit_service_pb.js";
import { canonicalJson, sha256 } from "../base/canonical-json.js";
import { invalid } from "../base/errors.js";
import type { AuditDraft } from "./store.js";
import { eventDay } from "./record-keys.js";

/** A stored entry may be at most this long: one call's names and ids, never a request body. */
export const MAX_AUDIT_TEXT = 16 * 1024;

const HASH_PATTERN = /^[0-9a-f]{64}$/;

/** What the next entry needs of the last one. */
export interface AuditHead {
  sequence: bigint;
  hash: string;
  time: Timestamp;
}

/** Hex SHA-256 of an entry given as its proto JSON object (see the top of this file). */
export function auditHash(json: JsonObject): string {
  const previous = typeof json.previous_hash === "string" ? json.previous_hash : "";
  const content: JsonObject = {};
  for (const [key, value] of Object.entries(json)) if (key !== "hash" && key !== "previous_hash") content[key] = value;
  return sha256(`${previous}\n${canonicalJson(content)}`);
}

/** The stored text of an entry: its canonical proto JSON on one line (without the newline). */
export function auditText(entry: AuditEntry): string {
  return canonicalJson(toJson(AuditEntrySchema, entry, { useProtoFieldName: true }));
}

/**
 * `draft` as the entry after `head` (undefined: the first ever written), hashed, with its stored
 * text. Its time is the draft's, or the head's when that is later, so time never goes back along
 * the chain. Throws INVALID_REQUEST for a draft without a time or too long to store.
 */
export function chainAuditEntry(draft: AuditDraft, head: AuditHead | undefined): { entry: AuditEntry; text: string } {
  if (!draft.time) throw invalid("an audit entry needs a time", { field: "time" });
  // create() hands back a message it is given as it is: the clone keeps the caller's objects out.
  const entry = clone(AuditEntrySchema, create(AuditEntrySchema, draft));
  if (head && isBefore(entry.time!, head.time)) entry.time = clone(TimestampSchema, head.time);
  entry.sequence = (head?.sequence ?? 0n) + 1n;
  entry.previousHash = head?.hash ?? "";
  entry.hash = auditHash(toJson(AuditEntrySchema, entry, { useProtoFieldName: true }) as JsonObject);
  const text = auditText(entry);
  if (text.length > MAX_AUDIT_TEXT)
    throw invalid(`an audit entry may be at most ${MAX_AUDIT_TEXT} characters as stored`, { field: "entry" });
  return { entry, text };
}

/** One stored line read back: the entry and its JSON object, or why it is not an entry. */
export type AuditLine = { ok: true; entry: AuditEntry; json: JsonObject } | { ok: false; reason: string; sequence: bigint };

/** Parses a stored line (a newer controller's extra fields are kept in `json`, not in `entry`). */
export function readAuditLine(text: string): AuditLine {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return notAnEntry(0n);
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) return notAnEntry(0n);
  let entry: AuditEntry;
  try {
    entry = fromJson(AuditEntrySchema, json as JsonObject, { ignoreUnknownFields: true });
  } catch {
    return notAnEntry(0n);
  }
  if (entry.sequence <= 0n || !entry.time || !HASH_PATTERN.test(entry.hash)) return notAnEntry(entry.sequence > 0n ? entry.sequence : 0n);
  if (entry.previousHash !== "" && !HASH_PATTERN.test(entry.previousHash)) return notAnEntry(entry.sequence);
  return { ok: true, entry, json: json as JsonObject };
}

/** The head a chain has once `entry` is its last. */
export function headOf(entry: AuditEntry): AuditHead {
  return { sequence: entry.sequence, hash: entry.hash, time: entry.time ?? create(TimestampSchema) };
}

/** An entry's time to the millisecond, rounded down (so "at or after" a Date means what it says). */
export function auditTime(entry: { time?: Timestamp }): Date {
  const t = entry.time ?? create(TimestampSchema);
  return new Date(Number(t.seconds) * 1000 + Math.floor(t.nanos / 1_000_000));
}

/** The UTC day (YYYY-MM-DD) an entry is stored under: the day of its time. */
export function auditDay(entry: { time?: Timestamp }): string {
  return eventDay(auditTime(entry));
}

function isBefore(a: Timestamp, b: Timestamp): boolean {
  return a.seconds < b.seconds || (a.seconds === b.seconds && a.nanos < b.nanos);
}

function notAnEntry(sequence: bigint): AuditLine {
  return { ok: false, reason: "line is not a valid entry", sequence };
}
