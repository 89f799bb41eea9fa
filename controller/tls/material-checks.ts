// Decides whether certificates found on disk can be used again. Each check returns the reason a
// file has to be replaced (a short stable code that goes into the log) or undefined when it is
// fine. Nothing here reads files or writes them; tls-material.ts does that.
import { createPrivateKey, X509Certificate, type KeyObject } from "node:crypto";
import { certificateNames, missingNames, type SubjectName } from "./subject-names.js";

/** Certificates are replaced once they have less than this left to live. */
export const RENEW_BEFORE_DAYS = 30;
const RENEW_BEFORE_MS = RENEW_BEFORE_DAYS * 24 * 60 * 60 * 1000;

/** PEM text of a certificate and its key as read from disk; undefined when the file is absent. */
export interface StoredPair {
  cert?: string;
  key?: string;
}

/** Why stored material must be replaced. */
export type ReplaceReason =
  | "missing"
  | "cert-missing"
  | "key-missing"
  | "cert-unreadable"
  | "key-unreadable"
  | "key-mismatch"
  | "not-a-ca"
  | "unsupported-key"
  | "not-signed-by-ca"
  | "not-yet-valid"
  | "expiring"
  | "names-not-covered";

/** Outcome of checking a stored pair: usable, or the reason to replace it. */
export type PairCheck = { ok: true } | { ok: false; reason: ReplaceReason; missing?: SubjectName[] };

/** Checks the stored CA: both files present, readable, matching, P-256, a CA, valid for 30+ days. */
export function checkCa(ca: StoredPair, now: Date): PairCheck {
  const loaded = loadPair(ca);
  if ("reason" in loaded) return { ok: false, reason: loaded.reason };
  const { cert, key } = loaded;
  // Only a self-signed CA is ours to sign with; anything else belongs in SKIPPER_TLS_CERT.
  if (!cert.ca || !cert.checkIssued(cert) || !cert.verify(cert.publicKey)) return { ok: false, reason: "not-a-ca" };
  // The issuer signs with P-256 only; another key type would fail later with a vaguer message.
  if (key.asymmetricKeyType !== "ec" || key.asymmetricKeyDetails?.namedCurve !== "prime256v1") {
    return { ok: false, reason: "unsupported-key" };
  }
  return checkValidity(ca.cert!, now);
}

/**
 * Checks the stored server pair against a usable CA: files matching, issued and signed by the CA,
 * valid now and for 30+ days, and covering every name in `names`.
 */
export function checkServer(server: StoredPair, caPem: string, names: readonly SubjectName[], now: Date): PairCheck {
  const loaded = loadPair(server);
  if ("reason" in loaded) return { ok: false, reason: loaded.reason };
  const ca = new X509Certificate(caPem);
  if (!loaded.cert.checkIssued(ca) || !loaded.cert.verify(ca.publicKey)) return { ok: false, reason: "not-signed-by-ca" };
  const validity = checkValidity(server.cert!, now);
  if (!validity.ok) return validity;
  const missing = missingNames(names, certificateNames(loaded.cert));
  return missing.length > 0 ? { ok: false, reason: "names-not-covered", missing } : { ok: true };
}

function loadPair(pair: StoredPair): { cert: X509Certificate; key: KeyObject } | { reason: ReplaceReason } {
  if (pair.cert === undefined && pair.key === undefined) return { reason: "missing" };
  if (pair.cert === undefined) return { reason: "cert-missing" };
  if (pair.key === undefined) return { reason: "key-missing" };
  let cert: X509Certificate;
  let key: KeyObject;
  try {
    cert = new X509Certificate(pair.cert);
  } catch {
    return { reason: "cert-unreadable" };
  }
  try {
    key = createPrivateKey(pair.key);
  } catch {
    return { reason: "key-unreadable" };
  }
  return cert.checkPrivateKey(key) ? { cert, key } : { reason: "key-mismatch" };
}

function checkValidity(certPem: string, now: Date): PairCheck {
  const cert = new X509Certificate(certPem);
  // "Nov 23 22:26:53 2036 GMT", as OpenSSL prints it.
  const notBefore = Date.parse(cert.validFrom);
  const notAfter = Date.parse(cert.validTo);
  if (Number.isNaN(notBefore) || notBefore > now.getTime()) return { ok: false, reason: "not-yet-valid" };
  if (Number.isNaN(notAfter) || notAfter - now.getTime() < RENEW_BEFORE_MS) return { ok: false, reason: "expiring" };
  return { ok: true };
}
