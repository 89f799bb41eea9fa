// The Ed25519 key that signs the agent bundles this controller serves (nodes/agent-bundles.ts),
// kept as <dataDir>/tls/agent-signing.key (PKCS#8 PEM, mode 0600): made at the first start and
// kept, so hosts that pinned its public key keep trusting what it signs. Or the operator's own
// file (--agent-signing-key), which controllers sharing one database should share.
import { createPrivateKey, type KeyObject } from "node:crypto";
import { join, resolve } from "node:path";
import { newSigningKeyPem } from "../../common/agent-bundle-signature.js";
import { ensurePrivateDir, readIfExists, tightenKeyMode, writeFileAtomic } from "./pem-files.js";
import { TlsError } from "./tls-error.js";

/** The signing key: the operator's `file`, else the data directory's, made when missing. */
export async function ensureAgentSigningKey(dataDir: string, file?: string): Promise<{ key: KeyObject; file: string; created: boolean }> {
  const path = file ? resolve(file) : join(resolve(dataDir), "tls", "agent-signing.key");
  let pem = await readIfExists(path);
  let created = false;
  if (pem === undefined) {
    if (file) throw new TlsError("TLS_KEY_INVALID", `agent signing key file ${path} does not exist`);
    await ensurePrivateDir(join(resolve(dataDir), "tls"));
    pem = newSigningKeyPem();
    await writeFileAtomic(path, pem, 0o600);
    created = true;
  } else if (!file) {
    await tightenKeyMode(path);
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch (e) {
    throw new TlsError("TLS_KEY_INVALID", `agent signing key file ${path} does not hold a PEM private key`, { cause: e });
  }
  if (key.asymmetricKeyType !== "ed25519") throw new TlsError("TLS_KEY_INVALID", `agent signing key file ${path} is not an Ed25519 key`);
  return { key, file: path, created };
}
