// The client CA that signs enrolled nodes' certificates (kept apart from the CA of the server
// certificate, so that trusting the controller and being trusted by it are separate keys).
// Either the operator's own pair (SKIPPER_CLIENT_CA_CERT + SKIPPER_CLIENT_CA_KEY: what several
// controllers on one database must share), or one generated once under <dataDir>/tls/:
//
//   tls/client-ca.crt   self-signed, 10 years; the server asks clients for certificates it signed
//   tls/client-ca.key   its key (0600)
//
// A stored pair that no longer checks out (broken, mismatched, expiring) is replaced, which
// invalidates every node certificate it signed: those nodes must enroll again, and the log says so.
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { PemPair } from "./certificate-issuer.js";
import { checkCa } from "./material-checks.js";
import { ensurePrivateDir, readIfExists, writeFileAtomic } from "./pem-files.js";
import { TlsError } from "./tls-error.js";

export interface ClientCaOptions {
  dataDir: string;
  certFile?: string;
  keyFile?: string;
  now?: Date;
  onInfo?: (msg: string, meta: Record<string, unknown>) => void;
}

/** The client CA pair (PEM) to sign node certificates with and to verify them against. */
export async function ensureClientCa(opts: ClientCaOptions): Promise<PemPair> {
  const now = opts.now ?? new Date();
  const onInfo = opts.onInfo ?? (() => undefined);
  if (opts.certFile || opts.keyFile) {
    if (!opts.certFile || !opts.keyFile)
      throw new TlsError("TLS_PAIR_INCOMPLETE", "SKIPPER_CLIENT_CA_CERT and SKIPPER_CLIENT_CA_KEY go together: set both or neither");
    const pair = { cert: await readFile(opts.certFile, "utf8"), key: await readFile(opts.keyFile, "utf8") };
    const check = checkCa(pair, now);
    if (!check.ok) throw new TlsError("TLS_CERT_INVALID", `the client CA in SKIPPER_CLIENT_CA_CERT/KEY cannot be used: ${check.reason}`);
    onInfo("signing node certificates with the client CA from SKIPPER_CLIENT_CA_CERT", { file: opts.certFile });
    return pair;
  }
  const dir = resolve(opts.dataDir, "tls");
  const files = { cert: join(dir, "client-ca.crt"), key: join(dir, "client-ca.key") };
  await ensurePrivateDir(dir);
  const stored = { cert: await readIfExists(files.cert), key: await readIfExists(files.key) };
  const check = checkCa(stored, now);
  if (check.ok) return stored as PemPair;
  const { createCa } = await import("./certificate-issuer.js");
  const ca = await createCa(now, "Skipper client CA");
  await writeFileAtomic(files.key, ca.key, 0o600);
  await writeFileAtomic(files.cert, ca.cert, 0o644);
  onInfo(
    check.reason === "missing" ? "created the client CA for enrolled nodes" : "replaced the client CA: enrolled nodes must enroll again",
    { file: files.cert, reason: check.reason },
  );
  return ca;
}
