// The secret values of a running order, for the node that holds its claim and nobody else. An
// order carries references (which secret, which value, at which version) and never values: the
// node asks for them when it applies the order, with its claim's fencing token, and gets them
// opened from the tenant's secret resources as they are now. A value changed since the order was
// issued comes in its new version (and a new order follows, since the version is in the spec
// hash); one removed since is refused, and the order fails rather than run without it.
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { RegistryCredentialSchema, type RegistryCredential, type SecretKeyRef } from "../../gen/skipper/v1/secret_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { conflict, notClaimable } from "../errors.js";
import { openSecretValue } from "../resources/secret-values.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";
import type { Store } from "../store/store.js";

export interface OrderSecrets {
  env: Record<string, string>;
  files: Record<string, string>;
  registries: RegistryCredential[];
  /** "secret_id/key" of every value handed out, for the audit trail. */
  opened: string[];
}

/** Throws unless `nodeId` holds the order's live claim under `fencingToken`. */
export function checkHolder(order: WorkOrder, nodeId: string, fencingToken: bigint, now: Date): void {
  const claim = order.claim;
  const details = { work_order_id: order.id, status: WorkOrderStatus[order.status] ?? String(order.status) };
  if (order.status !== WorkOrderStatus.RUNNING || !claim || claim.nodeId !== nodeId)
    throw notClaimable(`work order ${order.id} is not running under this node's claim`, details);
  if (claim.fencingToken !== fencingToken)
    throw notClaimable(`fencing token ${fencingToken} is not the current claim's (${claim.fencingToken})`, details);
  if (claim.leaseExpiresAt && timestampDate(claim.leaseExpiresAt) <= now)
    throw notClaimable(`the claim of work order ${order.id} has lapsed`, details);
}

/** The values the order's project uses, opened. */
export async function resolveOrderSecrets(store: Store, ring: SecretKeyRing, order: WorkOrder): Promise<OrderSecrets> {
  const ds = order.desiredState;
  const tenantId = ds?.tenantId || order.target?.tenantId || "";
  const cache = new Map<string, Resource | undefined>();
  const secretOf = async (id: string, field: string) => {
    if (!cache.has(id)) cache.set(id, await store.getResource("secret", id));
    const r = cache.get(id);
    if (r?.desiredState?.kind.case !== "secret" || r.desiredState.kind.value.tenantId !== tenantId) {
      throw unavailable(`${field} names secret ${id}, which tenant ${tenantId} no longer has`, id);
    }
    return { id: r.id, spec: r.desiredState.kind.value };
  };
  const out: OrderSecrets = { env: {}, files: {}, registries: [], opened: [] };
  const open = async ({ secretId, key }: Pick<SecretKeyRef, "secretId" | "key">, field: string) => {
    const s = await secretOf(secretId, field);
    const value = openSecretValue(ring, s.id, s.spec, key);
    if (value === undefined) throw unavailable(`${field} names value ${key} of secret ${s.id}, which it no longer holds`, s.id);
    out.opened.push(`${s.id}/${key}`);
    return value;
  };
  const project = ds?.composeProject;
  for (const [name, ref] of Object.entries(project?.secretEnv ?? {})) out.env[name] = await open(ref, `secret_env.${name}`);
  for (const [name, ref] of Object.entries(project?.secretFiles ?? {})) out.files[name] = await open(ref, `secret_files.${name}`);
  for (const id of ds?.registrySecretIds ?? []) {
    const s = await secretOf(id, "registry_secret_ids");
    const username = await open({ secretId: id, key: "username" }, "registry_secret_ids");
    const password = await open({ secretId: id, key: "password" }, "registry_secret_ids");
    out.registries.push(create(RegistryCredentialSchema, { registry: s.spec.registry, username, password, secretId: id }));
  }
  out.opened = [...new Set(out.opened)].sort();
  return out;
}

function unavailable(message: string, secretId: string) {
  return conflict(message, { reason: "SECRET_UNAVAILABLE", secret_id: secretId });
}
