// TLS material: the generated local CA and server certificate (files, modes, contents, reuse and
// renewal), real HTTP/2 and HTTP/1.1 clients trusting only ca.crt, and operator-supplied pairs.
import { afterAll, describe, expect, it } from "vitest";
import { createPrivateKey, X509Certificate } from "node:crypto";
import { copyFile, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import http2 from "node:http2";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { isTlsError, type TlsErrorCode } from "../controller/tls/tls-error.js";
import { certificateNames } from "../controller/tls/subject-names.js";
import { ensureTlsMaterial, type TlsMaterial } from "../controller/tls/tls-material.js";
import { x509 } from "../common/x509.js";

const DAY_MS = 24 * 60 * 60 * 1000;
const dirs: string[] = [];

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "skipper-tls-"));
  dirs.push(dir);
  return dir;
}

afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

/** Generates material in a fresh data dir. */
async function fresh(opts: { hostnames?: string[]; onInfo?: (m: string, meta: Record<string, unknown>) => void } = {}) {
  const dataDir = await tempDir();
  const material = await ensureTlsMaterial({ dataDir, ...opts });
  return { dataDir, material, tlsDir: join(dataDir, "tls") };
}

async function mode(path: string): Promise<number> {
  return (await stat(path)).mode & 0o777;
}

function issuedBy(certPem: string, caPem: string): boolean {
  const cert = new X509Certificate(certPem);
  const ca = new X509Certificate(caPem);
  return cert.checkIssued(ca) && cert.verify(ca.publicKey);
}

async function tlsErrorCode(p: Promise<unknown>): Promise<{ code: TlsErrorCode; message: string }> {
  try {
    await p;
  } catch (e) {
    if (isTlsError(e)) return { code: e.code, message: e.message };
    throw e;
  }
  throw new Error("expected a TlsError, the call succeeded");
}

/** A real HTTP/2 server with HTTP/1.1 fallback, as the controller runs it, on 127.0.0.1:0. */
async function withServer(material: TlsMaterial, fn: (port: number) => Promise<void>): Promise<void> {
  const server = http2.createSecureServer({ allowHTTP1: true, cert: material.cert, key: material.key }, (req, res) => {
    res.end(`hello over ${req.httpVersion}`);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    await fn((server.address() as AddressInfo).port);
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

function h2Get(port: number, ca?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`https://127.0.0.1:${port}`, ca ? { ca } : {});
    session.on("error", reject);
    // Request only once the handshake is done, so a refused certificate surfaces as the
    // session's TLS error rather than as a cancelled stream.
    session.on("connect", () => {
      const req = session.request({ ":path": "/" });
      let body = "";
      req.setEncoding("utf8");
      req.on("data", (c: string) => (body += c));
      req.on("end", () => {
        session.close();
        resolve(body);
      });
      req.on("error", reject);
    });
  });
}

function h1Get(port: number, opts: { ca?: string; servername?: string } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = https.get({ host: "127.0.0.1", port, path: "/", agent: false, ...opts }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve(body));
    });
    req.on("error", reject);
  });
}

async function failure(p: Promise<unknown>): Promise<NodeJS.ErrnoException> {
  try {
    await p;
  } catch (e) {
    return e as NodeJS.ErrnoException;
  }
  throw new Error("expected the request to fail, it succeeded");
}

describe("generated material, first start", () => {
  it("creates ca.crt, ca.key, server.crt and server.key with 0600 keys in a 0700 directory", async () => {
    const { dataDir, material, tlsDir } = await fresh();
    expect(material.source).toBe("generated");
    expect(material.generated).toBe(true);
    expect(material.caFile).toBe(join(dataDir, "tls", "ca.crt"));
    expect(await readFile(material.caFile!, "utf8")).toBe(material.caCert);
    expect(await readFile(join(tlsDir, "server.crt"), "utf8")).toBe(material.cert);
    expect(await readFile(join(tlsDir, "server.key"), "utf8")).toBe(material.key);
    expect(material.key).toContain("-----BEGIN PRIVATE KEY-----");
    expect(await readFile(join(tlsDir, "ca.key"), "utf8")).toContain("-----BEGIN PRIVATE KEY-----");
    expect(await mode(tlsDir)).toBe(0o700);
    expect(await mode(join(tlsDir, "ca.key"))).toBe(0o600);
    expect(await mode(join(tlsDir, "server.key"))).toBe(0o600);
  });

  it("makes a P-256 CA that signs a server certificate naming localhost, this host, loopback IPs and extra hostnames", async () => {
    const { material } = await fresh({ hostnames: ["skipper.test", "10.20.30.40", "fd00::7"] });
    expect(issuedBy(material.cert, material.caCert!)).toBe(true);

    const ca = new x509.X509Certificate(material.caCert!);
    expect(ca.subject).toMatch(/^CN=Skipper local CA [0-9a-f]{8}$/);
    expect(ca.subject).toBe(ca.issuer);
    const bc = ca.getExtension(x509.BasicConstraintsExtension)!;
    expect([bc.ca, bc.pathLength, bc.critical]).toEqual([true, 0, true]);
    expect(ca.getExtension(x509.KeyUsagesExtension)!.usages).toBe(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign);
    expect(ca.publicKey.algorithm).toMatchObject({ name: "ECDSA", namedCurve: "P-256" });
    const caYears = (ca.notAfter.getTime() - ca.notBefore.getTime()) / (365.25 * DAY_MS);
    expect(Math.round(caYears)).toBe(10);

    const server = new x509.X509Certificate(material.cert);
    expect(server.subject).toBe("CN=skipper-controller");
    expect(server.publicKey.algorithm).toMatchObject({ name: "ECDSA", namedCurve: "P-256" });
    expect(server.getExtension(x509.ExtendedKeyUsageExtension)!.usages).toEqual([x509.ExtendedKeyUsage.serverAuth]);
    expect(server.getExtension(x509.KeyUsagesExtension)!.usages).toBe(x509.KeyUsageFlags.digitalSignature);
    expect(server.notAfter.getTime() - server.notBefore.getTime()).toBe(397 * DAY_MS);
    expect(server.serialNumber).toMatch(/^[0-7][0-9a-f]{31}$/);
    const names = server.getExtension(x509.SubjectAlternativeNameExtension)!.names.toJSON();
    expect(names).toEqual(
      expect.arrayContaining([
        { type: "dns", value: "localhost" },
        { type: "dns", value: hostname().toLowerCase() },
        { type: "dns", value: "skipper.test" },
        { type: "ip", value: "10.20.30.40" },
        { type: "ip", value: "fd00::7" },
        { type: "ip", value: "127.0.0.1" },
        { type: "ip", value: "::1" },
      ]),
    );
  });

  it("is reachable over HTTP/2 and HTTP/1.1 by clients that trust only ca.crt", async () => {
    const { material } = await fresh({ hostnames: ["skipper.test"] });
    const ca = await readFile(material.caFile!, "utf8");
    await withServer(material, async (port) => {
      expect(await h2Get(port, ca)).toBe("hello over 2.0");
      expect(await h1Get(port, { ca })).toBe("hello over 1.1");
      expect(await h1Get(port, { ca, servername: "skipper.test" })).toBe("hello over 1.1");
      expect(await h1Get(port, { ca, servername: "localhost" })).toBe("hello over 1.1");
      // A name the certificate does not carry fails hostname verification, not the chain.
      expect((await failure(h1Get(port, { ca, servername: "elsewhere.test" }))).code).toBe("ERR_TLS_CERT_ALTNAME_INVALID");
    });
  });

  it("is refused with a certificate error by clients that do not trust the CA", async () => {
    const { material } = await fresh();
    const other = await fresh();
    await withServer(material, async (port) => {
      expect((await failure(h2Get(port))).code).toBe("UNABLE_TO_VERIFY_LEAF_SIGNATURE");
      expect((await failure(h1Get(port))).code).toBe("UNABLE_TO_VERIFY_LEAF_SIGNATURE");
      expect((await failure(h1Get(port, { ca: other.material.caCert! }))).code).toBe("UNABLE_TO_VERIFY_LEAF_SIGNATURE");
    });
  });
});

describe("generated material, later starts", () => {
  it("a second start reuses the same CA and server files byte for byte", async () => {
    const { dataDir, material } = await fresh({ hostnames: ["skipper.test"] });
    const again = await ensureTlsMaterial({ dataDir, hostnames: ["SKIPPER.test."] });
    expect(again.generated).toBe(false);
    expect(again.cert).toBe(material.cert);
    expect(again.key).toBe(material.key);
    expect(again.caCert).toBe(material.caCert);
    expect(again.caFile).toBe(material.caFile);
  });

  it("a server certificate within 30 days of expiry is renewed with the same CA", async () => {
    const { dataDir, material, tlsDir } = await fresh();
    const untouched = await copyTlsDir(dataDir);
    const now = new Date(Date.now() + 370 * DAY_MS);
    const infos: Array<[string, Record<string, unknown>]> = [];
    const renewed = await ensureTlsMaterial({ dataDir, now, onInfo: (m, meta) => infos.push([m, meta]) });
    expect(renewed.generated).toBe(true);
    expect(renewed.caCert).toBe(material.caCert);
    expect(renewed.cert).not.toBe(material.cert);
    expect(renewed.key).not.toBe(material.key);
    expect(issuedBy(renewed.cert, material.caCert!)).toBe(true);
    expect(new x509.X509Certificate(renewed.cert).notAfter.getTime()).toBeGreaterThan(now.getTime() + 300 * DAY_MS);
    expect(await readFile(join(tlsDir, "server.crt"), "utf8")).toBe(renewed.cert);
    expect(await mode(join(tlsDir, "server.key"))).toBe(0o600);
    expect(infos.find(([m]) => m.includes("issued"))?.[1]).toMatchObject({ reason: "expiring" });
    // 60 days before expiry is still fine.
    const early = await ensureTlsMaterial({ dataDir: untouched, now: new Date(Date.now() + 330 * DAY_MS) });
    expect(early.generated).toBe(false);
  });

  it("a requested hostname the certificate lacks gets a new server certificate from the same CA", async () => {
    const { dataDir, material } = await fresh();
    const infos: Array<[string, Record<string, unknown>]> = [];
    const again = await ensureTlsMaterial({ dataDir, hostnames: ["new.test"], onInfo: (m, meta) => infos.push([m, meta]) });
    expect(again.generated).toBe(true);
    expect(again.caCert).toBe(material.caCert);
    expect(new X509Certificate(again.cert).subjectAltName).toContain("DNS:new.test");
    expect(infos.find(([m]) => m.includes("issued"))?.[1]).toMatchObject({ reason: "names-not-covered", missing_names: ["DNS:new.test"] });
  });

  it("a server certificate not signed by the CA is replaced", async () => {
    const { dataDir, material, tlsDir } = await fresh();
    const other = await fresh();
    await copyFile(join(other.tlsDir, "server.crt"), join(tlsDir, "server.crt"));
    await copyFile(join(other.tlsDir, "server.key"), join(tlsDir, "server.key"));
    const again = await ensureTlsMaterial({ dataDir });
    expect(again.generated).toBe(true);
    expect(again.caCert).toBe(material.caCert);
    expect(issuedBy(again.cert, material.caCert!)).toBe(true);
  });

  it("a server key that does not match its certificate is replaced, and leftover temp files are removed", async () => {
    const { dataDir, material, tlsDir } = await fresh();
    const other = await fresh();
    await copyFile(join(other.tlsDir, "server.key"), join(tlsDir, "server.key"));
    const leftover = join(tlsDir, ".server.key.0123456789ab.tmp");
    await writeFile(leftover, "half a key");
    const again = await ensureTlsMaterial({ dataDir });
    expect(again.generated).toBe(true);
    expect(again.caCert).toBe(material.caCert);
    expect(new X509Certificate(again.cert).checkPrivateKey(createPrivateKey(again.key))).toBe(true);
    await expect(stat(leftover)).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("a corrupt or missing CA with server files present regenerates everything", async () => {
    for (const damage of ["corrupt-cert", "missing-key"] as const) {
      const { dataDir, material, tlsDir } = await fresh();
      if (damage === "corrupt-cert")
        await writeFile(join(tlsDir, "ca.crt"), "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n");
      else await rm(join(tlsDir, "ca.key"));
      const infos: string[] = [];
      const again = await ensureTlsMaterial({ dataDir, onInfo: (m) => infos.push(m) });
      expect(again.generated).toBe(true);
      expect(again.caCert).not.toBe(material.caCert);
      expect(again.cert).not.toBe(material.cert);
      expect(issuedBy(again.cert, again.caCert!)).toBe(true);
      expect(await readFile(join(tlsDir, "ca.crt"), "utf8")).toBe(again.caCert);
      expect(await mode(join(tlsDir, "ca.key"))).toBe(0o600);
      expect(infos.some((m) => m.includes("clients must trust the new ca.crt"))).toBe(true);
    }
  });

  it("never passes key material to onInfo", async () => {
    const seen: unknown[] = [];
    const onInfo = (m: string, meta: Record<string, unknown>) => seen.push([m, meta]);
    const { dataDir, material } = await fresh({ onInfo });
    await ensureTlsMaterial({ dataDir, onInfo });
    await ensureTlsMaterial({ dataDir, onInfo, now: new Date(Date.now() + 380 * DAY_MS) });
    const logged = JSON.stringify(seen);
    const keyBody = material.key.split("\n")[1]!;
    const caKeyBody = (await readFile(join(dataDir, "tls", "ca.key"), "utf8")).split("\n")[1]!;
    expect(seen.length).toBeGreaterThanOrEqual(4);
    expect(logged).not.toContain("PRIVATE KEY");
    expect(logged).not.toContain(keyBody);
    expect(logged).not.toContain(caKeyBody);
  });

  it("an extra hostname that is neither a DNS name nor an IP address is refused", async () => {
    const e = await tlsErrorCode(ensureTlsMaterial({ dataDir: await tempDir(), hostnames: ["https://skipper.test/"] }));
    expect(e.code).toBe("TLS_HOSTNAME_INVALID");
    expect(e.message).toContain("https://skipper.test/");
  });
});

describe("names read from a stored certificate", () => {
  it("takes DNS and IP entries from node:crypto's rendering, quoted values included, and ignores other kinds", () => {
    const cert = {
      subjectAltName: 'DNS:"odd,name", DNS:Ok.Example., email:a@b.c, URI:http://x, IP Address:0:0:0:0:0:0:0:1, DNS:"quoted.example"',
    };
    expect(certificateNames(cert as X509Certificate)).toEqual([
      { type: "dns", value: "ok.example" },
      { type: "ip", value: "::1" },
      { type: "dns", value: "quoted.example" },
    ]);
    expect(certificateNames({ subjectAltName: undefined } as unknown as X509Certificate)).toEqual([]);
  });
});

describe("operator-supplied certificate", () => {
  it("serves the given cert and key as they are and writes nothing under the data dir", async () => {
    const { tlsDir } = await fresh();
    const dataDir = await tempDir();
    const certFile = join(tlsDir, "server.crt");
    const keyFile = join(tlsDir, "server.key");
    const m = await ensureTlsMaterial({ dataDir, certFile, keyFile });
    expect([m.source, m.generated, m.caFile, m.caCert]).toEqual(["user", false, undefined, undefined]);
    expect(m.cert).toBe(await readFile(certFile, "utf8"));
    expect(m.key).toBe(await readFile(keyFile, "utf8"));
    await expect(stat(join(dataDir, "tls"))).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("refuses a key that does not belong to the certificate, naming both files", async () => {
    const a = await fresh();
    const b = await fresh();
    const certFile = join(a.tlsDir, "server.crt");
    const keyFile = join(b.tlsDir, "server.key");
    const e = await tlsErrorCode(ensureTlsMaterial({ dataDir: await tempDir(), certFile, keyFile }));
    expect(e.code).toBe("TLS_KEY_MISMATCH");
    expect(e.message).toContain(keyFile);
    expect(e.message).toContain(certFile);
  });

  it("refuses a cert without a key (and a key without a cert), naming the missing setting", async () => {
    const { tlsDir } = await fresh();
    const onlyCert = await tlsErrorCode(ensureTlsMaterial({ dataDir: await tempDir(), certFile: join(tlsDir, "server.crt") }));
    expect(onlyCert.code).toBe("TLS_PAIR_INCOMPLETE");
    expect(onlyCert.message).toMatch(/SKIPPER_TLS_KEY .* is not/);
    const onlyKey = await tlsErrorCode(ensureTlsMaterial({ dataDir: await tempDir(), keyFile: join(tlsDir, "server.key") }));
    expect(onlyKey.message).toMatch(/SKIPPER_TLS_CERT .* is not/);
  });

  it("refuses unreadable or unparseable files, naming the file", async () => {
    const { tlsDir } = await fresh();
    const missing = join(tlsDir, "nope.crt");
    const e = await tlsErrorCode(ensureTlsMaterial({ dataDir: await tempDir(), certFile: missing, keyFile: join(tlsDir, "server.key") }));
    expect(e).toEqual({ code: "TLS_FILE_UNREADABLE", message: expect.stringContaining(missing) });
    const notACert = join(tlsDir, "server.key");
    const bad = await tlsErrorCode(ensureTlsMaterial({ dataDir: await tempDir(), certFile: notACert, keyFile: notACert }));
    expect(bad).toEqual({ code: "TLS_CERT_INVALID", message: expect.stringContaining(notACert) });
  });
});

/** Copies a data dir's tls/ into a new data dir (to check a second `now` on the same files). */
async function copyTlsDir(dataDir: string): Promise<string> {
  const copy = await tempDir();
  await mkdir(join(copy, "tls"), { mode: 0o700 });
  for (const f of ["ca.crt", "ca.key", "server.crt", "server.key"]) await copyFile(join(dataDir, "tls", f), join(copy, "tls", f));
  return copy;
}
