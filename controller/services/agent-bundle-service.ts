// AgentBundleService: the manifest of the agent bundle this controller serves, its signing key,
// and what a joining host pins and trusts (nodes/agent-bundles.ts; the bundle itself is
// boundary/agent-bundle-route.ts's download).
import type { ServiceImpl } from "@connectrpc/connect";
import type { AgentBundleService } from "../../gen/skipper/v1/agent_bundle_service_pb.js";
import { responseMeta } from "../base/context.js";
import type { ServiceDeps } from "./deps.js";

/** AgentBundleService implementation. */
export function agentBundleService(deps: Pick<ServiceDeps, "agentBundles">): ServiceImpl<typeof AgentBundleService> {
  return {
    getAgentBundle(_req, ctx) {
      const b = deps.agentBundles;
      const m = b.bundle?.manifest;
      return {
        meta: responseMeta(ctx),
        manifest: m ? { version: m.version, sha256: m.sha256, size: BigInt(m.size), signature: m.signature } : undefined,
        signingPublicKey: b.signingPublicKey,
        signingKeyFingerprint: b.signingKeyFingerprint,
        tlsPin: b.tlsPin,
        caPem: b.caPem,
      };
    },
  };
}
