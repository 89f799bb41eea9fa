// An in-memory index kept sorted by a string key, so listings read in order and pages resume
// with a binary search instead of a sort per request. Keys are built so that plain string order
// is the listing order (fixed-width timestamps, NUL between tuple parts: record-keys.ts); readPage
// reads a page of one (the tokens: paging.ts).
import { decodePageToken, encodePageToken, pageSizeOf, pageTag } from "../paging.js";
import type { Page, PageRequest } from "../store.js";

/** Values kept in ascending key order; one value per key. */
export class SortedIndex<T> {
  private keys: string[] = [];
  private values: T[] = [];

  get size(): number {
    return this.keys.length;
  }

  /** Replaces the contents with `entries` (any order; the last value wins for a repeated key); returns them sorted. */
  load(entries: Array<[string, T]>): Array<[string, T]> {
    if (ascending(entries)) {
      this.loadSorted(entries);
      return entries;
    }
    const byKey = new Map(entries);
    // The default sort compares UTF-16 code units, as < does, without a call per comparison.
    const sorted = [...byKey.keys()].sort();
    // Assigned, not spliced: spreading a large array into splice() overflows the call stack.
    this.keys = sorted;
    this.values = sorted.map((k) => byKey.get(k)!);
    return sorted.map((k, i) => [k, this.values[i]!]);
  }

  /** Replaces the contents with `entries`, already in ascending key order with no key repeated. */
  loadSorted(entries: Array<[string, T]>): void {
    this.keys = entries.map((e) => e[0]);
    this.values = entries.map((e) => e[1]);
  }

  /** Inserts or replaces the value under `key`. */
  set(key: string, value: T): void {
    const i = this.lowerBound(key);
    if (this.keys[i] === key) {
      this.values[i] = value;
      return;
    }
    this.keys.splice(i, 0, key);
    this.values.splice(i, 0, value);
  }

  /** Removes `key` if present. */
  delete(key: string): void {
    const i = this.lowerBound(key);
    if (this.keys[i] === key) {
      this.keys.splice(i, 1);
      this.values.splice(i, 1);
    }
  }

  /** Removes every entry whose value passes `drop`, in one pass. */
  deleteWhere(drop: (value: T) => boolean): void {
    const keys: string[] = [];
    const values: T[] = [];
    for (let i = 0; i < this.keys.length; i++) {
      if (drop(this.values[i]!)) continue;
      keys.push(this.keys[i]!);
      values.push(this.values[i]!);
    }
    this.keys = keys;
    this.values = values;
  }

  /** Removes every entry with key < `key` (one pass, not one splice each) and returns their values. */
  dropBefore(key: string): T[] {
    const i = this.lowerBound(key);
    const gone = this.values.slice(0, i);
    this.keys = this.keys.slice(i);
    this.values = this.values.slice(i);
    return gone;
  }

  /** The first entry in key order, if any. */
  first(): T | undefined {
    return this.values[0];
  }

  /** Entries with key > `after` (or >= `from`), in order. */
  *entries(opts: { after?: string; from?: string } = {}): Generator<[string, T]> {
    let i = 0;
    if (opts.from !== undefined) i = this.lowerBound(opts.from);
    if (opts.after !== undefined) i = Math.max(i, this.upperBound(opts.after));
    for (; i < this.keys.length; i++) yield [this.keys[i]!, this.values[i]!];
  }

  /** Entries with key < `before` (every entry when absent), in descending order. */
  *entriesDescending(before?: string): Generator<[string, T]> {
    for (let i = (before === undefined ? this.keys.length : this.lowerBound(before)) - 1; i >= 0; i--) {
      yield [this.keys[i]!, this.values[i]!];
    }
  }

  // First index whose key is >= key.
  private lowerBound(key: string): number {
    let lo = 0;
    let hi = this.keys.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.keys[mid]! < key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  // First index whose key is > key.
  private upperBound(key: string): number {
    let lo = 0;
    let hi = this.keys.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.keys[mid]! <= key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

// True when the keys of `entries` strictly ascend (a summary written in key order loads so).
function ascending<T>(entries: Array<[string, T]>): boolean {
  for (let i = 1; i < entries.length; i++) if (!(entries[i - 1]![0] < entries[i]![0])) return false;
  return true;
}

/**
 * Reads one page of `index` in key order (descending with req.newestFirst): entries past the
 * token (and from `from`, before `before`, when given) that pass `match`, mapped through `out`.
 * Looks one match ahead so the last page has no token.
 */
export function readPage<T, R>(
  index: SortedIndex<T>,
  tag: string,
  req: PageRequest,
  keyPattern: RegExp,
  match: (v: T) => boolean,
  out: (v: T) => R,
  from?: string,
  before?: string,
): Page<R> {
  const size = pageSizeOf(req);
  const pageTagged = pageTag(tag, req);
  const resume = decodePageToken(pageTagged, req.pageToken, keyPattern);
  const entries = req.newestFirst
    ? index.entriesDescending(resume !== undefined && (before === undefined || resume < before) ? resume : before)
    : index.entries({ after: resume, from });
  const items: R[] = [];
  let lastKey = "";
  for (const [key, value] of entries) {
    if (req.newestFirst ? from !== undefined && key < from : before !== undefined && key >= before) break;
    if (!match(value)) continue;
    if (items.length === size) return { items, nextPageToken: encodePageToken(pageTagged, lastKey) };
    items.push(out(value));
    lastKey = key;
  }
  return { items, nextPageToken: "" };
}
