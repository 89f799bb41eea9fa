// How the client logs in to a registry (the Docker token protocol,
// distribution/docs/spec/auth/token.md): anonymous first; a 401's WWW-Authenticate says how.
//   Basic  -> the same request with the credential given.
//   Bearer -> a token from the challenge's realm for scope repository:<path>:pull (asked with the
//             credential as Basic when one is given), cached until its expires_in (default 60 s).
// What a registry asked for is remembered per origin, so later requests send what it wants at
// once. Tokens are cached per (origin, scope, credential): two tenants' logins to one repository
// never share a token. Passwords and tokens live in memory only and never reach an error.
import { createHash } from "node:crypto";
import { isLoopbackHost } from "./registry-endpoint.js";
import { RegistryError, type RegistryErrorSubject } from "./registry-error.js";
import { parseWwwAuthenticate } from "./registry-headers.js";

/** A login to a registry (a registry secret's username and password). */
export interface RegistryCredential {
  username: string;
  password: string;
}

/** What an origin asked for on a 401. */
export type RegistryChallenge = { scheme: "basic" } | { scheme: "bearer"; realm: URL; service: string };

/** The challenge a 401 carries that the client can answer (Bearer before Basic), or an UNAUTHORIZED error. */
export function challengeOf(header: string | undefined, subject: RegistryErrorSubject): RegistryChallenge {
  const challenges = parseWwwAuthenticate(header ?? "");
  const bearer = challenges.find((c) => c.scheme === "bearer");
  if (bearer) {
    const realm = URL.canParse(bearer.params.realm ?? "") ? new URL(bearer.params.realm!) : undefined;
    if (!realm) throw new RegistryError("BAD_RESPONSE", subject, "its Bearer challenge names no token realm URL");
    // The realm gets the credential: over https, or http on loopback only.
    if (!(realm.protocol === "https:" || (realm.protocol === "http:" && isLoopbackHost(realm.hostname))))
      throw new RegistryError("BAD_RESPONSE", subject, `its token realm ${realm.origin} is neither https nor on loopback`);
    return { scheme: "bearer", realm, service: bearer.params.service ?? "" };
  }
  if (challenges.some((c) => c.scheme === "basic")) return { scheme: "basic" };
  const schemes = challenges.map((c) => c.scheme).join(", ");
  throw new RegistryError(
    "UNAUTHORIZED",
    subject,
    schemes
      ? `it asks for ${schemes} authentication, which the client does not speak`
      : "it refused an anonymous request without a challenge",
  );
}

/** The Authorization value of a Basic login. */
export function basicAuthorization(c: RegistryCredential): string {
  return `Basic ${Buffer.from(`${c.username}:${c.password}`, "utf8").toString("base64")}`;
}

/** The token endpoint's answer, read: a token and how long it lives (seconds). */
export function readTokenAnswer(body: Buffer, subject: RegistryErrorSubject): { token: string; expiresIn: number } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString("utf8"));
  } catch {
    throw new RegistryError("BAD_RESPONSE", subject, "its token endpoint answered no JSON");
  }
  const o = (parsed ?? {}) as { token?: unknown; access_token?: unknown; expires_in?: unknown };
  const token = typeof o.token === "string" && o.token ? o.token : typeof o.access_token === "string" ? o.access_token : "";
  if (!token) throw new RegistryError("BAD_RESPONSE", subject, "its token endpoint answered no token");
  const expiresIn = typeof o.expires_in === "number" && Number.isFinite(o.expires_in) && o.expires_in > 0 ? o.expires_in : 60;
  return { token, expiresIn };
}

/** Bearer tokens by (origin, scope, credential), each until it expires; at most `max` held. */
export class TokenCache {
  private readonly tokens = new Map<string, { token: string; until: number }>();
  constructor(
    private readonly now: () => number = Date.now,
    private readonly max = 1000,
  ) {}

  /** The key of a token: the credential by a hash, never in clear. */
  static key(origin: string, scope: string, credential: RegistryCredential | undefined): string {
    const who = credential ? createHash("sha256").update(`${credential.username}\0${credential.password}`).digest("hex") : "anonymous";
    return `${origin} ${scope} ${who}`;
  }

  get(key: string): string | undefined {
    const hit = this.tokens.get(key);
    if (hit && hit.until > this.now()) return hit.token;
    this.tokens.delete(key);
    return undefined;
  }

  set(key: string, token: string, expiresInSeconds: number): void {
    this.tokens.delete(key);
    if (this.tokens.size >= this.max) {
      const now = this.now();
      for (const [k, v] of this.tokens) if (v.until <= now) this.tokens.delete(k);
      // Still full: the oldest goes (a Map iterates in insertion order).
      if (this.tokens.size >= this.max) this.tokens.delete(this.tokens.keys().next().value!);
    }
    this.tokens.set(key, { token, until: this.now() + expiresInSeconds * 1000 });
  }

  delete(key: string): void {
    this.tokens.delete(key);
  }
}
