// Enrollment of nodes with client certificates (see proto/skipper/v1/enrollment_service.proto
// for the flow). Enrollment tokens are shown once (ske_<id>_<secret>) and stored as hashes; each
// use is counted under a lock shared by every controller on the store. The order of writes makes
// a retry safe: the token's use is recorded first, naming the node, and a host that retries with
// the same token and node id (its first answer lost) enrolls again without using another.
import { clone, create } from "@bufbuild/protobuf";
import { durationFromMs, durationMs, timestampDate, timestampFromDate, type Duration } from "@bufbuild/protobuf/wkt";
import { ActorKind, ActorSchema, Role, type Actor } from "../../gen/skipper/v1/access_pb.js";
import { EnrollmentTokenSchema, type EnrollmentToken, type EnrollNodeRequest } from "../../gen/skipper/v1/enrollment_service_pb.js";
import type { Trace } from "../base/context.js";
import { conflict, invalid, notFound, unauthorized } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import type { KeyedLock } from "../base/keyed-lock.js";
import { hashToken, tokenMatches } from "../auth/tokens.js";
import { ENROLLMENT_TOKEN_TEXT } from "../auth/secret-text.js";
import { recordEvents } from "../events/event-recorder.js";
import { checkSelector } from "../domain/label-selector.js";
import type { EnrollmentTokenRecord, NodeCertificate, Store } from "../store/store.js";
import type { PemPair } from "../tls/certificate-issuer.js";
import { ensureNodeResource } from "./node-registration.js";

const HOUR_MS = 60 * 60 * 1000;
const DAY_MS = 24 * HOUR_MS;
export const DEFAULT_CERT_TTL_MS = DAY_MS;
// Seconds are for tests and labs (watching a renewal happen); hosts use hours.
const MIN_CERT_TTL_MS = 10 * 1000;
const MAX_TTL_MS = 30 * DAY_MS;
const MAX_USES = 10_000;
// How long after a use the same host may enroll again with the token (a lost answer).
const RETRY_WINDOW_MS = 10 * 60 * 1000;

export interface EnrollmentDeps {
  store: Store;
  locks: Pick<KeyedLock, "run">;
  now: () => Date;
  /** The client CA; undefined when the controller serves without TLS (no enrollment then). */
  clientCa?: PemPair;
}

/** What a new enrollment token is to be. */
export interface NewEnrollmentToken {
  uses: number;
  ttl?: Duration;
  nodeId: string;
  labels: Record<string, string>;
  certificateTtl?: Duration;
  description: string;
  createdBy: Actor;
}

/** Creates an enrollment token; returns it as the API shows it and its text (shown once). */
export async function createEnrollmentToken(
  deps: EnrollmentDeps,
  input: NewEnrollmentToken,
): Promise<{ token: EnrollmentToken; text: string }> {
  const uses = input.uses === 0 ? 1 : input.uses;
  if (!Number.isInteger(uses) || uses < 1 || uses > MAX_USES) throw invalid(`uses must be between 1 and ${MAX_USES}`, { field: "uses" });
  const ttlMs = input.ttl ? durationMs(input.ttl) : DAY_MS;
  if (!(ttlMs > 0 && ttlMs <= MAX_TTL_MS)) throw invalid("ttl must be more than 0 and at most 30 days", { field: "ttl" });
  const certTtlMs = input.certificateTtl ? durationMs(input.certificateTtl) : DEFAULT_CERT_TTL_MS;
  if (!(certTtlMs >= MIN_CERT_TTL_MS && certTtlMs <= MAX_TTL_MS)) {
    throw invalid("certificate_ttl must be between 10 seconds and 30 days", { field: "certificate_ttl" });
  }
  if (input.nodeId !== "") checkId(input.nodeId, "node_id");
  checkSelector(input.labels, "labels");
  if (input.description.length > 256) throw invalid("description must be at most 256 characters", { field: "description" });
  const at = deps.now();
  let id = ENROLLMENT_TOKEN_TEXT.newId();
  while (await deps.store.getEnrollmentToken(id)) id = ENROLLMENT_TOKEN_TEXT.newId();
  const text = ENROLLMENT_TOKEN_TEXT.mint(id);
  const token = create(EnrollmentTokenSchema, {
    id,
    uses,
    remainingUses: uses,
    createdAt: timestampFromDate(at),
    expiresAt: timestampFromDate(new Date(at.getTime() + ttlMs)),
    nodeId: input.nodeId,
    labels: input.labels,
    certificateTtl: durationFromMs(certTtlMs),
    createdBy: input.createdBy,
    description: input.description,
  });
  await deps.store.putEnrollmentToken({ token, secretHash: hashToken(text) });
  return { token: shown(token, at), text };
}

/** Tokens newest first; used, expired and revoked ones only when asked. */
export async function listEnrollmentTokens(deps: EnrollmentDeps, includeInactive: boolean): Promise<EnrollmentToken[]> {
  const at = deps.now();
  return (await deps.store.listEnrollmentTokens())
    .map((r) => shown(r.token, at))
    .filter((t) => includeInactive || t.status === "active")
    .reverse();
}

/** Refuses the token from now on; revoking a revoked token changes nothing. */
export async function revokeEnrollmentToken(deps: EnrollmentDeps, id: string): Promise<EnrollmentToken> {
  checkId(id, "id");
  return deps.locks.run(`enrollment:${id}`, async () => {
    const record = await deps.store.getEnrollmentToken(id);
    if (!record) throw notFound("enrollment_token", id, `enrollment token ${id} not found`);
    if (record.token.revokedAt) return shown(record.token, deps.now());
    const token = clone(EnrollmentTokenSchema, record.token);
    token.revokedAt = timestampFromDate(deps.now());
    await deps.store.putEnrollmentToken({ ...record, token });
    return shown(token, deps.now());
  });
}

/** Enrolls a host: checks the token, creates the node when new, signs its CSR. */
export async function enrollNode(
  deps: EnrollmentDeps,
  req: EnrollNodeRequest,
  trace: Trace,
): Promise<{ nodeId: string; certificatePem: string; notAfter: Date; actor: Actor }> {
  const ca = requireCa(deps);
  const tokenId = ENROLLMENT_TOKEN_TEXT.idOf(req.enrollmentToken);
  if (tokenId === undefined) throw unauthorized("enrollment_token is not an enrollment token (ske_...)");
  // What the enrollment records as its actor: the caller had no credential but the token.
  const actor = create(ActorSchema, { kind: ActorKind.ENROLLMENT, id: tokenId, role: Role.NODE });
  trace = { ...trace, actor };
  const nodeId = checkId(req.nodeId, "node_id");
  if (req.displayName.length > 128) throw invalid("display_name must be at most 128 characters", { field: "display_name" });
  // Under the token's lock (its uses) and the node id's (two tokens cannot enroll one new node at
  // once), always in that order.
  const locked = <T>(fn: () => Promise<T>) =>
    deps.locks.run(`enrollment:${tokenId}`, () => deps.locks.run(`node-enrollment:${nodeId}`, fn));
  return locked(async () => {
    const at = deps.now();
    const record = await deps.store.getEnrollmentToken(tokenId);
    if (!record || !tokenMatches(req.enrollmentToken, record.secretHash)) throw unauthorized("invalid enrollment token");
    // A retry of an answer lost on the way: the same node, within minutes, and the node still
    // there (a deleted node or an old token must not enroll anyone again).
    const existing = await deps.store.getResource("node", nodeId);
    const lastUse = record.token.lastUsedAt ? timestampDate(record.token.lastUsedAt).getTime() : 0;
    const retry = record.token.enrolledNodes.includes(nodeId) && at.getTime() - lastUse < RETRY_WINDOW_MS && existing !== undefined;
    refuseUnusable(record, nodeId, retry, at);
    if (existing && !retry && record.token.nodeId !== nodeId) {
      throw conflict(`node ${nodeId} exists: enroll it with a token bound to it (node_id ${nodeId})`, { node_id: nodeId });
    }
    const ttlMs = record.token.certificateTtl ? durationMs(record.token.certificateTtl) : DEFAULT_CERT_TTL_MS;
    // Signed before anything is written: a bad CSR changes nothing.
    const issued = await sign(ca, req.csrPem, nodeId, at, ttlMs);
    // A retry is the same host asking again: the key it enrolled with. Anyone else holding the
    // used token (a leaked copy, a log) gets nothing, even within the retry window.
    if (retry && record.token.enrolledKeys[nodeId] !== issued.keySha256) {
      throw unauthorized(`this enrollment token was already used for node ${nodeId} with another key`);
    }
    if (!retry) {
      const token = clone(EnrollmentTokenSchema, record.token);
      token.remainingUses -= 1;
      if (!token.enrolledNodes.includes(nodeId)) token.enrolledNodes.push(nodeId);
      token.enrolledKeys[nodeId] = issued.keySha256;
      token.lastUsedAt = timestampFromDate(at);
      await deps.store.putEnrollmentToken({ ...record, token });
    }
    const wasLive = existing !== undefined;
    await ensureNodeResource(deps, nodeId, { displayName: req.displayName, labels: record.token.labels, trustedLabelKeys: [] }, trace);
    await addCertificate(deps, nodeId, { serial: issued.serial, notAfter: issued.notAfter, lifetimeMs: ttlMs }, at, undefined, !wasLive);
    await recordEvents(deps.store, [
      {
        type: "node_enrolled",
        ...trace,
        resourceType: "node",
        resourceId: nodeId,
        nodeId,
        data: { enrollment_token_id: tokenId, not_after: issued.notAfter.toISOString() },
      },
    ]);
    return { nodeId, certificatePem: issued.cert, notAfter: issued.notAfter, actor };
  });
}

/**
 * Signs a new certificate for a node that is calling with a valid credential: `callerSerial` is
 * the certificate it called with (undefined for a bearer token), which must still be honoured
 * when the new one is recorded (a revocation that raced the call wins).
 */
export async function renewNodeCertificate(
  deps: EnrollmentDeps,
  nodeId: string,
  csrPem: string,
  caller: { serial?: string; tokenHash?: string },
  trace: Trace,
): Promise<{ certificatePem: string; notAfter: Date }> {
  const ca = requireCa(deps);
  const at = deps.now();
  const callerSerial = caller.serial;
  const current = (await deps.store.getNodeCredential(nodeId))?.certificates ?? [];
  // The new certificate lives as long as the last one did (the enrollment token's choice).
  const last = current.at(-1);
  const issuedFor = callerSerial ? current.find((c) => c.serial === callerSerial) : last;
  const ttlMs = issuedFor?.lifetimeMs ?? DEFAULT_CERT_TTL_MS;
  // One minted with the node's token (or renewed from one that was) dies with that token.
  const underTokenHash = callerSerial ? issuedFor?.underTokenHash : caller.tokenHash;
  const issued = await sign(ca, csrPem, nodeId, at, ttlMs);
  const cert: NodeCertificate = {
    serial: issued.serial,
    notAfter: issued.notAfter,
    lifetimeMs: ttlMs,
    ...(underTokenHash ? { underTokenHash } : {}),
  };
  await addCertificate(deps, nodeId, cert, at, callerSerial);
  await recordEvents(deps.store, [
    {
      type: "node_certificate_renewed",
      ...trace,
      resourceType: "node",
      resourceId: nodeId,
      nodeId,
      data: { not_after: issued.notAfter.toISOString() },
    },
  ]);
  return { certificatePem: issued.cert, notAfter: issued.notAfter };
}

/** Refuses every certificate of the node from its next call on; returns how many were valid. */
export async function revokeNodeCertificates(deps: EnrollmentDeps, nodeId: string, reason: string, trace: Trace): Promise<number> {
  checkId(nodeId, "node_id");
  if (reason.length > 512) throw invalid("reason must be at most 512 characters", { field: "reason" });
  // The tokens it enrolled with could enroll it again: they go first (outside the node's lock,
  // which an enrollment takes inside its token's lock).
  for (const record of await deps.store.listEnrollmentTokens()) {
    if (record.token.revokedAt || !record.token.enrolledNodes.includes(nodeId)) continue;
    await revokeEnrollmentToken(deps, record.token.id);
  }
  const valid = await deps.locks.run(`node-certificates:${nodeId}`, async () => {
    const cred = await deps.store.getNodeCredential(nodeId);
    if (!cred && !(await deps.store.getResource("node", nodeId))) throw notFound("node", nodeId);
    const at = deps.now();
    const live = (cred?.certificates ?? []).filter((c) => c.notAfter > at).length;
    if (cred && (cred.certificates?.length ?? 0) > 0) await deps.store.putNodeCredential({ ...cred, certificates: [] });
    return live;
  });
  if (valid > 0) {
    await recordEvents(deps.store, [
      { type: "node_certificates_revoked", ...trace, resourceType: "node", resourceId: nodeId, nodeId, data: { revoked: valid, reason } },
    ]);
  }
  return valid;
}

/** "active", "used", "expired" or "revoked" at `at`. */
export function tokenStatus(t: EnrollmentToken, at: Date): "active" | "used" | "expired" | "revoked" {
  if (t.revokedAt) return "revoked";
  if (t.expiresAt && timestampDate(t.expiresAt) <= at) return "expired";
  if (t.remainingUses <= 0) return "used";
  return "active";
}

function refuseUnusable(record: EnrollmentTokenRecord, nodeId: string, retry: boolean, at: Date): void {
  const status = tokenStatus(record.token, at);
  // A retry of an enrollment that already used the token is fine while the token is otherwise valid.
  if (status === "revoked" || status === "expired" || (status === "used" && !retry)) {
    throw unauthorized(`enrollment token ${record.token.id} is ${status === "used" ? "used up" : status}`);
  }
  if (record.token.nodeId !== "" && record.token.nodeId !== nodeId) {
    throw unauthorized(`enrollment token ${record.token.id} is for node ${record.token.nodeId}, not ${nodeId}`);
  }
}

function requireCa(deps: EnrollmentDeps): PemPair {
  if (!deps.clientCa)
    throw conflict("enrollment needs the controller to serve TLS (it is running with --insecure-http)", { reason: "no_tls" });
  return deps.clientCa;
}

async function sign(ca: PemPair, csrPem: string, nodeId: string, at: Date, ttlMs: number) {
  if (csrPem.length > 16 * 1024) throw invalid("csr_pem is too long", { field: "csr_pem" });
  const { issueNodeCert } = await import("../tls/certificate-issuer.js");
  try {
    return await issueNodeCert(ca, csrPem, nodeId, at, ttlMs);
  } catch (e) {
    throw invalid(e instanceof Error ? e.message : String(e), { field: "csr_pem" });
  }
}

// Keeps the certificates still valid plus the new one: a renewing agent's old certificate keeps
// working until it expires, so calls in flight on the old connection finish.
async function addCertificate(
  deps: EnrollmentDeps,
  nodeId: string,
  cert: NodeCertificate,
  at: Date,
  callerSerial?: string,
  fresh = false,
): Promise<void> {
  await deps.locks.run(`node-certificates:${nodeId}`, async () => {
    // A deleted node's credential stays dead, whoever takes its name next (`fresh`: the node did
    // not exist before this enrollment).
    const cred = fresh ? undefined : await deps.store.getLiveNodeCredential(nodeId);
    const kept = (cred?.certificates ?? []).filter((c) => c.notAfter > at);
    if (callerSerial !== undefined && !kept.some((c) => c.serial === callerSerial)) {
      throw unauthorized("the certificate this call was made with has been revoked or has expired");
    }
    await deps.store.putNodeCredential({
      nodeId,
      tokenHash: cred?.tokenHash ?? "",
      createdAt: cred?.createdAt ?? at,
      certificates: [...kept.slice(-4), cert],
    });
  });
}

function shown(t: EnrollmentToken, at: Date): EnrollmentToken {
  const c = clone(EnrollmentTokenSchema, t);
  c.status = tokenStatus(t, at);
  return c;
}
