// The certificate and key the controller serves. Either the operator's own pair
// (SKIPPER_TLS_CERT + SKIPPER_TLS_KEY, used as given), or a local CA kept under <dataDir>/tls/:
//
//   tls/ca.crt       self-signed CA, 10 years; clients trust this file (curl --cacert, the agent)
//   tls/ca.key       its key (0600)
//   tls/server.crt   server certificate signed by the CA, 397 days
//   tls/server.key   its key (0600)
//
// The CA is created once and kept, so clients keep trusting the controller across restarts and
// server renewals. The server certificate is reissued when it is missing, broken, not signed by
// the CA, within 30 days of expiry, or does not name every requested host. A missing or broken CA
// means a new CA and a new server certificate.
import { X509Certificate } from "node:crypto";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import type { PemPair } from "./certificate-issuer.js";
import { checkCa, checkServer, type StoredPair } from "./material-checks.js";
import { ensurePrivateDir, readIfExists, removeTempFiles, tightenKeyMode, writeFileAtomic } from "./pem-files.js";
import { formatName, requestedNames, type SubjectName } from "./subject-names.js";
import { loadUserTls } from "./user-tls.js";

export interface TlsMaterialOptions {
  dataDir: string;
  /** Operator-supplied PEM certificate (SKIPPER_TLS_CERT); needs keyFile too. */
  certFile?: string;
  /** Operator-supplied PEM key (SKIPPER_TLS_KEY); needs certFile too. */
  keyFile?: string;
  /** Extra DNS names or IP addresses for the generated server certificate. */
  hostnames?: string[];
  /** The current time; tests move it to exercise renewal. */
  now?: Date;
  /** Receives one line per decision; metadata never holds key material. */
  onInfo?: (msg: string, meta: Record<string, unknown>) => void;
}

export interface TlsMaterial {
  /** PEM certificate to serve. */
  cert: string;
  /** PEM private key to serve. */
  key: string;
  /** Absolute path of the local CA certificate clients should trust (generated material only). */
  caFile?: string;
  /** PEM text of that CA certificate. */
  caCert?: string;
  /** True when this call wrote new certificates (first start, renewal or a new CA). */
  generated: boolean;
  source: "user" | "generated";
}

/** Returns the cert and key to serve, creating or renewing the local CA material as needed. */
export async function ensureTlsMaterial(opts: TlsMaterialOptions): Promise<TlsMaterial> {
  const now = opts.now ?? new Date();
  const onInfo = opts.onInfo ?? (() => undefined);
  if (opts.certFile || opts.keyFile) {
    const user = await loadUserTls(opts.certFile, opts.keyFile, now);
    const ignored = opts.hostnames?.length ? { ignored_hostnames: opts.hostnames } : {};
    onInfo("serving the TLS certificate from SKIPPER_TLS_CERT", { ...user.meta, ...ignored });
    return { cert: user.cert, key: user.key, generated: false, source: "user" };
  }
  return ensureGenerated(resolve(opts.dataDir, "tls"), requestedNames(opts.hostnames ?? [], hostname()), now, onInfo);
}

type Info = (msg: string, meta: Record<string, unknown>) => void;

async function ensureGenerated(dir: string, names: SubjectName[], now: Date, onInfo: Info): Promise<TlsMaterial> {
  const files = {
    caCert: join(dir, "ca.crt"),
    caKey: join(dir, "ca.key"),
    serverCert: join(dir, "server.crt"),
    serverKey: join(dir, "server.key"),
  };
  await ensurePrivateDir(dir);
  const leftovers = await removeTempFiles(dir);
  if (leftovers.length > 0) onInfo("removed temp files left by an interrupted TLS write", { dir, files: leftovers });

  let generated = false;
  const storedCa = await readPair(files.caCert, files.caKey);
  const storedServer = await readPair(files.serverCert, files.serverKey);
  let ca: PemPair;
  const caCheck = checkCa(storedCa, now);
  if (caCheck.ok) {
    ca = storedCa as PemPair;
    await tightenKey(files.caKey, onInfo);
  } else {
    // Loaded only to issue: the X.509 library is most of the controller's module loading.
    const { createCa } = await import("./certificate-issuer.js");
    ca = await createCa(now);
    // Key first: a crash between the two writes leaves a mismatched pair, which the next start
    // detects and replaces, rather than a certificate whose key was never written.
    await writeFileAtomic(files.caKey, ca.key, 0o600);
    await writeFileAtomic(files.caCert, ca.cert, 0o644);
    generated = true;
    const firstStart = caCheck.reason === "missing" && storedServer.cert === undefined && storedServer.key === undefined;
    onInfo(firstStart ? "created a local TLS CA" : "replaced the local TLS CA: clients must trust the new ca.crt", {
      reason: caCheck.reason,
      ...certFacts(ca.cert, files.caCert),
    });
  }

  let server: PemPair;
  const serverCheck = generated ? ({ ok: false, reason: "new-ca" } as const) : checkServer(storedServer, ca.cert, names, now);
  if (serverCheck.ok) {
    server = storedServer as PemPair;
    await tightenKey(files.serverKey, onInfo);
    onInfo("reusing the TLS server certificate", certFacts(server.cert, files.serverCert));
  } else {
    const { issueServerCert } = await import("./certificate-issuer.js");
    server = await issueServerCert(ca, names, now);
    await writeFileAtomic(files.serverKey, server.key, 0o600);
    await writeFileAtomic(files.serverCert, server.cert, 0o644);
    generated = true;
    const missing = "missing" in serverCheck && serverCheck.missing ? { missing_names: serverCheck.missing.map(formatName) } : {};
    onInfo("issued a TLS server certificate", { reason: serverCheck.reason, ...missing, ...certFacts(server.cert, files.serverCert) });
  }
  return { cert: server.cert, key: server.key, caFile: files.caCert, caCert: ca.cert, generated, source: "generated" };
}

async function readPair(certFile: string, keyFile: string): Promise<StoredPair> {
  return { cert: await readIfExists(certFile), key: await readIfExists(keyFile) };
}

async function tightenKey(file: string, onInfo: Info): Promise<void> {
  if (await tightenKeyMode(file)) onInfo("narrowed a TLS key file to mode 0600", { file });
}

// Public facts only: what a log reader needs to tell certificates apart and see when they expire.
function certFacts(certPem: string, file: string): Record<string, unknown> {
  const cert = new X509Certificate(certPem);
  return {
    file,
    subject: cert.subject,
    subject_alt_names: cert.subjectAltName ?? "",
    serial: cert.serialNumber,
    not_after: new Date(cert.validTo).toISOString(),
    fingerprint_sha256: cert.fingerprint256,
  };
}
