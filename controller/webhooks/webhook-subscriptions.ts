// Subscriptions and their deliveries as the API handles them: checks, sealing of the URL and the
// shared secret (tls/secret-key-ring.ts; the record holds them only sealed, the API shows the URL's
// host), the status from the deliveries, and redelivery.
import { privateUrlProblem } from "../../common/private-address.js";
import { randomBytes, X509Certificate } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { v5 as uuidv5 } from "uuid";
import {
  WebhookDeliverySchema,
  WebhookDeliveryState,
  WebhookSchema,
  WebhookStatusSchema,
  type Webhook,
  type WebhookDelivery,
} from "../../gen/skipper/v1/webhook_service_pb.js";
import { invalid, notFound } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import type { Page, WebhookRecord, WebhookStore, WorkOrderStore } from "../store/store.js";
import { isFinishedStatus } from "../../common/order-status.js";
import { SecretKeyRing } from "../tls/secret-key-ring.js";
import { checkPatterns } from "./event-names.js";
import { checkSelector } from "../domain/label-selector.js";
import { webhookUrlContext } from "../store/webhook-records.js";

/** What subscriptions need. */
export interface WebhookDeps {
  store: WebhookStore & Pick<WorkOrderStore, "getWorkOrder">;
  keyRing: SecretKeyRing;
  now: () => Date;
}

/** The fields of a create or an update (absent: unchanged on update). */
export interface WebhookInput {
  url?: string;
  eventTypes?: string[];
  tenantId?: string;
  description?: string;
  paused?: boolean;
  secret?: string;
  caPem?: string;
  /** Deliveries may go to non-public addresses (set by an admin; the RPCs need the admin permission). */
  allowPrivateNetwork?: boolean;
  /** Deliveries go through an agent of a node these labels select (empty: the controller delivers). */
  nodeSelector?: Record<string, string>;
}

// Any fixed UUID: delivery ids are UUIDv5 of "<webhook id>/<event id>" under it.
const DELIVERY_NAMESPACE = "8a4c7a0e-2b7e-4d0a-9a51-5c1f3e0b9d27";
const MAX_URL = 2048;
const MAX_CA_PEM = 64 * 1024;

/** Creates a subscription; returns it and the generated secret ("" when the caller chose one). */
export async function createWebhook(deps: WebhookDeps, input: WebhookInput): Promise<{ webhook: Webhook; secret: string }> {
  const id = randomBytes(6).toString("hex");
  const url = checkUrl(input.url ?? "");
  const allowPrivateNetwork = input.allowPrivateNetwork ?? false;
  checkReach(url, allowPrivateNetwork);
  const generated = input.secret ? "" : `whsec_${randomBytes(32).toString("base64url")}`;
  const secret = checkSecret(input.secret || generated);
  const now = timestampFromDate(deps.now());
  const webhook = create(WebhookSchema, {
    id,
    urlHost: url.host,
    eventTypes: checkPatterns(input.eventTypes ?? []),
    tenantId: checkTenant(input.tenantId ?? ""),
    description: checkDescription(input.description ?? ""),
    paused: input.paused ?? false,
    caPem: checkCa(input.caPem ?? ""),
    allowPrivateNetwork,
    nodeSelector: checkNodeSelector(input.nodeSelector ?? {}),
    createdAt: now,
    updatedAt: now,
  });
  await deps.store.putWebhook({ webhook, ...seal(deps.keyRing, id, url, secret) });
  return { webhook: await withStatus(deps, webhook), secret: generated };
}

/** Changes the fields `input` carries. */
export async function updateWebhook(deps: WebhookDeps, id: string, input: WebhookInput): Promise<Webhook> {
  const record = await mustGet(deps, id);
  const w = record.webhook;
  const opened = openSecrets(deps.keyRing, record);
  const url = input.url === undefined ? opened.url : checkUrl(input.url);
  const secret = input.secret === undefined ? opened.secret : checkSecret(input.secret);
  if (input.eventTypes && input.eventTypes.length > 0) w.eventTypes = checkPatterns(input.eventTypes);
  if (input.tenantId !== undefined) w.tenantId = checkTenant(input.tenantId);
  if (input.description !== undefined) w.description = checkDescription(input.description);
  if (input.paused !== undefined) w.paused = input.paused;
  if (input.caPem !== undefined) w.caPem = checkCa(input.caPem);
  if (input.allowPrivateNetwork !== undefined) w.allowPrivateNetwork = input.allowPrivateNetwork;
  if (input.nodeSelector !== undefined) w.nodeSelector = checkNodeSelector(input.nodeSelector);
  checkReach(url, w.allowPrivateNetwork);
  w.urlHost = url.host;
  w.updatedAt = timestampFromDate(deps.now());
  await deps.store.putWebhook({ webhook: w, ...seal(deps.keyRing, id, url, secret) });
  return withStatus(deps, w);
}

/** The subscription with its delivery status. */
export async function getWebhook(deps: WebhookDeps, id: string): Promise<Webhook> {
  return withStatus(deps, (await mustGet(deps, id)).webhook);
}

/** Every subscription, oldest first, with its status. */
export async function listWebhooks(deps: WebhookDeps): Promise<Webhook[]> {
  return Promise.all((await deps.store.listWebhooks()).map((r) => withStatus(deps, r.webhook)));
}

/** Removes a subscription and its deliveries (absent is fine). */
export async function deleteWebhook(deps: WebhookDeps, id: string): Promise<void> {
  await deps.store.deleteWebhook(checkId(id, "id"));
}

/** A subscription's deliveries, oldest first. */
export async function listDeliveries(
  deps: WebhookDeps,
  webhookId: string,
  filter: { state?: WebhookDeliveryState; pageSize?: number; pageToken?: string },
): Promise<Page<WebhookDelivery>> {
  await mustGet(deps, webhookId);
  if ((filter.pageSize ?? 0) < 0) throw invalid("page_size must not be negative", { field: "page_size" });
  const page = await deps.store.listWebhookDeliveries({ webhookId, ...filter });
  return { items: page.items.map((r) => r.delivery), nextPageToken: page.nextPageToken };
}

/**
 * Queues a delivery again, due now, with a new retry period (queued_at). An agent's attempt still
 * in flight stays remembered: its outcome is taken, not a second attempt sent. One whose order
 * ended is not kept: the redelivery is a fresh attempt. (The worker's final write may land between
 * this read and write and be overwritten; the worker then never takes the outcome of an order that
 * ended before queued_at, see webhook-worker.ts attemptByAgent.)
 */
export async function redeliver(deps: WebhookDeps, webhookId: string, id: string): Promise<WebhookDelivery> {
  const found = await deps.store.getWebhookDelivery(checkId(id, "id"));
  if (!found || found.delivery.webhookId !== webhookId) throw notFound("webhook_delivery", id);
  const now = timestampFromDate(deps.now());
  const d: WebhookDelivery = { ...found.delivery, state: WebhookDeliveryState.PENDING, nextAttemptAt: now, queuedAt: now };
  d.deadLetteredAt = undefined;
  const order = found.attemptOrderId ? await deps.store.getWorkOrder(found.attemptOrderId) : undefined;
  const inFlight = order && !isFinishedStatus(order.status) ? order.id : undefined;
  if (!(await deps.store.updateWebhookDelivery(d, inFlight))) throw notFound("webhook_delivery", id);
  return d;
}

/**
 * Re-seals the URL and secret of every subscription sealed with a key other than the ring's
 * primary (after a key rotation, before the old keys are retired); returns how many changed.
 */
export async function resealWebhooks(deps: WebhookDeps): Promise<number> {
  let changed = 0;
  for (const r of await deps.store.listWebhooks()) {
    const primary = deps.keyRing.primaryId;
    if (SecretKeyRing.keyIdOf(r.sealedUrl) === primary && SecretKeyRing.keyIdOf(r.sealedSecret) === primary) continue;
    const { url, secret } = openSecrets(deps.keyRing, r);
    await deps.store.putWebhook({ webhook: r.webhook, ...seal(deps.keyRing, r.webhook.id, url, secret) });
    changed += 1;
  }
  return changed;
}

/** A new pending delivery of `eventId` to `webhookId`, due now. */
export function newDelivery(webhookId: string, eventId: string, eventType: string, at: Date): WebhookDelivery {
  const now = timestampFromDate(at);
  return create(WebhookDeliverySchema, {
    id: uuidv5(`${webhookId}/${eventId}`, DELIVERY_NAMESPACE),
    webhookId,
    eventId,
    eventType,
    state: WebhookDeliveryState.PENDING,
    createdAt: now,
    nextAttemptAt: now,
    queuedAt: now,
  });
}

/** The URL and the shared secret of a subscription, unsealed. */
export function openSecrets(keyRing: SecretKeyRing, r: WebhookRecord): { url: URL; secret: string } {
  const id = r.webhook.id;
  return {
    url: new URL(keyRing.open(r.sealedUrl, webhookUrlContext(id)).toString("utf8")),
    secret: keyRing.open(r.sealedSecret, `webhook/${id}/secret`).toString("utf8"),
  };
}

function seal(keyRing: SecretKeyRing, id: string, url: URL, secret: string): { sealedUrl: string; sealedSecret: string } {
  return {
    sealedUrl: keyRing.seal(Buffer.from(url.href, "utf8"), webhookUrlContext(id)),
    sealedSecret: keyRing.seal(Buffer.from(secret, "utf8"), `webhook/${id}/secret`),
  };
}

async function mustGet(deps: WebhookDeps, id: string): Promise<WebhookRecord> {
  const r = await deps.store.getWebhook(checkId(id, "id"));
  if (!r) throw notFound("webhook", id);
  return r;
}

async function withStatus(deps: WebhookDeps, w: Webhook): Promise<Webhook> {
  const s = await deps.store.webhookDeliveryStats(w.id);
  const status = create(WebhookStatusSchema, {
    backlog: BigInt(s.backlog),
    deadLettered: BigInt(s.deadLettered),
    lastFailure: s.lastFailure,
    ...(s.lastSuccessAt ? { lastSuccessAt: timestampFromDate(s.lastSuccessAt) } : {}),
    ...(s.lastFailureAt ? { lastFailureAt: timestampFromDate(s.lastFailureAt) } : {}),
  });
  return { ...w, status };
}

function checkUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw invalid("url is not a URL", { field: "url" });
  }
  if (url.protocol !== "https:") throw invalid("url must be https://", { field: "url" });
  if (text.length > MAX_URL) throw invalid(`url is longer than ${MAX_URL} characters`, { field: "url" });
  url.hash = "";
  return url;
}

// A URL aimed at this machine or a private network needs allow_private_network.
function checkReach(url: URL, allowPrivateNetwork: boolean): void {
  const problem = allowPrivateNetwork ? undefined : privateUrlProblem(url);
  if (problem) {
    throw invalid(`url: ${problem}; deliveries go to public addresses unless allow_private_network is set`, {
      field: "url",
      reason: "PRIVATE_ADDRESS",
    });
  }
}

// Label equality, as a pool order's selector (its orders go to target.pool.node_selector).
function checkNodeSelector(selector: Record<string, string>): Record<string, string> {
  if (Object.keys(selector).length > 32) throw invalid("node_selector holds at most 32 labels", { field: "node_selector" });
  checkSelector(selector, "node_selector");
  return { ...selector };
}

function checkSecret(secret: string): string {
  if (secret.length < 16 || secret.length > 256) throw invalid("secret must be 16 to 256 characters", { field: "secret" });
  return secret;
}

function checkTenant(tenantId: string): string {
  return tenantId === "" ? "" : checkId(tenantId, "tenant_id");
}

function checkDescription(text: string): string {
  if (text.length > 500) throw invalid("description is longer than 500 characters", { field: "description" });
  return text;
}

function checkCa(pem: string): string {
  if (pem === "") return "";
  if (pem.length > MAX_CA_PEM) throw invalid("ca_pem is larger than 64 KiB", { field: "ca_pem" });
  try {
    new X509Certificate(pem);
  } catch {
    throw invalid("ca_pem is not a PEM certificate", { field: "ca_pem" });
  }
  return pem;
}
