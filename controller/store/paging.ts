// Paging of every listing, in both backends. The page token is opaque to clients: base64url of a listing tag and
// the sort key of the last item returned, so the next page resumes right after it even when
// items were added in between. A token from another listing, or garbage, is INVALID_REQUEST.
import { invalid } from "../base/errors.js";
import type { PageRequest } from "./store.js";

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
