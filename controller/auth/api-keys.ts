// API keys: create, rotate, revoke, and how a stored key looks through the API. The key text is
// returned once by create and rotate; the store keeps only hashes (auth/secret-text.ts). Changes
// to keys run one at a time across every controller on the store (`locks`), so two creates of one
// name cannot both succeed.
import { clone, create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { ApiKeySchema, Role, type Actor, type ApiKey, type TenantScope } from "../../gen/skipper/v1/access_pb.js";
import { conflict, invalid, notFound } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import type { KeyedLock } from "../base/keyed-lock.js";
import { parseLabelSelector } from "../domain/label-selector.js";
import type { ApiKeyRecord, CredentialStore } from "../store/store.js";
import { API_KEY_TEXT } from "./secret-text.js";
import { hashToken } from "./tokens.js";

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;
const MAX_SCOPE_TENANTS = 1000;
const DAY_MS = 24 * 60 * 60 * 1000;
/** How long a rotated key's old secret keeps working unless the caller says otherwise. */
export const DEFAULT_GRACE_MS = DAY_MS;
export const MAX_GRACE_MS = 30 * DAY_MS;
const LOCK = "api-keys";

export interface ApiKeyDeps {
  store: CredentialStore;
  locks: Pick<KeyedLock, "run">;
  now: () => Date;
}

/** What a new key is to be. */
export interface NewApiKey {
  name: string;
  role: Role;
  scope?: TenantScope;
  expiresAt?: Timestamp;
  createdBy: Actor;
}

/** Creates a key; returns it as the API shows it and its text (shown once). */
export async function createApiKey(deps: ApiKeyDeps, input: NewApiKey): Promise<{ key: ApiKey; secret: string }> {
  checkNewKey(input, deps.now());
  return deps.locks.run(LOCK, async () => {
    const at = deps.now();
    const live = (await deps.store.listApiKeys()).find((r) => r.key.name === input.name && statusOf(r.key, at) === "active");
    if (live) throw conflict(`an active API key is already named ${input.name}`, { name: input.name, id: live.key.id });
    let id = API_KEY_TEXT.newId();
    while (await deps.store.getApiKey(id)) id = API_KEY_TEXT.newId();
    const secret = API_KEY_TEXT.mint(id);
    const key = create(ApiKeySchema, {
      id,
      name: input.name,
      role: input.role,
      scope: input.scope,
      createdAt: timestampFromDate(at),
      expiresAt: input.expiresAt,
      createdBy: input.createdBy,
      prefix: API_KEY_TEXT.prefixOf(id),
    });
    await deps.store.putApiKey({ key, secretHash: hashToken(secret) });
    return { key: shown(key, at), secret };
  });
}

/** Gives a key a new secret; the old one works for `graceMs` more. */
export async function rotateApiKey(deps: ApiKeyDeps, id: string, graceMs: number): Promise<{ key: ApiKey; secret: string }> {
  checkId(id, "id");
  if (!Number.isFinite(graceMs) || graceMs < 0 || graceMs > MAX_GRACE_MS) {
    throw invalid("grace_period must be between 0 and 30 days", { field: "grace_period" });
  }
  return deps.locks.run(LOCK, async () => {
    const at = deps.now();
    const record = await existing(deps.store, id);
    const status = statusOf(record.key, at);
    if (status !== "active") throw conflict(`API key ${record.key.name} is ${status}; create a new one instead`, { id, status });
    const secret = API_KEY_TEXT.mint(id);
    const key = clone(ApiKeySchema, record.key);
    key.rotatedAt = timestampFromDate(at);
    key.previousSecretExpiresAt = timestampFromDate(new Date(at.getTime() + graceMs));
    await deps.store.putApiKey({ key, secretHash: hashToken(secret), previousSecretHash: record.secretHash });
    return { key: shown(key, at), secret };
  });
}

/** Revokes a key (every secret of it) from the next call on; revoking a revoked key changes nothing. */
export async function revokeApiKey(deps: ApiKeyDeps, id: string): Promise<{ key: ApiKey; changed: boolean }> {
  checkId(id, "id");
  return deps.locks.run(LOCK, async () => {
    const at = deps.now();
    const record = await existing(deps.store, id);
    if (record.key.revokedAt) return { key: shown(record.key, at), changed: false };
    const key = clone(ApiKeySchema, record.key);
    key.revokedAt = timestampFromDate(at);
    await deps.store.putApiKey({ ...record, key });
    return { key: shown(key, at), changed: true };
  });
}

/** One key as the API shows it. */
export async function getApiKey(deps: ApiKeyDeps, id: string): Promise<ApiKey> {
  checkId(id, "id");
  return shown((await existing(deps.store, id)).key, deps.now());
}

/** Keys newest first; inactive ones (revoked, expired) only when asked. */
export async function listApiKeys(deps: ApiKeyDeps, includeInactive: boolean): Promise<ApiKey[]> {
  const at = deps.now();
  return (await deps.store.listApiKeys())
    .map((r) => shown(r.key, at))
    .filter((k) => includeInactive || k.status === "active")
    .reverse();
}

/** "active", "expired" or "revoked" at `at`. */
export function statusOf(key: ApiKey, at: Date): "active" | "expired" | "revoked" {
  if (key.revokedAt) return "revoked";
  if (key.expiresAt && timestampDate(key.expiresAt) <= at) return "expired";
  return "active";
}

function shown(key: ApiKey, at: Date): ApiKey {
  const k = clone(ApiKeySchema, key);
  k.status = statusOf(key, at);
  return k;
}

async function existing(store: CredentialStore, id: string): Promise<ApiKeyRecord> {
  const r = await store.getApiKey(id);
  if (!r) throw notFound("api_key", id, `API key ${id} not found`);
  return r;
}

function checkNewKey(input: NewApiKey, at: Date): void {
  if (!NAME.test(input.name)) {
    throw invalid("name must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", { field: "name" });
  }
  if (input.role === Role.UNSPECIFIED || input.role === Role.NODE || Role[input.role] === undefined) {
    throw invalid("role must be admin, operator, generator or viewer", { field: "role" });
  }
  const ids = input.scope?.tenantIds ?? [];
  const selector = input.scope?.tenantSelector ?? "";
  if (ids.length > MAX_SCOPE_TENANTS)
    throw invalid(`scope.tenant_ids holds at most ${MAX_SCOPE_TENANTS} ids`, { field: "scope.tenant_ids" });
  for (const id of ids) checkId(id, "scope.tenant_ids");
  parseLabelSelector(selector, "scope.tenant_selector");
  if (input.role === Role.ADMIN && (ids.length > 0 || selector !== "")) {
    throw invalid("an admin key acts on every tenant: leave its scope empty, or give the key the operator role", { field: "scope" });
  }
  if (input.expiresAt && timestampDate(input.expiresAt) <= at) throw invalid("expires_at must be in the future", { field: "expires_at" });
}
