// The signature of agent bundles: what the controller signs verifies with its public key, and
// nothing else does (a byte changed, another version claimed, another key); the join script's
// own check (node -e, run by sh as on a host) agrees with it; pins read in both notations.
import { execFileSync, spawnSync } from "node:child_process";
import { createPrivateKey, X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { joinScript } from "../controller/nodes/join-script.js";
import { statedVersion } from "../controller/nodes/agent-bundles.js";
import {
  bundleMismatch,
  certificatePin,
  keyFingerprint,
  newSigningKeyPem,
  pinDigest,
  publicKeyFromRaw,
  rawPublicKey,
  signBundle,
} from "../common/agent-bundle-signature.js";

const key = createPrivateKey(newSigningKeyPem());
const publicKey = rawPublicKey(key);
const bundle = Buffer.from("#!/usr/bin/env node\n// skippy-bundle-version: 1.2.3\nconsole.log('skippy');\n");
const dir = mkdtempSync(join(tmpdir(), "skipper-bundle-sig-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("agent bundle signatures", () => {
  it("a signed bundle verifies with the signer's public key", () => {
    const m = signBundle(bundle, "1.2.3", key);
    expect(m).toMatchObject({ version: "1.2.3", size: bundle.length });
    expect(m.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(bundleMismatch(bundle, m, publicKey)).toBeUndefined();
    expect(Buffer.from(publicKey, "base64")).toHaveLength(32);
    expect(rawPublicKey(publicKeyFromRaw(publicKey))).toBe(publicKey);
  });

  it("one byte changed is refused, by its hash", () => {
    const m = signBundle(bundle, "1.2.3", key);
    const tampered = Buffer.from(bundle);
    tampered[30] = tampered[30]! ^ 1;
    expect(bundleMismatch(tampered, m, publicKey)).toMatch(/SHA-256 is [0-9a-f]{64}, the manifest says/);
    expect(bundleMismatch(Buffer.concat([bundle, Buffer.from(" ")]), m, publicKey)).toMatch(/size/);
  });

  it("a manifest edited to match a tampered bundle, or to claim another version, fails the signature", () => {
    const m = signBundle(bundle, "1.2.3", key);
    const tampered = Buffer.from(bundle);
    tampered[30] = tampered[30]! ^ 1;
    const forged = signBundle(tampered, "1.2.3", key);
    expect(bundleMismatch(tampered, { ...forged, signature: m.signature }, publicKey)).toMatch(/signature does not verify/);
    expect(bundleMismatch(bundle, { ...m, version: "9.9.9" }, publicKey)).toMatch(/signature does not verify/);
  });

  it("a bundle signed by another key is refused", () => {
    const other = createPrivateKey(newSigningKeyPem());
    expect(bundleMismatch(bundle, signBundle(bundle, "1.2.3", other), publicKey)).toMatch(/signature does not verify/);
    expect(bundleMismatch(bundle, signBundle(bundle, "1.2.3", key), "not-a-key")).toMatch(/not an Ed25519 public key/);
  });

  it("the bundle states its version in its first lines", () => {
    expect(statedVersion(bundle)).toBe("1.2.3");
    expect(statedVersion(Buffer.from("console.log(1)\n"))).toBeUndefined();
  });

  it("fingerprints read as SHA256:<base64> or curl's sha256//<base64>, nothing else", () => {
    const fp = keyFingerprint(publicKey);
    expect(fp).toMatch(/^SHA256:[A-Za-z0-9+/]{43}=$/);
    const b64 = fp.slice("SHA256:".length);
    expect(pinDigest(fp)).toBe(b64);
    expect(pinDigest(`sha256//${b64}`)).toBe(b64);
    expect(() => pinDigest(b64)).toThrow(/SHA256:/);
    expect(() => pinDigest("SHA256:abc=")).toThrow(/SHA256:/);
  });

  it("a certificate's pin is the SHA-256 of its public key, as openssl computes it", () => {
    const keyFile = join(dir, "k.pem");
    const certFile = join(dir, "c.pem");
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        keyFile,
        "-out",
        certFile,
        "-subj",
        "/CN=pin",
        "-days",
        "1",
      ],
      { stdio: "ignore" },
    );
    const spki = execFileSync("openssl", ["x509", "-in", certFile, "-pubkey", "-noout"]);
    const der = execFileSync("openssl", ["pkey", "-pubin", "-outform", "der"], { input: spki });
    const digest = execFileSync("openssl", ["dgst", "-sha256", "-binary"], { input: der }).toString("base64");
    expect(certificatePin(new X509Certificate(readFileSync(certFile)))).toBe(`SHA256:${digest}`);
  });
});

describe("the join script's check (sh and node -e, as on a host)", () => {
  const m = signBundle(bundle, "1.2.3", key);
  const script = joinScript({ url: "https://127.0.0.1:1", pin: keyFingerprint(publicKey), manifest: m, signingPublicKey: publicKey });
  // The script's one `node -e '…'` line, run on a file with the embedded values.
  const check = (file: string, manifest = m) => {
    const line = script.split("\n").find((l) => l.startsWith("node -e "))!;
    const vars = `VERSION='${manifest.version}' SHA256='${manifest.sha256}' SIZE='${manifest.size}' SIGNATURE='${manifest.signature}' SIGNING_KEY='${publicKey}' dir='${dir}'`;
    return spawnSync("sh", ["-c", `${vars}; ${line.replace('"$dir/skippy.mjs"', `'${file}'`)}`], { encoding: "utf8" });
  };

  it("passes the bundle the controller signed", () => {
    writeFileSync(join(dir, "good.mjs"), bundle);
    const run = check(join(dir, "good.mjs"));
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
  });

  it("refuses one byte changed, and a forged manifest, saying so", () => {
    const tampered = Buffer.from(bundle);
    tampered[30] = tampered[30]! ^ 1;
    writeFileSync(join(dir, "bad.mjs"), tampered);
    const run = check(join(dir, "bad.mjs"));
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/join.sh: the downloaded agent bundle is refused: its SHA-256 is [0-9a-f]{64}, the controller signed/);
    const forged = check(join(dir, "bad.mjs"), { ...signBundle(tampered, "1.2.3", key), signature: m.signature });
    expect(forged.status).toBe(1);
    expect(forged.stderr).toMatch(/signature does not verify/);
  });

  it("embeds nothing the shell would read into", () => {
    expect(() => joinScript({ url: "https://x;rm -rf /", pin: "SHA256:x", manifest: m, signingPublicKey: publicKey })).toThrow(
      /cannot hold this url/,
    );
  });
});
