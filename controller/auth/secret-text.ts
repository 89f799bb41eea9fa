// The texts of the credentials the controller hands out once: <prefix>_<id>_<secret>, where id is
// 12 lowercase hex digits that name the stored record and secret is 32 random bytes in base64url.
// The prefix says what a text is at a glance, and lets secret scanners find them in code and
// logs: skk_ an API key, ske_ an enrollment token (node tokens are skn., the admin token ska.).
// Only SHA-256 hashes of the texts are stored.
import { randomBytes } from "node:crypto";

/** One kind of credential text. */
export interface SecretText {
  /** A new record id. */
  newId(): string;
  /** The text for `id` with a fresh secret. */
  mint(id: string): string;
  /** The public start of a text, shown in listings. */
  prefixOf(id: string): string;
  /** The record id a presented text names, or undefined when it is not this kind of text. */
  idOf(text: string): string | undefined;
}

function secretText(prefix: string): SecretText {
  const pattern = new RegExp(`^${prefix}_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$`);
  const prefixOf = (id: string) => `${prefix}_${id}_`;
  return {
    newId: () => randomBytes(6).toString("hex"),
    mint: (id) => `${prefixOf(id)}${randomBytes(32).toString("base64url")}`,
    prefixOf,
    idOf: (text) => pattern.exec(text)?.[1],
  };
}

/** API keys: skk_<id>_<secret>. */
export const API_KEY_TEXT = secretText("skk");

/** Enrollment tokens: ske_<id>_<secret>. */
export const ENROLLMENT_TOKEN_TEXT = secretText("ske");
