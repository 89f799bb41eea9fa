// A client of the OCI distribution API, as far as a version watch needs it: a repository's tags
// (GET /v2/<path>/tags/list, paged by Link rel="next") and a tag's manifest digest (HEAD
// /v2/<path>/manifests/<tag>, else GET and sha256 of the body). Where it answers:
// registry-endpoint.ts; how it logs in: registry-auth.ts; one exchange: registry-http.ts.
// Bounded: at most `maxPages` pages, `maxTags` tags, `maxBodyBytes` a body, `timeoutMs` a
// request; beyond, a TOO_LARGE or TIMEOUT RegistryError saying so.
import { createHash } from "node:crypto";
import http from "node:http";
import https from "node:https";
import { rootCertificates } from "node:tls";
import {
  basicAuthorization,
  challengeOf,
  readTokenAnswer,
  type RegistryChallenge,
  type RegistryCredential,
  TokenCache,
} from "./registry-auth.js";
import { type RegistryEndpoint, registryEndpoint } from "./registry-endpoint.js";
import { RegistryError, type RegistryErrorSubject } from "./registry-error.js";
import { nextLink } from "./registry-headers.js";
import { exchange, type RegistryAnswer } from "./registry-http.js";

export type { RegistryCredential } from "./registry-auth.js";

export interface RegistryClientOptions {
  /** PEM of one more CA for https registries and token realms (Node's own CAs stay trusted). */
  caPem?: string;
  /** Deadline of one request, default 15 s. */
  timeoutMs?: number;
  /** Tags asked for a page (`?n=`), default 1000. */
  pageSize?: number;
  /** Limits of one listing: pages (default 20), tags (10,000), bytes a body (4 MiB). */
  maxPages?: number;
  maxTags?: number;
  maxBodyBytes?: number;
  /** The clock of the token cache. */
  now?: () => number;
}

/** What one call brings: the login (none: anonymous) and its caller's abort. */
export interface RegistryCallOptions {
  credential?: RegistryCredential;
  signal?: AbortSignal;
}

/** The manifest types asked for, so that a multi-platform tag answers its index's digest. */
export const MANIFEST_MEDIA_TYPES = [
  "application/vnd.oci.image.index.v1+json",
  "application/vnd.docker.distribution.manifest.list.v2+json",
  "application/vnd.oci.image.manifest.v1+json",
  "application/vnd.docker.distribution.manifest.v2+json",
];

const DIGEST = /^sha256:[0-9a-f]{64}$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const TOKEN_BODY_BYTES = 64 * 1024;

export class RegistryClient {
  private readonly timeoutMs: number;
  private readonly pageSize: number;
  private readonly maxPages: number;
  private readonly maxTags: number;
  private readonly maxBodyBytes: number;
  private readonly httpAgent = new http.Agent({ keepAlive: true, maxSockets: 8 });
  private readonly httpsAgent: https.Agent;
  private readonly tokens: TokenCache;
  private readonly challenges = new Map<string, RegistryChallenge>();
  private readonly pendingTokens = new Map<string, Promise<string>>();

  constructor(options: RegistryClientOptions = {}) {
    this.timeoutMs = options.timeoutMs ?? 15_000;
    this.pageSize = options.pageSize ?? 1000;
    this.maxPages = options.maxPages ?? 20;
    this.maxTags = options.maxTags ?? 10_000;
    this.maxBodyBytes = options.maxBodyBytes ?? 4 * 1024 * 1024;
    this.httpsAgent = new https.Agent({
      keepAlive: true,
      maxSockets: 8,
      ...(options.caPem ? { ca: [...rootCertificates, options.caPem] } : {}),
    });
    this.tokens = new TokenCache(options.now);
  }

  /** Every tag of `repository`, in the registry's order (lexical for distribution's). */
  async listTags(repository: string, call: RegistryCallOptions = {}): Promise<string[]> {
    const ep = registryEndpoint(repository);
    const tags = new Set<string>();
    let url = new URL(`/v2/${ep.path}/tags/list?n=${this.pageSize}`, ep.origin);
    for (let page = 1; ; page++) {
      const answer = await this.authorized(ep, "GET", url, "application/json", call);
      if (answer.status !== 200) throw statusFailure(answer, subjectOf(ep), "listing its tags");
      for (const tag of tagsOf(answer.body, subjectOf(ep))) tags.add(tag);
      if (tags.size > this.maxTags) throw new RegistryError("TOO_LARGE", subjectOf(ep), `it has more than ${this.maxTags} tags`);
      const link = answer.headers.link;
      const next = nextLink(Array.isArray(link) ? link.join(", ") : link);
      if (!next) return [...tags];
      if (page >= this.maxPages)
        throw new RegistryError("TOO_LARGE", subjectOf(ep), `its tags take more than ${this.maxPages} pages of ${this.pageSize}`);
      const following = new URL(next, url);
      if (following.origin !== url.origin)
        throw new RegistryError("BAD_RESPONSE", subjectOf(ep), `its next page of tags is on another origin (${following.origin})`);
      url = following;
    }
  }

  /** The digest ("sha256:<64 hex>") of the manifest `tag` names: what a pull by that tag gets now. */
  async digestOf(repository: string, tag: string, call: RegistryCallOptions = {}): Promise<string> {
    const ep = registryEndpoint(repository);
    if (!TAG.test(tag)) throw new RegistryError("INVALID_REPOSITORY", subjectOf(ep), `${JSON.stringify(tag.slice(0, 130))} is no tag`);
    const url = new URL(`/v2/${ep.path}/manifests/${tag}`, ep.origin);
    const accept = MANIFEST_MEDIA_TYPES.join(", ");
    const head = await this.authorized(ep, "HEAD", url, accept, call);
    if (head.status !== 200) throw statusFailure(head, subjectOf(ep), `reading tag ${tag}`);
    const said = head.headers["docker-content-digest"];
    if (typeof said === "string" && said) {
      if (!DIGEST.test(said))
        throw new RegistryError("BAD_RESPONSE", subjectOf(ep), `tag ${tag} has a digest not of the form sha256:<64 hex>`);
      return said;
    }
    // No digest header (allowed by the spec): the digest is the manifest's own bytes hashed.
    const get = await this.authorized(ep, "GET", url, accept, call);
    if (get.status !== 200) throw statusFailure(get, subjectOf(ep), `reading tag ${tag}`);
    return `sha256:${createHash("sha256").update(get.body).digest("hex")}`;
  }

  /** Closes the kept-alive connections. */
  close(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }

  // One request with whatever login the registry asks for: what it asked before at once, else
  // anonymous; on 401, by its challenge (a cached token that is refused is asked for again once).
  private async authorized(
    ep: RegistryEndpoint,
    method: "GET" | "HEAD",
    url: URL,
    accept: string,
    call: RegistryCallOptions,
  ): Promise<RegistryAnswer> {
    const scope = `repository:${ep.path}:pull`;
    const known = this.challenges.get(ep.origin);
    let auth = known ? await this.authorization(ep, known, scope, call, false) : undefined;
    for (;;) {
      const answer = await exchange({
        url,
        method,
        headers: { accept, "user-agent": "skipper-controller", ...(auth ? { authorization: auth.value } : {}) },
        agent: this.agentFor(url),
        timeoutMs: this.timeoutMs,
        maxBodyBytes: this.maxBodyBytes,
        subject: subjectOf(ep),
        signal: call.signal,
      });
      if (answer.status !== 401) return answer;
      const subject = { ...subjectOf(ep), status: 401 };
      if (auth?.fresh)
        throw new RegistryError(
          "UNAUTHORIZED",
          subject,
          call.credential ? "it refused the login given" : "it refused an anonymous request",
        );
      const challenge = challengeOf(answer.headers["www-authenticate"], subject);
      this.challenges.set(ep.origin, challenge);
      auth = await this.authorization(ep, challenge, scope, call, true);
    }
  }

  // The Authorization header a challenge wants; `fresh`: nothing better to try after a refusal.
  private async authorization(
    ep: RegistryEndpoint,
    challenge: RegistryChallenge,
    scope: string,
    call: RegistryCallOptions,
    renew: boolean,
  ): Promise<{ value: string; fresh: boolean } | undefined> {
    if (challenge.scheme === "basic") {
      if (call.credential) return { value: basicAuthorization(call.credential), fresh: true };
      if (renew) throw new RegistryError("UNAUTHORIZED", { ...subjectOf(ep), status: 401 }, "it needs a login and none is given");
      return undefined;
    }
    const key = TokenCache.key(ep.origin, scope, call.credential);
    const cached = renew ? undefined : this.tokens.get(key);
    if (cached) return { value: `Bearer ${cached}`, fresh: false };
    if (renew) this.tokens.delete(key);
    return { value: `Bearer ${await this.token(ep, challenge, scope, key, call)}`, fresh: true };
  }

  // A token from the realm, one request at a time per key.
  private token(
    ep: RegistryEndpoint,
    challenge: RegistryChallenge & { scheme: "bearer" },
    scope: string,
    key: string,
    call: RegistryCallOptions,
  ): Promise<string> {
    const pending = this.pendingTokens.get(key);
    if (pending) return pending;
    const asked = this.askToken(ep, challenge, scope, key, call).finally(() => this.pendingTokens.delete(key));
    this.pendingTokens.set(key, asked);
    return asked;
  }

  private async askToken(
    ep: RegistryEndpoint,
    challenge: RegistryChallenge & { scheme: "bearer" },
    scope: string,
    key: string,
    call: RegistryCallOptions,
  ): Promise<string> {
    const url = new URL(challenge.realm);
    if (challenge.service) url.searchParams.set("service", challenge.service);
    url.searchParams.set("scope", scope);
    const answer = await exchange({
      url,
      method: "GET",
      headers: {
        accept: "application/json",
        "user-agent": "skipper-controller",
        ...(call.credential ? { authorization: basicAuthorization(call.credential) } : {}),
      },
      agent: this.agentFor(url),
      timeoutMs: this.timeoutMs,
      maxBodyBytes: TOKEN_BODY_BYTES,
      subject: subjectOf(ep),
      signal: call.signal,
    });
    if (answer.status === 401 || answer.status === 403)
      throw new RegistryError(
        "UNAUTHORIZED",
        { ...subjectOf(ep), status: answer.status },
        call.credential
          ? `its token endpoint ${url.host} refused the login given`
          : `its token endpoint ${url.host} refused an anonymous token`,
      );
    if (answer.status !== 200) throw statusFailure(answer, subjectOf(ep), `asking its token endpoint ${url.host}`);
    const { token, expiresIn } = readTokenAnswer(answer.body, subjectOf(ep));
    this.tokens.set(key, token, expiresIn);
    return token;
  }

  private agentFor(url: URL): http.Agent {
    return url.protocol === "https:" ? this.httpsAgent : this.httpAgent;
  }
}

function subjectOf(ep: RegistryEndpoint): RegistryErrorSubject {
  return { registry: ep.registry, repository: ep.path };
}

// An answer that is not the one asked for, by its status; the registry's own error code is kept
// (NAME_UNKNOWN, MANIFEST_UNKNOWN, ...), never its message.
function statusFailure(answer: RegistryAnswer, subject: RegistryErrorSubject, doing: string): RegistryError {
  const s = { ...subject, status: answer.status };
  const code = registryErrorCode(answer.body);
  const said = code ? `: ${code}` : "";
  if (answer.status === 404) return new RegistryError("NOT_FOUND", s, `${doing}: not found${said}`);
  if (answer.status === 401 || answer.status === 403) return new RegistryError("UNAUTHORIZED", s, `${doing}: access denied${said}`);
  if (answer.status === 429 || answer.status >= 500)
    return new RegistryError("UNREACHABLE", s, `${doing}: the registry is unavailable${said}`);
  return new RegistryError("BAD_RESPONSE", s, `${doing}: an unexpected answer${said}`);
}

function registryErrorCode(body: Buffer): string {
  try {
    const code = (JSON.parse(body.toString("utf8")) as { errors?: { code?: unknown }[] }).errors?.[0]?.code;
    return typeof code === "string" && /^[A-Z_]{1,40}$/.test(code) ? code : "";
  } catch {
    return "";
  }
}

function tagsOf(body: Buffer, subject: RegistryErrorSubject): string[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString("utf8"));
  } catch {
    throw new RegistryError("BAD_RESPONSE", subject, "its tag list is no JSON");
  }
  const tags = (parsed as { tags?: unknown } | null)?.tags;
  if (tags === null || tags === undefined) return []; // distribution answers null for a repository without tags
  if (!Array.isArray(tags) || !tags.every((t) => typeof t === "string"))
    throw new RegistryError("BAD_RESPONSE", subject, "its tag list holds no list of strings");
  return tags as string[];
}
