// A certificate and key the operator supplies (SKIPPER_TLS_CERT / SKIPPER_TLS_KEY). They are
// served as they are; the only checks are the ones that would otherwise surface as a confusing
// handshake failure later: both files given, readable, parseable, and the key belongs to the cert.
import { createPrivateKey, X509Certificate, type KeyObject } from "node:crypto";
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { TlsError } from "./tls-error.js";

/** The operator's PEM certificate (possibly a chain) and key, plus facts worth logging. */
export interface UserTls {
  cert: string;
  key: string;
  meta: Record<string, unknown>;
}

/** Reads and checks the operator's pair; throws a TlsError naming the file or setting to fix. */
export async function loadUserTls(certFile: string | undefined, keyFile: string | undefined, now: Date): Promise<UserTls> {
  if (!certFile || !keyFile) {
    const [given, absent] = certFile
      ? ["SKIPPER_TLS_CERT (--tls-cert)", "SKIPPER_TLS_KEY (--tls-key)"]
      : ["SKIPPER_TLS_KEY (--tls-key)", "SKIPPER_TLS_CERT (--tls-cert)"];
    throw new TlsError(
      "TLS_PAIR_INCOMPLETE",
      `${given} is set but ${absent} is not: give both, or neither to use the generated certificate`,
    );
  }
  const certPath = resolve(certFile);
  const keyPath = resolve(keyFile);
  const certPem = await readText(certPath, "certificate");
  const keyPem = await readText(keyPath, "key");
  let cert: X509Certificate;
  let key: KeyObject;
  try {
    // The first certificate in the file is the one served; any that follow are its chain.
    cert = new X509Certificate(certPem);
  } catch (e) {
    throw new TlsError("TLS_CERT_INVALID", `TLS certificate file ${certPath} does not hold a PEM certificate`, { cause: e });
  }
  try {
    key = createPrivateKey(keyPem);
  } catch (e) {
    // Deliberately not quoting the parser's message: nothing from a key file goes into errors.
    throw new TlsError("TLS_KEY_INVALID", `TLS key file ${keyPath} does not hold an unencrypted PEM private key`, { cause: e });
  }
  if (!cert.checkPrivateKey(key)) {
    throw new TlsError("TLS_KEY_MISMATCH", `TLS key file ${keyPath} does not belong to the certificate in ${certPath}`);
  }
  const notAfter = new Date(cert.validTo);
  return {
    cert: certPem,
    key: keyPem,
    meta: {
      cert_file: certPath,
      key_file: keyPath,
      subject: cert.subject,
      issuer: cert.issuer,
      subject_alt_names: cert.subjectAltName ?? "",
      not_after: notAfter.toISOString(),
      expired: notAfter.getTime() <= now.getTime(),
      fingerprint_sha256: cert.fingerprint256,
    },
  };
}

async function readText(path: string, what: "certificate" | "key"): Promise<string> {
  try {
    return await readFile(path, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? "error";
    throw new TlsError("TLS_FILE_UNREADABLE", `cannot read TLS ${what} file ${path} (${code})`, { cause: e });
  }
}
