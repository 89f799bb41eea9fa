// The order of an artifact's versions, newest first: by semver (descending) when both tags parse as
// versions (a leading "v" allowed), otherwise by creation time (newest first), then by id. The tag
// keeps its own spelling ("v1.2.0" stays "v1.2.0"); only the comparison reads the parsed form.
// Sorted once per artifact by the world read and shared by every environment promoting it.
import semver from "semver";

export interface Orderable {
  id: string;
  version: string;
  createdAtMs: number;
}

const parsed = new Map<string, string | null>();

/** The semver form of a tag ("v1.2.0" -> "1.2.0"), or null when it is not a version. */
export function semverOf(tag: string): string | null {
  let v = parsed.get(tag);
  if (v === undefined) {
    v = semver.clean(tag, { loose: true });
    if (parsed.size > 10_000) parsed.clear();
    parsed.set(tag, v);
  }
  return v;
}

/** Negative when `a` is newer than `b` (sorts newest first). */
export function compareNewestFirst(a: Orderable, b: Orderable): number {
  const sa = semverOf(a.version);
  const sb = semverOf(b.version);
  if (sa !== null && sb !== null) {
    const c = semver.rcompare(sa, sb);
    if (c !== 0) return c;
  }
  if (a.createdAtMs !== b.createdAtMs) return b.createdAtMs - a.createdAtMs;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** A copy of `versions`, newest first. */
export function newestFirst<T extends Orderable>(versions: readonly T[]): T[] {
  return [...versions].sort(compareNewestFirst);
}
