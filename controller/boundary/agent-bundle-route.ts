// GET /v1/agent-bundle/skippy.mjs and GET /v1/join.sh: the agent bundle and the join script,
// plain HTTPS downloads on the API's own port, like the dashboard's files (not RPCs: a host with
// nothing but curl fetches them). No credential: a joining host has only its enrollment token,
// and neither holds a secret (the bundle is signed, the script holds the manifest and the pin).
// The bundle's manifest is AgentBundleService.GetAgentBundle. Both are made at start
// (nodes/agent-bundles.ts); the script names the URL the host reached, from the request's
// authority, only when it is a plain host[:port].
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { Logger } from "../../common/logging/logger.js";
import type { AgentBundles } from "../nodes/agent-bundles.js";
import { joinScript, urlOfAuthority } from "../nodes/join-script.js";
import { stopReading } from "./request-gate.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

/** Where the bundle and the script are served. */
export const BUNDLE_PATH = "/v1/agent-bundle/skippy.mjs";
export const JOIN_SCRIPT_PATH = "/v1/join.sh";

/** Serves the two downloads; false (nothing done) for any other path. */
export function createAgentBundleRoute(bundles: AgentBundles, logger: Logger): (req: Request, res: Response) => boolean {
  return (req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (path !== BUNDLE_PATH && path !== JOIN_SCRIPT_PATH) return false;
    const method = (req.method ?? "GET").toUpperCase();
    if (method !== "GET" && method !== "HEAD") {
      stopReading(req, res);
      return answer(req, res, 405, "text/plain; charset=utf-8", "use GET\n", { allow: "GET, HEAD" });
    }
    const bundle = bundles.bundle;
    if (!bundle)
      return answer(
        req,
        res,
        404,
        "text/plain; charset=utf-8",
        "this controller serves no agent bundle: start it with --agent-bundle FILE (npm run bundle:agent)\n",
      );
    if (path === BUNDLE_PATH) {
      logger.info({ action: "agent_bundle", result: "ok", metadata: { version: bundle.manifest.version } }, "agent bundle downloaded");
      return answer(req, res, 200, "text/javascript; charset=utf-8", bundle.bytes);
    }
    const authority = (req.headers[":authority"] as string | undefined) ?? req.headers.host;
    const url = urlOfAuthority(authority);
    if (!url || !bundles.tlsPin)
      return answer(req, res, 400, "text/plain; charset=utf-8", "join.sh needs the controller over TLS, reached by a plain host[:port]\n");
    const script = joinScript({ url, pin: bundles.tlsPin, manifest: bundle.manifest, signingPublicKey: bundles.signingPublicKey });
    return answer(req, res, 200, "text/x-shellscript; charset=utf-8", script);
  };
}

function answer(
  req: Request,
  res: Response,
  status: number,
  type: string,
  body: string | Buffer,
  headers: Record<string, string> = {},
): true {
  const bytes = typeof body === "string" ? Buffer.from(body) : body;
  res.writeHead(status, {
    "content-type": type,
    "content-length": String(bytes.length),
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    ...headers,
  });
  if ((req.method ?? "GET").toUpperCase() === "HEAD") res.end();
  else res.end(bytes);
  return true;
}
