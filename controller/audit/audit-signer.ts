// The key that signs audit exports' heads: the controller's TLS key, so that a client that trusts
// the controller's certificate can check an export kept elsewhere. With the generated key that is
// ECDSA P-256 with SHA-256 (a DER signature, as `openssl dgst -sha256 -verify` reads it); an
// operator's own key signs with its own algorithm (RSA: PKCS #1 v1.5 with SHA-256).
import { createPrivateKey, sign, verify, X509Certificate, type KeyObject } from "node:crypto";

/** Signs data for an export; `certificatePem` is the certificate that checks the signatures. */
export interface AuditSigner {
  /** The signature of `data`, base64. */
  sign(data: Buffer): string;
  certificatePem: string;
}

/** A signer from a PEM private key and its PEM certificate; throws when they are not a pair. */
export function auditSigner(keyPem: string, certificatePem: string): AuditSigner {
  const key = createPrivateKey(keyPem);
  const cert = new X509Certificate(certificatePem);
  if (!cert.checkPrivateKey(key)) throw new Error("the audit signing key is not the key of its certificate");
  const digest = digestOf(key);
  return { certificatePem, sign: (data) => sign(digest, data, key).toString("base64") };
}

/** True when `signature` (base64) is a signature of `data` by the key of `certificatePem`. */
export function verifyAuditSignature(data: Buffer, signature: string, certificatePem: string): boolean {
  const key = new X509Certificate(certificatePem).publicKey;
  try {
    return verify(digestOf(key), data, key, Buffer.from(signature, "base64"));
  } catch {
    return false;
  }
}

// Ed25519 and Ed448 sign the data itself; the others a SHA-256 digest of it.
function digestOf(key: KeyObject): string | null {
  return key.asymmetricKeyType === "ed25519" || key.asymmetricKeyType === "ed448" ? null : "sha256";
}
