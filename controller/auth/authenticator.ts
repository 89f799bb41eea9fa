// Resolves request headers to a Principal: the admin token (x-admin-token or Bearer), an API key
// (Bearer skk_...) or a node token (Bearer skn....). Every credential is looked up in the store on
// every call, so a revocation or rotation made through any controller holds from the next call.
// Failures are UNAUTHORIZED without saying which part of a credential was wrong.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { unauthorized } from "../base/errors.js";
import type { PeerCertificate, Principal } from "../base/context.js";
import type { ApiKeyRecord, CredentialStore } from "../store/store.js";
import { hashToken, nodeIdOfToken, tokenMatches } from "./tokens.js";
import { API_KEY_TEXT } from "./secret-text.js";
import { isValidId } from "../../common/ids.js";
import type { Store } from "../store/store.js";
import { credentialNodeOf, RELAY_FOR_HEADER, relayedPrincipal, relayServes } from "./relay-access.js";

/** What authentication reads of a request's headers (a fetch Headers, or a cheaper view of Node's). */
export type HeaderReader = Pick<Headers, "get">;

export interface Authenticator {
  /**
   * The principal for these headers (or, when they carry no credential, the client certificate
   * of the connection), or anonymous when none was presented. Throws UNAUTHORIZED for a bad one.
   */
  authenticate(headers: HeaderReader, peer?: PeerCertificate): Promise<Principal>;
}

export interface AuthenticatorOptions {
  store: CredentialStore;
  /** The admin token's hash when it is fixed by configuration; otherwise the store's is read. */
  fixedAdminHash?: string;
  now: () => Date;
  /** Where a relay's SSH nodes are read (x-skipper-relay-for); without it the header is refused. */
  nodes?: Pick<Store, "getResource">;
}

/** Authenticator over the admin token, API keys and node credentials. */
export function createAuthenticator(opts: AuthenticatorOptions): Authenticator {
  const { store, now } = opts;
  const isAdmin = async (token: string) => {
    const hash = opts.fixedAdminHash ?? (await store.getAdminCredential())?.tokenHash;
    return hash !== undefined && tokenMatches(token, hash);
  };
  const authenticate = async (headers: HeaderReader, peer?: PeerCertificate): Promise<Principal> => {
    const adminHeader = headers.get("x-admin-token");
    const bearer = parseBearer(headers.get("authorization"));
    if (adminHeader !== null) {
      if (await isAdmin(adminHeader)) return { kind: "admin" };
      throw unauthorized("invalid admin token");
    }
    if (bearer === undefined) return peer ? certificatePrincipal(store, peer, now()) : { kind: "anonymous" };
    const keyId = API_KEY_TEXT.idOf(bearer);
    if (keyId !== undefined) return apiKeyPrincipal(await store.getApiKey(keyId), bearer, now());
    const nodeId = nodeIdOfToken(bearer);
    if (nodeId !== undefined && isValidId(nodeId)) {
      // A deleted node's token stops working with the deletion (its tombstone stays).
      const cred = await store.getLiveNodeCredential(nodeId);
      if (cred && tokenMatches(bearer, cred.tokenHash)) return { kind: "node", nodeId, tokenHash: cred.tokenHash };
      throw unauthorized("invalid node token");
    }
    if (await isAdmin(bearer)) return { kind: "admin" };
    throw unauthorized("invalid token");
  };
  return {
    async authenticate(headers, peer) {
      const principal = await authenticate(headers, peer);
      const relayFor = headers.get(RELAY_FOR_HEADER);
      if (relayFor === null) return principal;
      if (!opts.nodes) throw unauthorized(`${RELAY_FOR_HEADER} is not accepted here`);
      return relayedPrincipal(opts.nodes, principal, relayFor);
    },
  };
}

/** The principal of a presented API key, or UNAUTHORIZED (unknown, wrong secret, revoked, expired). */
function apiKeyPrincipal(record: ApiKeyRecord | undefined, text: string, at: Date): Principal {
  if (!record) throw unauthorized("invalid API key");
  const { key } = record;
  const current = tokenMatches(text, record.secretHash);
  const previous =
    !current &&
    record.previousSecretHash !== undefined &&
    key.previousSecretExpiresAt !== undefined &&
    timestampDate(key.previousSecretExpiresAt) > at &&
    tokenMatches(text, record.previousSecretHash);
  if (!current && !previous) throw unauthorized("invalid API key");
  // Said plainly: the holder of a valid secret learns nothing new, and knows what to ask for.
  if (key.revokedAt) throw unauthorized(`API key ${key.name} was revoked`);
  if (key.expiresAt && timestampDate(key.expiresAt) <= at) throw unauthorized(`API key ${key.name} has expired`);
  const secretHash = current ? record.secretHash : record.previousSecretHash;
  return { kind: "api_key", keyId: key.id, name: key.name, role: key.role, ...(key.scope ? { scope: key.scope } : {}), secretHash };
}

/** The node a client certificate belongs to, when the certificate is one the node still holds. */
async function certificatePrincipal(store: CredentialStore, peer: PeerCertificate, at: Date): Promise<Principal> {
  if (peer.error !== undefined) {
    const expired = peer.error === "CERT_HAS_EXPIRED";
    throw unauthorized(
      expired
        ? "the client certificate has expired: the node must enroll again"
        : `the client certificate was not accepted (${peer.error})`,
    );
  }
  const nodeId = peer.nodeId;
  if (nodeId === undefined || !isValidId(nodeId)) throw unauthorized("the client certificate names no node");
  const principal: Principal = { kind: "node", nodeId, certificateSerial: peer.serial };
  if (!(await nodeCredentialHolds(store, principal, at))) throw unauthorized("the client certificate has been revoked");
  return principal;
}

function parseBearer(value: string | null): string | undefined {
  if (value === null) return undefined;
  const m = /^Bearer\s+(\S{1,512})\s*$/i.exec(value);
  if (!m) throw unauthorized("authorization header must be 'Bearer <token>'");
  return m[1];
}

export { hashToken };

/** What a credential check reads: node credentials, and the nodes' specs for a relayed caller. */
export type CredentialReader = Pick<CredentialStore, "getLiveNodeCredential"> & Partial<Pick<Store, "getResource">>;

/**
 * Whether a node caller's credential holds: its node exists and, for a client certificate, the
 * node still holds it unexpired; for a bearer token, the token is still the node's (not rotated).
 * A relayed caller's relay must also still be the SSH node's relay (its spec names it, it is not
 * deleted); without the specs to ask, it does not hold. Asked when a certificate is presented,
 * and again by a stream admitted a while ago.
 */
export async function nodeCredentialHolds(store: CredentialReader, p: Principal, at: Date): Promise<boolean> {
  if (p.kind !== "node") return true;
  if (
    p.relayNodeId !== undefined &&
    !(store.getResource && (await relayServes(store as Pick<Store, "getResource">, p.relayNodeId, p.nodeId)))
  )
    return false;
  const cred = await store.getLiveNodeCredential(credentialNodeOf(p));
  if (!cred) return false;
  if (p.tokenHash !== undefined && cred.tokenHash !== p.tokenHash) return false;
  if (p.certificateSerial === undefined) return true;
  return (
    cred.certificates?.some(
      (c) => c.serial === p.certificateSerial && c.notAfter > at && (c.underTokenHash === undefined || c.underTokenHash === cred.tokenHash),
    ) ?? false
  );
}

/**
 * Whether the credential a call was admitted with still holds (asked by streams that outlive
 * their admission): a node's as nodeCredentialHolds says; an API key's while it is not revoked,
 * not expired and the secret it presented is still its own (the previous one only in its grace
 * period). The admin token is not asked again here.
 */
export async function credentialHolds(
  store: CredentialReader & Pick<CredentialStore, "getApiKey">,
  p: Principal,
  at: Date,
): Promise<boolean> {
  if (p.kind === "node") return nodeCredentialHolds(store, p, at);
  if (p.kind !== "api_key") return true;
  const record = await store.getApiKey(p.keyId);
  if (!record || record.key.revokedAt) return false;
  if (record.key.expiresAt && timestampDate(record.key.expiresAt) <= at) return false;
  if (p.secretHash === undefined || p.secretHash === record.secretHash) return true;
  const grace = record.key.previousSecretExpiresAt;
  return p.secretHash === record.previousSecretHash && grace !== undefined && timestampDate(grace) > at;
}
