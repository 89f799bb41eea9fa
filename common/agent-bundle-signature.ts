// What a controller signs for an agent bundle, and how anyone holding its public key checks it:
// the controller (signs what it serves), `skippy join` (checks what it installs) and, next, the
// agent's self-update. The signature is Ed25519 over a statement, not over the bytes alone, so a
// signed bundle cannot be passed off as another version:
//
//   skipper-agent-bundle/v1
//   version=<the version the bundle states>
//   sha256=<SHA-256 of the bytes, lowercase hex>
//   size=<bytes>
//
// The join script (controller/nodes/join-script.ts) checks the same statement with node -e
// before it runs the bundle; keep the two in step. Also here: the pin of a TLS certificate
// (the SHA-256 of its public key, as curl's --pinnedpubkey takes it).
import { createHash, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject, type X509Certificate } from "node:crypto";

/** A bundle's manifest: what the controller states about it, and its signature (base64). */
export interface BundleManifest {
  version: string;
  sha256: string;
  size: number;
  signature: string;
}

/** The bytes an Ed25519 signature of a bundle covers. */
export function bundleStatement(m: { version: string; sha256: string; size: number }): Buffer {
  return Buffer.from(`skipper-agent-bundle/v1\nversion=${m.version}\nsha256=${m.sha256}\nsize=${m.size}\n`);
}

/** The manifest of `bundle` as `version`, signed with `privateKey` (Ed25519). */
export function signBundle(bundle: Buffer, version: string, privateKey: KeyObject): BundleManifest {
  if (/\s/.test(version) || version === "") throw new Error(`a bundle version is one word, got '${version}'`);
  const statement = { version, sha256: sha256Hex(bundle), size: bundle.length };
  return { ...statement, signature: sign(null, bundleStatement(statement), privateKey).toString("base64") };
}

/** Why a bundle does not match its manifest, or undefined when it does and the signature holds. */
export function bundleMismatch(bundle: Buffer, manifest: BundleManifest, publicKey: string): string | undefined {
  if (bundle.length !== manifest.size) return `its size is ${bundle.length} bytes, the manifest says ${manifest.size}`;
  const sha256 = sha256Hex(bundle);
  if (sha256 !== manifest.sha256) return `its SHA-256 is ${sha256}, the manifest says ${manifest.sha256}`;
  let key: KeyObject;
  try {
    key = publicKeyFromRaw(publicKey);
  } catch {
    return "the signing key is not an Ed25519 public key (32 bytes, base64)";
  }
  const ok = verify(null, bundleStatement(manifest), key, Buffer.from(manifest.signature, "base64"));
  return ok ? undefined : "its signature does not verify with the controller's signing key";
}

/** A new Ed25519 private key, as PKCS#8 PEM. */
export function newSigningKeyPem(): string {
  return generateKeyPairSync("ed25519").privateKey.export({ type: "pkcs8", format: "pem" }) as string;
}

/** The public half of an Ed25519 key, as its 32 raw bytes in base64. */
export function rawPublicKey(key: KeyObject): string {
  const jwk = (key.type === "public" ? key : createPublicKey(key)).export({ format: "jwk" });
  if (jwk.crv !== "Ed25519" || !jwk.x) throw new Error("not an Ed25519 key");
  return Buffer.from(jwk.x, "base64url").toString("base64");
}

/** An Ed25519 public key from its 32 raw bytes in base64. */
export function publicKeyFromRaw(raw: string): KeyObject {
  const bytes = Buffer.from(raw, "base64");
  if (bytes.length !== 32) throw new Error("an Ed25519 public key is 32 bytes");
  return createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: bytes.toString("base64url") }, format: "jwk" });
}

/** "SHA256:<base64>" of a public key's raw bytes (base64), as people compare keys. */
export function keyFingerprint(raw: string): string {
  return `SHA256:${createHash("sha256").update(Buffer.from(raw, "base64")).digest("base64")}`;
}

/** The pin of a TLS certificate: "SHA256:" and the base64 SHA-256 of its SubjectPublicKeyInfo. */
export function certificatePin(cert: X509Certificate): string {
  const spki = cert.publicKey.export({ type: "spki", format: "der" });
  return `SHA256:${createHash("sha256").update(spki).digest("base64")}`;
}

/** The base64 of a pin given as "SHA256:<base64>" or curl's "sha256//<base64>"; throws otherwise. */
export function pinDigest(pin: string): string {
  const m = /^(?:SHA256:|sha256\/\/)([A-Za-z0-9+/]{43}=)$/.exec(pin.trim());
  if (!m) throw new Error(`a fingerprint is SHA256:<base64 of 32 bytes> (or sha256//<base64>), got '${pin}'`);
  return m[1]!;
}

function sha256Hex(data: Buffer): string {
  return createHash("sha256").update(data).digest("hex");
}
