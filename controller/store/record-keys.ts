// How records are keyed in every backend: sortable keys (the file store's in-memory indexes, the
// PostgreSQL store's sort_key columns and page tokens) and the UTC day that dates events and audit
// entries (the file store's day directories and files, PostgreSQL's day columns).
import type { Timestamp } from "@bufbuild/protobuf/wkt";

// Proto timestamps span years 1-9999; shifting by this makes every valid seconds value >= 0.
const SECONDS_OFFSET = 62_135_596_800n;

/** A fixed-width, lexicographically sortable rendering of a timestamp (absent sorts first). */
export function timestampKey(ts: Timestamp | undefined): string {
  let s = (ts?.seconds ?? 0n) + SECONDS_OFFSET;
  if (s < 0n) s = 0n;
  if (s > 999_999_999_999n) s = 999_999_999_999n;
  const nanos = Math.min(Math.max(ts?.nanos ?? 0, 0), 999_999_999);
  return s.toString().padStart(12, "0") + nanos.toString().padStart(9, "0");
}

/** The time a timestampKey stands for, to the millisecond (clamped keys give the clamped time). */
export function timestampKeyDate(key: string): Date {
  const seconds = BigInt(key.slice(0, 12)) - SECONDS_OFFSET;
  return new Date(Number(seconds) * 1000 + Math.floor(Number(key.slice(12, 21)) / 1e6));
}

/** Joins tuple parts into one key; NUL sorts below every id character. */
export function tupleKey(...parts: string[]): string {
  return parts.join("\0");
}

/** The UTC day (YYYY-MM-DD) of `at`: an event's day directory, an audit entry's segment. */
export function eventDay(at: Date): string {
  return at.toISOString().slice(0, 10);
}
