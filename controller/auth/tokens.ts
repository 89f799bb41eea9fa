// Token minting and checking. Tokens are random 256-bit secrets; only their SHA-256 hash is
// stored, and comparisons are constant-time. A node token names its node so the controller can
// find the one credential to check without scanning: skn.<base64url(node id)>.<secret>.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/** Hex SHA-256 of a token, the only form in which tokens are stored. */
export function hashToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

/** Constant-time check of a presented token against a stored hash. */
export function tokenMatches(presented: string, storedHash: string): boolean {
  const a = Buffer.from(hashToken(presented), "hex");
  const b = Buffer.from(storedHash, "hex");
  return a.length === b.length && timingSafeEqual(a, b);
}

/** A new admin token. */
export function mintAdminToken(): string {
  return `ska.${randomBytes(32).toString("base64url")}`;
}

/** A new token for `nodeId`. */
export function mintNodeToken(nodeId: string): string {
  return `skn.${Buffer.from(nodeId, "utf8").toString("base64url")}.${randomBytes(32).toString("base64url")}`;
}

/** The node id a node token claims to belong to, or undefined if it is not a node token. */
export function nodeIdOfToken(token: string): string | undefined {
  const m = /^skn\.([A-Za-z0-9_-]{1,200})\.[A-Za-z0-9_-]{20,100}$/.exec(token);
  if (!m) return undefined;
  return Buffer.from(m[1]!, "base64url").toString("utf8");
}
