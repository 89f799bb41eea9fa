// The secret values of a running order, for the node that holds its claim and nobody else. An
// order carries references (which secret, which value, at which version) and never values: the
// node asks for them when it applies the order, with its claim's fencing token, and gets them
// opened from the tenant's secret resources as they are now. A value changed since the order was
// issued comes in its new version (and a new order follows, since the version is in the spec
// hash); one removed since is refused, and the order fails rather than run without it. A
// deliver_webhook order's secret is its subscription's URL (webhook_url), opened the same way, and
// only for a node the subscription's node_selector still picks.
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { RegistryCredentialSchema, type RegistryCredential, type SecretKeyRef } from "../../gen/skipper/v1/secret_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { conflict, notClaimable } from "../base/errors.js";
import { REDACTED } from "../../common/logging/redact.js";
import { openSecretValue } from "../resources/secret-values.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";
import type { Store } from "../store/store.js";
import { webhookUrlContext } from "../store/webhook-records.js";
import { matchesSelector } from "../domain/label-selector.js";
import { nodeLabels } from "../reconcile/placement.js";

export interface OrderSecrets {
  env: Record<string, string>;
  files: Record<string, string>;
  registries: RegistryCredential[];
  /** deliver_webhook: the subscription's URL ("" for other orders). */
  webhookUrl: string;
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
  const out: OrderSecrets = { env: {}, files: {}, registries: [], webhookUrl: "", opened: [] };
  const hook = await webhookUrlOf(store, ring, order);
  if (hook) {
    await checkWebhookClaimer(store, order, hook.selector);
    out.webhookUrl = hook.url;
    out.opened.push(`webhook/${hook.webhookId}/url`);
  }
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

/**
 * The URL of the subscription a deliver_webhook order delivers for, opened (undefined for other
 * orders). A subscription deleted since is refused: the attempt fails rather than go anywhere.
 */
async function webhookUrlOf(
  store: Store,
  ring: SecretKeyRing,
  order: WorkOrder,
): Promise<{ webhookId: string; url: string; selector: Record<string, string> } | undefined> {
  if (order.action?.kind.case !== "deliverWebhook") return undefined;
  const webhookId = order.action.kind.value.webhookId;
  const r = await store.getWebhook(webhookId);
  if (!r) throw webhookUnavailable(`webhook ${webhookId} was deleted`, webhookId);
  const url = ring.open(r.sealedUrl, webhookUrlContext(webhookId)).toString("utf8");
  return { webhookId, url, selector: r.webhook.nodeSelector };
}

/**
 * Refuses the URL unless the subscription still has a node_selector and the claiming node's labels
 * still match it (an edit since the order was queued moved the deliveries elsewhere): the attempt
 * fails unsent and the controller retries it where the subscription now says.
 */
async function checkWebhookClaimer(store: Store, order: WorkOrder, selector: Record<string, string>): Promise<void> {
  const webhookId = order.action?.kind.case === "deliverWebhook" ? order.action.kind.value.webhookId : "";
  if (Object.keys(selector).length === 0)
    throw webhookUnavailable(`webhook ${webhookId} no longer has a node_selector: the controller delivers it`, webhookId);
  const nodeId = order.claim?.nodeId ?? "";
  const node = nodeId ? await store.getResource("node", nodeId) : undefined;
  if (!node || !matchesSelector(nodeLabels(node), selector))
    throw webhookUnavailable(`node ${nodeId} no longer matches the node_selector of webhook ${webhookId}`, webhookId);
}

function webhookUnavailable(message: string, webhookId: string) {
  return conflict(message, { reason: "WEBHOOK_UNAVAILABLE", webhook_id: webhookId });
}

function unavailable(message: string, secretId: string) {
  return conflict(message, { reason: "SECRET_UNAVAILABLE", secret_id: secretId });
}

/**
 * The secret values an order was handed (its project's secret env and files, its registry
 * passwords), as the tenant's secrets hold them now: what a node's report must not carry back.
 * A value that cannot be opened (removed since) is left out; values under 4 characters are too,
 * since blanking them would blank ordinary text.
 */
export async function valuesHandedTo(store: Store, ring: SecretKeyRing, order: WorkOrder): Promise<string[]> {
  // A deliver_webhook order's URL: an agent's error text may quote it.
  const hook = await webhookUrlOf(store, ring, order).catch(() => undefined);
  if (hook) {
    // Its path and query on their own too (a text may quote them without the host).
    const url = new URL(hook.url);
    const path = `${url.pathname}${url.search}`;
    return path.length >= 4 ? [hook.url, path] : [hook.url];
  }
  const ds = order.desiredState;
  const project = ds?.composeProject;
  const refs: Pick<SecretKeyRef, "secretId" | "key">[] = [
    ...Object.values(project?.secretEnv ?? {}),
    ...Object.values(project?.secretFiles ?? {}),
    ...(ds?.registrySecretIds ?? []).map((secretId) => ({ secretId, key: "password" })),
  ];
  if (refs.length === 0) return [];
  const tenantId = ds?.tenantId || order.target?.tenantId || "";
  const values = new Set<string>();
  for (const ref of refs) {
    const r = await store.getResource("secret", ref.secretId);
    if (r?.desiredState?.kind.case !== "secret" || r.desiredState.kind.value.tenantId !== tenantId) continue;
    const value = openSecretValue(ring, r.id, r.desiredState.kind.value, ref.key);
    if (value !== undefined && value.length >= 4) values.add(value);
  }
  // Longest first: a value that contains another is blanked whole.
  return [...values].sort((a, b) => b.length - a.length);
}

/** Replaces every occurrence of `values` in the strings of `message` (in place) with [REDACTED]; returns how many strings changed. */
export function blankValues(message: object, values: readonly string[]): number {
  if (values.length === 0) return 0;
  let changed = 0;
  const walk = (v: unknown, depth: number): unknown => {
    if (typeof v === "string") {
      let out = v;
      for (const value of values) if (out.includes(value)) out = out.replaceAll(value, REDACTED);
      if (out !== v) changed++;
      return out;
    }
    if (depth > 32 || typeof v !== "object" || v === null || v instanceof Uint8Array || v instanceof Date) return v;
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) v[i] = walk(v[i], depth + 1);
      return v;
    }
    const o = v as Record<string, unknown>;
    for (const k of Object.keys(o)) if (k !== "$typeName") o[k] = walk(o[k], depth + 1);
    return o;
  };
  walk(message, 0);
  return changed;
}
