// Paging over a SortedIndex. The page token is opaque to clients: base64url of a listing tag and
// the sort key of the last item returned, so the next page resumes right after it even when
// items were added in between. A token from another listing, or garbage, is INVALID_REQUEST.
import { invalid } from "../errors.js";
import type { Page, PageRequest } from "./store.js";
import type { SortedIndex } from "./sorted-index.js";

export const DEFAULT_PAGE_SIZE = 100;
export const MAX_PAGE_SIZE = 1000;

/** The effective page size: 0/absent means the default, larger values are clamped. */
export function pageSizeOf(req: PageRequest): number {
  const n = req.pageSize ?? 0;
  if (!Number.isFinite(n) || n <= 0) return DEFAULT_PAGE_SIZE;
  return Math.min(Math.floor(n), MAX_PAGE_SIZE);
}

/** Encodes the resume point of listing `tag` after `key`. */
export function encodePageToken(tag: string, key: string): string {
  return Buffer.from(`${tag}\n${key}`, "utf8").toString("base64url");
}

/** The sort key a token resumes after, or undefined for the first page; throws INVALID_REQUEST. */
export function decodePageToken(tag: string, token: string | undefined, keyPattern: RegExp): string | undefined {
  if (token === undefined || token === "") return undefined;
  const bad = () => invalid("page_token is not valid for this listing", { field: "page_token" });
  if (!/^[A-Za-z0-9_-]+$/.test(token) || token.length > 2048) throw bad();
  const text = Buffer.from(token, "base64url").toString("utf8");
  const nl = text.indexOf("\n");
  if (nl < 0 || text.slice(0, nl) !== tag) throw bad();
  const key = text.slice(nl + 1);
  if (!keyPattern.test(key)) throw bad();
  return key;
}

/**
 * The tag a listing's tokens carry: a descending listing's differ, so a token resumes only the
 * order it was made in.
 */
export function pageTag(tag: string, req: PageRequest): string {
  return req.newestFirst ? `${tag}-desc` : tag;
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
