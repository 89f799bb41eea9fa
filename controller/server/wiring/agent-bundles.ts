// The agent bundle served to joining hosts, signed with the controller's key: the configured
// file, else the built dist/skippy.mjs when there is one (none: join.sh and the download answer
// that the controller serves no bundle).
import { ensureAgentSigningKey } from "../../tls/agent-signing-key.js";
import { defaultAgentBundleFile, loadAgentBundles, type AgentBundles } from "../../nodes/agent-bundles.js";
import type { BuildOptions } from "./build-options.js";

/** Loads (or makes) the signing key and signs the bundle; logs what is served. */
export async function agentBundlesOf(opts: BuildOptions): Promise<AgentBundles> {
  const signing = await ensureAgentSigningKey(opts.dataDir, opts.agentSigningKey);
  const file = opts.agentBundle === false ? undefined : (opts.agentBundle ?? defaultAgentBundleFile());
  const bundles = await loadAgentBundles({ file, signingKey: signing.key, tlsCert: opts.tls?.cert, caPem: opts.tlsCaPem });
  opts.logger.info(
    {
      action: "agent_bundle",
      result: "ok",
      metadata: {
        file: bundles.bundle?.file ?? null,
        version: bundles.bundle?.manifest.version ?? null,
        sha256: bundles.bundle?.manifest.sha256 ?? null,
        signing_key: signing.file,
        signing_key_created: signing.created,
        signing_key_fingerprint: bundles.signingKeyFingerprint,
      },
    },
    bundles.bundle
      ? `serving agent bundle ${bundles.bundle.manifest.version} to joining hosts`
      : "no agent bundle to serve (--agent-bundle)",
  );
  return bundles;
}
