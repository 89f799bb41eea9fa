// POST /v1/git-sources/{id}/webhook: a forge's push webhook (GitHub, Gitea, Forgejo) syncs a Git
// source at once. Forges cannot send a bearer credential; they sign the body instead, with a
// secret both sides hold: HMAC-SHA256 of the raw body, in X-Hub-Signature-256 ("sha256=<hex>",
// GitHub, Gitea, Forgejo) or X-Gitea-Signature ("<hex>"). The source names the secret value
// (git_source.webhook_secret, a secret of no tenant). So the route is outside the contract (the
// signature covers the bytes as sent, which the REST layer would have decoded) and admits its
// caller by the signature alone: an unknown source, one without a webhook secret and a signature
// that does not match are all the same 401, so the route tells nobody which sources exist. A
// matching push is answered 202 at once; the sync runs behind it, its outcome in the source's
// status and events as for any sync.
import { createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { Logger } from "../../common/logging/logger.js";
import { isValidId } from "../../common/ids.js";
import { invalid, unauthorized, type SkipperError } from "../base/errors.js";
import { gitSourceOf } from "../promotion/git-sync.js";
import { openSecretValue } from "../resources/secret-values.js";
import type { Store } from "../store/store.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";
import { httpStatusOf } from "./api-errors.js";
import { stopReading } from "./request-gate.js";
import { envelope, type TraceIds } from "./rest/envelope.js";
import { readBodyBytes } from "./rest/read-body.js";
import { send, traceIdsOf } from "./rest/rest-handler.js";

type Request = IncomingMessage | Http2ServerRequest;
type Response = ServerResponse | Http2ServerResponse;

const PATH = /^\/v1\/git-sources\/([^/?]+)\/webhook$/;
/** A push event's body: GitHub caps them at 25 MiB, real ones are a few KiB to a few hundred. */
const MAX_BODY = 1 << 20;
const BODY_DEADLINE_MS = 10_000;

export interface GitWebhookOptions {
  store: Store;
  keyRing: SecretKeyRing;
  logger: Logger;
  /** Starts a sync of the source (its outcome is recorded by the sync). */
  sync: (id: string, ids: TraceIds) => void;
}

/** Serves the webhook route; returns false (and does nothing) for any other path. */
export function createGitWebhookRoute(opts: GitWebhookOptions): (req: Request, res: Response) => boolean {
  return (req, res) => {
    const m = PATH.exec((req.url ?? "/").split("?")[0] ?? "");
    if (!m) return false;
    const ids = traceIdsOf(req.headers);
    serve(opts, m[1]!, req, res, ids).catch((e: unknown) => {
      const refusal = e as SkipperError;
      const status = typeof refusal.code === "string" ? httpStatusOf(refusal.code) : 400;
      opts.logger.info(
        { action: "git_webhook", result: refusal.code ?? "INVALID_REQUEST", request_id: ids.requestId, metadata: { path: req.url } },
        `git webhook refused: ${refusal.message}`,
      );
      stopReading(req, res);
      if (!res.headersSent)
        send(res, status, ids, envelope(ids, null, { code: refusal.code ?? "INVALID_REQUEST", message: refusal.message, details: {} }));
    });
    return true;
  };
}

async function serve(opts: GitWebhookOptions, rawId: string, req: Request, res: Response, ids: TraceIds): Promise<void> {
  if ((req.method ?? "").toUpperCase() !== "POST") throw invalid("the git webhook takes POST");
  const id = decodeURIComponent(rawId);
  const body = await readBodyBytes(req, MAX_BODY, { deadlineMs: BODY_DEADLINE_MS }).catch(() => {
    throw invalid(`the push's body must arrive whole within ${BODY_DEADLINE_MS / 1000} s and be at most ${MAX_BODY} bytes`);
  });
  const key = isValidId(id) ? await webhookKey(opts, id) : undefined;
  const given = signatureOf(req.headers);
  if (!key || !given || !matches(key, body, given))
    throw unauthorized("the push's signature does not match (or the source takes no webhook)");
  // A ping (GitHub sends one when the hook is made) is accepted and syncs too: cheap, and it proves the hook.
  opts.sync(id, ids);
  opts.logger.info(
    { action: "git_webhook", result: "accepted", request_id: ids.requestId, metadata: { git_source: id } },
    "git push accepted",
  );
  send(res, 202, ids, envelope(ids, { accepted: true, git_source: id }, null));
}

// The source's webhook secret value, if it has one.
async function webhookKey(opts: GitWebhookOptions, id: string): Promise<string | undefined> {
  const ref = gitSourceOf(await opts.store.getResource("git_source", id))?.webhookSecret;
  if (!ref || ref.secretId === "") return undefined;
  const secret = await opts.store.getResource("secret", ref.secretId);
  if (secret?.deletion || secret?.desiredState?.kind.case !== "secret" || secret.desiredState.kind.value.tenantId !== "") return undefined;
  return openSecretValue(opts.keyRing, secret.id, secret.desiredState.kind.value, ref.key);
}

// The hex HMAC the forge sent, lowercased.
function signatureOf(headers: Request["headers"]): string | undefined {
  const hub = headers["x-hub-signature-256"];
  if (typeof hub === "string" && hub.startsWith("sha256=")) return hub.slice(7).toLowerCase();
  const gitea = headers["x-gitea-signature"] ?? headers["x-forgejo-signature"];
  return typeof gitea === "string" ? gitea.toLowerCase() : undefined;
}

function matches(key: string, body: Buffer, given: string): boolean {
  const want = Buffer.from(createHmac("sha256", key).update(body).digest("hex"), "utf8");
  const got = Buffer.from(given, "utf8");
  return got.length === want.length && timingSafeEqual(got, want);
}
