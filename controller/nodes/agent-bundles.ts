// The agent bundle this controller serves to hosts that join it (GET /v1/agent-bundle/skippy.mjs,
// the join script, AgentBundleService): read once at start, from --agent-bundle or the built
// dist/skippy.mjs beside the controller, and signed with the controller's Ed25519 key
// (tls/agent-signing-key.ts). The bundle states its version in its first lines
// ("// skippy-bundle-version: X", written by scripts/bundle-agent.mjs). With it: what a joining
// host pins (the TLS certificate's public key) and trusts (the CA), so that one look at this
// object answers everything join needs.
import { X509Certificate, type KeyObject } from "node:crypto";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { certificatePin, keyFingerprint, rawPublicKey, signBundle, type BundleManifest } from "../../common/agent-bundle-signature.js";

/** What the controller serves to joining hosts. */
export interface AgentBundles {
  /** The served bundle and its signed manifest; undefined when none was found at start. */
  bundle?: { bytes: Buffer; manifest: BundleManifest; file: string };
  /** The controller's Ed25519 key that signs bundles (agent versions too: agent-versions.ts). */
  signingKey: KeyObject;
  /** The signing key's public half: 32 raw bytes, base64. */
  signingPublicKey: string;
  signingKeyFingerprint: string;
  /** "SHA256:<base64>" of the served certificate's public key; "" without TLS. */
  tlsPin: string;
  /** The CA a joining agent trusts; "" when the controller serves an operator's certificate. */
  caPem: string;
}

/** Where the built bundle is when no file is configured: beside the built controller, else the repo's dist/. */
export function defaultAgentBundleFile(): string | undefined {
  for (const rel of ["../../skippy.mjs", "../../dist/skippy.mjs"]) {
    const file = fileURLToPath(new URL(rel, import.meta.url));
    if (existsSync(file)) return file;
  }
  return undefined;
}

/** The version a bundle states in its first lines, or undefined. */
export function statedVersion(bytes: Buffer): string | undefined {
  return /^\/\/ skippy-bundle-version: (\S+)$/m.exec(bytes.subarray(0, 1024).toString("latin1"))?.[1];
}

/**
 * Reads and signs the bundle. `file` undefined: none served. A file without a stated version is
 * refused: a signature must say which version it vouches for.
 */
export async function loadAgentBundles(opts: {
  file: string | undefined;
  signingKey: KeyObject;
  /** The served certificate (PEM; the first one is the leaf); undefined without TLS. */
  tlsCert?: string;
  caPem?: string;
}): Promise<AgentBundles> {
  const signingPublicKey = rawPublicKey(opts.signingKey);
  const common = {
    signingKey: opts.signingKey,
    signingPublicKey,
    signingKeyFingerprint: keyFingerprint(signingPublicKey),
    tlsPin: opts.tlsCert ? certificatePin(new X509Certificate(opts.tlsCert)) : "",
    caPem: opts.caPem ?? "",
  };
  if (!opts.file) return common;
  const bytes = await readFile(opts.file);
  const version = statedVersion(bytes);
  if (!version)
    throw new Error(
      `the agent bundle ${opts.file} states no version (no "// skippy-bundle-version:" line): build it with npm run bundle:agent`,
    );
  return { ...common, bundle: { bytes, manifest: signBundle(bytes, version, opts.signingKey), file: opts.file } };
}
