// The text of an API key: skk_<id>_<secret>, where id is 12 lowercase hex digits that name the
// stored record and secret is 32 random bytes in base64url. The fixed "skk_" prefix tells a key
// from a node token (skn.) or the admin token (ska.) at a glance, and lets secret scanners find
// keys in code and logs. Only SHA-256 hashes of secrets are stored.
import { randomBytes } from "node:crypto";

const KEY_PATTERN = /^skk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$/;

/** A new key id. */
export function newKeyId(): string {
  return randomBytes(6).toString("hex");
}

/** The key text for `id` with a fresh secret. */
export function mintApiKey(id: string): string {
  return `${keyPrefix(id)}${randomBytes(32).toString("base64url")}`;
}

/** The public start of a key's text, shown in listings. */
export function keyPrefix(id: string): string {
  return `skk_${id}_`;
}

/** The key id a presented text names, or undefined when it is not API key text. */
export function keyIdOf(text: string): string | undefined {
  return KEY_PATTERN.exec(text)?.[1];
}
