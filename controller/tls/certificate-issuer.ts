// Creates the local CA and the server certificates it signs, with @peculiar/x509 on WebCrypto
// (no openssl binary). Both use ECDSA P-256 with SHA-256: small keys, fast to generate, accepted
// by Node, Go (buf curl, the agent) and curl alike. Extensions follow what strict verifiers ask
// for (Python's default context and OpenSSL's x509_strict): a critical basicConstraints and
// keyUsage, a subject key id on the CA and an authority key id on the leaf.
import { createHash, createPrivateKey, KeyObject, randomBytes, webcrypto } from "node:crypto";
import type { SubjectName } from "./subject-names.js";
import { x509 } from "../../common/x509.js";
import { normalSerial } from "./peer-certificate.js";

/** A PEM certificate and its PKCS#8 PEM private key. */
export interface PemPair {
  cert: string;
  key: string;
}

const EC_P256 = { name: "ECDSA", namedCurve: "P-256" } as const;
const SIGNING = { name: "ECDSA", hash: "SHA-256" } as const;
const DAY_MS = 24 * 60 * 60 * 1000;
/** Server certificates live 397 days, the longest lifetime browsers and Apple clients accept. */
export const SERVER_VALIDITY_DAYS = 397;
const CA_VALIDITY_YEARS = 10;
// notBefore is set an hour back so a client whose clock runs a little behind still accepts a
// certificate made a moment ago (agents on other machines, VMs just resumed).
const BACKDATE_MS = 60 * 60 * 1000;
// Client certificates live hours, so their backdating is shorter: a few minutes of clock skew.
const CLIENT_BACKDATE_MS = 5 * 60 * 1000;

/** Creates a self-signed CA (CN "Skipper local CA <random>", or another label) valid for 10 years. */
export async function createCa(now: Date, label = "Skipper local CA"): Promise<PemPair> {
  const keys = await generateKeys();
  const notBefore = new Date(now.getTime() - BACKDATE_MS);
  const notAfter = new Date(notBefore);
  notAfter.setUTCFullYear(notAfter.getUTCFullYear() + CA_VALIDITY_YEARS);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: randomSerial(),
    // The random suffix tells apart the CAs of several controllers in one trust store.
    name: `CN=${label} ${randomBytes(4).toString("hex")}`,
    notBefore,
    notAfter,
    keys,
    signingAlgorithm: SIGNING,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { cert: pem(cert), key: exportKey(keys.privateKey) };
}

/**
 * Issues a server certificate (CN "skipper-controller", serverAuth) for `names`, signed by `ca`.
 * Its validity is 397 days, cut short if the CA expires earlier.
 */
export async function issueServerCert(ca: PemPair, names: readonly SubjectName[], now: Date): Promise<PemPair> {
  const caCert = new x509.X509Certificate(ca.cert);
  const caKey = await importSigningKey(ca.key);
  const keys = await generateKeys();
  const notBefore = new Date(now.getTime() - BACKDATE_MS);
  const wanted = notBefore.getTime() + SERVER_VALIDITY_DAYS * DAY_MS;
  const notAfter = new Date(Math.min(wanted, caCert.notAfter.getTime()));
  const caKeyId = caCert.getExtension(x509.SubjectKeyIdentifierExtension)?.keyId;
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: "CN=skipper-controller",
    // The CA's own encoded name, so the issuer matches its subject byte for byte (Go compares bytes).
    issuer: caCert.subjectName,
    notBefore,
    notAfter,
    publicKey: keys.publicKey,
    signingKey: caKey,
    signingAlgorithm: SIGNING,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names.map((n) => ({ type: n.type, value: n.value }))),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      caKeyId ? new x509.AuthorityKeyIdentifierExtension(caKeyId) : await x509.AuthorityKeyIdentifierExtension.create(caCert.publicKey),
    ],
  });
  return { cert: pem(cert), key: exportKey(keys.privateKey) };
}

/** A node's client certificate as issued. */
export interface IssuedClientCert {
  cert: string;
  /** Hex serial number, as node:crypto's X509Certificate and TLS peer certificates spell it (uppercase). */
  serial: string;
  notAfter: Date;
  /** SHA-256 (hex) of the certified public key (its SubjectPublicKeyInfo). */
  keySha256: string;
}

/** The URI a node certificate names its node by (in its subject alternative name). */
export function nodeUri(nodeId: string): string {
  return `spiffe://skipper/node/${nodeId}`;
}

/**
 * Signs the public key of a PKCS#10 request as a client certificate for `nodeId` (CN and a
 * spiffe://skipper/node/<id> URI name, clientAuth only), valid for `ttlMs` from `now` but not past
 * the CA's own expiry. Throws a plain Error saying what is wrong with a bad request.
 */
export async function issueNodeCert(ca: PemPair, csrPem: string, nodeId: string, now: Date, ttlMs: number): Promise<IssuedClientCert> {
  let csr: x509.Pkcs10CertificateRequest;
  try {
    csr = new x509.Pkcs10CertificateRequest(csrPem);
  } catch {
    throw new Error("csr_pem is not a PEM certificate signing request");
  }
  const alg = csr.publicKey.algorithm as { name?: string; namedCurve?: string };
  const supported = (alg.name === "ECDSA" && alg.namedCurve === "P-256") || alg.name === "Ed25519";
  if (!supported) throw new Error("the request's key must be ECDSA P-256 or Ed25519");
  if (!(await csr.verify())) throw new Error("the request's signature does not verify: it was not made with its key");
  const caCert = new x509.X509Certificate(ca.cert);
  const caKey = await importSigningKey(ca.key);
  const notBefore = new Date(now.getTime() - CLIENT_BACKDATE_MS);
  const notAfter = new Date(Math.min(now.getTime() + ttlMs, caCert.notAfter.getTime()));
  const caKeyId = caCert.getExtension(x509.SubjectKeyIdentifierExtension)?.keyId;
  const publicKey = await csr.publicKey.export(alg.name === "Ed25519" ? { name: "Ed25519" } : EC_P256, ["verify"]);
  const serial = randomSerial();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial,
    subject: `CN=${nodeId.replace(/[,+"\\<>;=]/g, "_")}`,
    issuer: caCert.subjectName,
    notBefore,
    notAfter,
    publicKey,
    signingKey: caKey,
    signingAlgorithm: SIGNING,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth]),
      new x509.SubjectAlternativeNameExtension([{ type: "url", value: nodeUri(nodeId) }]),
      caKeyId ? new x509.AuthorityKeyIdentifierExtension(caKeyId) : await x509.AuthorityKeyIdentifierExtension.create(caCert.publicKey),
    ],
  });
  const keySha256 = createHash("sha256").update(Buffer.from(csr.publicKey.rawData)).digest("hex");
  return { cert: pem(cert), serial: normalSerial(serial), notAfter, keySha256 };
}

async function generateKeys(): Promise<webcrypto.CryptoKeyPair> {
  return (await webcrypto.subtle.generateKey(EC_P256, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
}

// Goes through node:crypto first so a CA key stored as SEC1 ("EC PRIVATE KEY") also loads.
async function importSigningKey(keyPem: string): Promise<webcrypto.CryptoKey> {
  const der = createPrivateKey(keyPem).export({ type: "pkcs8", format: "der" });
  return webcrypto.subtle.importKey("pkcs8", der, EC_P256, false, ["sign"]);
}

function exportKey(key: webcrypto.CryptoKey): string {
  return KeyObject.from(key).export({ type: "pkcs8", format: "pem" }) as string;
}

function pem(cert: x509.X509Certificate): string {
  return `${cert.toString("pem")}\n`;
}

// 16 random bytes with the top bit cleared (a DER INTEGER serial must be positive) and a non-zero
// first byte (so it stays 16 bytes once leading zeros are stripped).
function randomSerial(): string {
  const bytes = randomBytes(16);
  bytes[0] = bytes[0]! & 0x7f || 0x01;
  return bytes.toString("hex");
}
