// Which secret values a tenant's project uses, as a pure function of its specs and its secret
// resources: the references of the tenant's compose project and of its services, the registry
// credentials it holds, and the version of each value now. Versions go into the spec hash, so a
// new value rolls the project; values never pass through here.
//
// Services' references get project-wide names, one per (secret, value), so two services that use
// the same value share it and two values never collide: SKIPPER_SECRET_<hash> for a variable,
// skipper_<hash> for a compose secret (mounted under the name the service asked for).
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { SecretUseSchema, type SecretKeyRef, type SecretUse } from "../../gen/skipper/v1/secret_pb.js";

/** Where the node keeps a project's secret files, relative to the project directory. */
export const SECRET_DIR = ".skipper-secrets";

/** A reference and the request field it came from. */
export interface FieldRef {
  field: string;
  ref: SecretKeyRef;
}

/** The project-wide variable a service's env reference is passed as. */
export function secretVariable(ref: SecretKeyRef): string {
  return `SKIPPER_SECRET_${digest(ref).toUpperCase()}`;
}

/** The project-wide compose secret a service's file reference is declared as. */
export function secretFileName(ref: SecretKeyRef): string {
  return `skipper_${digest(ref)}`;
}

/** The compose file's declaration of a secret file the node writes. */
export function secretFilePath(name: string): string {
  return `./${SECRET_DIR}/${name}`;
}

/** Every secret reference a tenant or service spec makes, with its field. */
export function secretRefsOf(r: Resource): FieldRef[] {
  const k = r.desiredState?.kind;
  const out: FieldRef[] = [];
  const add = (prefix: string, refs: Record<string, SecretKeyRef>) => {
    for (const [name, ref] of Object.entries(refs)) out.push({ field: `desired_state.${prefix}.${name}`, ref });
  };
  if (k?.case === "tenant" && k.value.compose) {
    add("tenant.compose.secret_env", k.value.compose.secretEnv);
    add("tenant.compose.secret_files", k.value.compose.secretFiles);
  } else if (k?.case === "service") {
    add("service.secret_env", k.value.secretEnv);
    add("service.secret_files", k.value.secretFiles);
  }
  return out;
}

/** The first reference that names a secret (or a value) the tenant does not have, as a sentence. */
export function missingSecret(refs: FieldRef[], secrets: ReadonlyMap<string, Resource>): string | undefined {
  for (const { field, ref } of refs) {
    const s = secrets.get(ref.secretId);
    if (s?.desiredState?.kind.case !== "secret") return `${field} names secret ${ref.secretId}, which does not exist`;
    if (!s.desiredState.kind.value.entries.some((e) => e.name === ref.key))
      return `${field} names value ${ref.key} of secret ${ref.secretId}, which it does not hold`;
  }
  return undefined;
}

/** The registry credentials among the tenant's secrets, sorted by id. */
export function registrySecrets(secrets: ReadonlyMap<string, Resource>): Resource[] {
  return [...secrets.values()]
    .filter((s) => s.desiredState?.kind.case === "secret" && s.desiredState.kind.value.registry !== "")
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * The uses of the project: each referenced value (and each registry credential's username and
 * password) at its version now, sorted and without repeats. A value the tenant does not hold is
 * version 0 (the reconciler does not issue orders for such a project: see missingSecret).
 */
export function secretUses(refs: SecretKeyRef[], registries: Resource[], secrets: ReadonlyMap<string, Resource>): SecretUse[] {
  const all = [
    ...refs.map((r) => ({ secretId: r.secretId, key: r.key })),
    ...registries.flatMap((r) => ["password", "username"].map((key) => ({ secretId: r.id, key }))),
  ];
  const seen = new Map<string, SecretUse>();
  for (const { secretId, key } of all) {
    const id = `${secretId}\u0000${key}`;
    if (seen.has(id)) continue;
    const s = secrets.get(secretId)?.desiredState?.kind;
    const version = s?.case === "secret" ? (s.value.entries.find((e) => e.name === key)?.version ?? 0n) : 0n;
    seen.set(id, create(SecretUseSchema, { secretId, key, version }));
  }
  return [...seen.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, u]) => u);
}

function digest(ref: SecretKeyRef): string {
  return createHash("sha256").update(`${ref.secretId}\u0000${ref.key}`, "utf8").digest("hex").slice(0, 16);
}
