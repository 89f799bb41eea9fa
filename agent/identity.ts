// The node's client certificate, when it enrolled instead of using a bearer token.
//
//   <state-dir>/identity/node.pem   the private key (made on this host, never sent anywhere) and
//                                   the certificate the controller signed for it, in one file
//                                   (mode 0600), replaced atomically so the two always match
//   <state-dir>/identity/node.json  facts for renewal: node id, when the certificate was
//                                   received and when it expires
//   <state-dir>/identity/enrolling.json  while enrolling: the key and CSR every attempt sends
//                                   (mode 0600), so a retry after a lost answer or a restart
//                                   presents the same key (the controller accepts a used token
//                                   again only with it); removed once enrolled
//
// Enrollment (enroll) sends the controller a CSR with a one-time enrollment token; renewal
// (renew) sends a CSR for a fresh key over mTLS with the current certificate, at about two thirds
// of the lifetime. Both only replace the files once the controller has answered.
import { createPrivateKey, KeyObject, webcrypto, X509Certificate } from "node:crypto";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "./engine/durable-file.js";

/** A key pair and the certificate that goes with it. */
export interface NodeIdentity {
  nodeId: string;
  keyPem: string;
  certPem: string;
  receivedAt: Date;
  notAfter: Date;
}

/** A private key (PKCS#8 PEM) and a CSR (PEM) for it. */
export interface KeyRequest {
  keyPem: string;
  csrPem: string;
}

const EC_P256 = { name: "ECDSA", namedCurve: "P-256" } as const;

/** The directory of the identity files. */
export function identityDir(stateDir: string): string {
  return join(stateDir, "identity");
}

/** A fresh P-256 key pair and a certificate signing request for it. */
export async function newKeyRequest(nodeId: string): Promise<KeyRequest> {
  // Loaded only here: agents that use a node token never pay for the X.509 library.
  const { x509 } = await import("../common/x509.js");
  const keys = (await webcrypto.subtle.generateKey(EC_P256, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    // The controller names the certificate itself; the subject is for people reading the CSR.
    name: `CN=${nodeId.replace(/[,+"\\<>;=]/g, "_")}`,
    keys,
    signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
  });
  const keyPem = KeyObject.from(keys.privateKey).export({ type: "pkcs8", format: "pem" }) as string;
  return { keyPem, csrPem: csr.toString("pem") };
}

/**
 * The key request an enrollment of `nodeId` sends on every attempt: the one saved by an earlier
 * attempt (this run or one before a restart), or a new one, saved before it is first sent.
 */
export async function enrollmentKeyRequest(stateDir: string, nodeId: string): Promise<KeyRequest> {
  const file = join(identityDir(stateDir), "enrolling.json");
  try {
    const saved = JSON.parse(await readFile(file, "utf8")) as { node_id?: unknown; key_pem?: unknown; csr_pem?: unknown };
    if (saved.node_id === nodeId && typeof saved.key_pem === "string" && typeof saved.csr_pem === "string") {
      return { keyPem: saved.key_pem, csrPem: saved.csr_pem };
    }
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT" && !(e instanceof SyntaxError)) throw e;
  }
  const request = await newKeyRequest(nodeId);
  await writeFileAtomic(file, `${JSON.stringify({ node_id: nodeId, key_pem: request.keyPem, csr_pem: request.csrPem })}\n`, {
    mode: 0o600,
  });
  return request;
}

/** Forgets the enrollment's key request (enrolled: the key now lives in node.pem). */
export async function enrollmentDone(stateDir: string): Promise<void> {
  await rm(join(identityDir(stateDir), "enrolling.json"), { force: true });
}

/** Saves a certificate the controller signed for `request`'s key. */
export async function saveIdentity(
  stateDir: string,
  nodeId: string,
  request: KeyRequest,
  certPem: string,
  now: Date,
): Promise<NodeIdentity> {
  const cert = new X509Certificate(certPem);
  if (!cert.checkPrivateKey(createPrivateKey(request.keyPem))) {
    throw new Error("the controller returned a certificate for another key");
  }
  const identity: NodeIdentity = { nodeId, keyPem: request.keyPem, certPem, receivedAt: now, notAfter: new Date(cert.validTo) };
  const dir = identityDir(stateDir);
  // One file for key and certificate: replaced in one rename, they always match.
  await writeFileAtomic(join(dir, "node.pem"), `${request.keyPem.trimEnd()}\n${certPem.trimEnd()}\n`, { mode: 0o600 });
  const facts = { node_id: nodeId, received_at: now.toISOString(), not_after: identity.notAfter.toISOString() };
  await writeFileAtomic(join(dir, "node.json"), `${JSON.stringify(facts, null, 2)}\n`, { mode: 0o600 });
  return identity;
}

/** The saved identity of `nodeId`, or undefined when there is none (or it is for another node). */
export async function loadIdentity(stateDir: string, nodeId: string): Promise<NodeIdentity | undefined> {
  const dir = identityDir(stateDir);
  let pemText: string;
  let factsText: string;
  try {
    pemText = await readFile(join(dir, "node.pem"), "utf8");
    factsText = await readFile(join(dir, "node.json"), "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
  const keyPem = /-----BEGIN PRIVATE KEY-----[\s\S]+?-----END PRIVATE KEY-----\n?/.exec(pemText)?.[0];
  const certPem = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n?/.exec(pemText)?.[0];
  if (!keyPem || !certPem) throw new Error(`${join(dir, "node.pem")} does not hold a private key and a certificate`);
  const facts = JSON.parse(factsText) as { node_id?: string; received_at?: string };
  if (facts.node_id !== nodeId) return undefined;
  const cert = new X509Certificate(certPem);
  return { nodeId, keyPem, certPem, receivedAt: new Date(facts.received_at ?? cert.validFrom), notAfter: new Date(cert.validTo) };
}

/** When to renew: two thirds of the way from receiving the certificate to its expiry. */
export function renewalTime(identity: Pick<NodeIdentity, "receivedAt" | "notAfter">): Date {
  const from = identity.receivedAt.getTime();
  return new Date(from + ((identity.notAfter.getTime() - from) * 2) / 3);
}
