// How a delivery is signed, and how a receiver checks it: HMAC-SHA256 with the subscription's
// shared secret over "<unix seconds>.<body>", sent as `x-skipper-signature: t=<seconds>,v1=<hex>`.
// The time is inside what is signed, so a receiver that refuses old times refuses replays.
import { createHmac, timingSafeEqual } from "node:crypto";

export const SIGNATURE_HEADER = "x-skipper-signature";
export const DELIVERY_HEADER = "x-skipper-delivery";

/** The signature header's value for `body` sent at `at`. */
export function signatureHeader(secret: string, at: Date, body: string): string {
  const t = Math.floor(at.getTime() / 1000);
  return `t=${t},v1=${hmac(secret, t, body)}`;
}

/**
 * True when `header` signs `body` with `secret` and its time is within `toleranceMs` of `now`:
 * what a receiver checks (a replay of an old delivery fails the time).
 */
export function verifySignature(secret: string, header: string, body: string, now: Date, toleranceMs = 5 * 60_000): boolean {
  const parts = Object.fromEntries(header.split(",").map((p) => p.split("=", 2) as [string, string]));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || typeof parts.v1 !== "string" || Math.abs(now.getTime() - t * 1000) > toleranceMs) return false;
  const expected = Buffer.from(hmac(secret, t, body), "hex");
  const given = Buffer.from(parts.v1, "hex");
  return given.length === expected.length && timingSafeEqual(given, expected);
}

function hmac(secret: string, t: number, body: string): string {
  return createHmac("sha256", secret).update(`${t}.${body}`).digest("hex");
}
