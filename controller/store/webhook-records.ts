// What both stores share about webhook records: how a subscription and a delivery are written
// (plain JSON holding the API's message as proto JSON), the listing order of deliveries and the
// status of a subscription computed from its deliveries.
import { fromJson, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { copyMessage } from "../../common/message-copy.js";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  WebhookDeliverySchema,
  WebhookDeliveryState,
  WebhookSchema,
  type WebhookDelivery,
} from "../../gen/skipper/v1/webhook_service_pb.js";
import { timestampKey, tupleKey } from "./record-keys.js";
import type { WebhookDeliveryRecord, WebhookDeliveryStats, WebhookRecord } from "./store.js";

const OPTS = { useProtoFieldName: true } as const;

/** A delivery page token resumes after (created_at, id). */
export const DELIVERY_PAGE = { tag: "webhook-deliveries", key: /^\d{21}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/ };

/** webhooks/subscriptions/<id>.json */
export function encodeWebhook(r: WebhookRecord): JsonObject {
  return { webhook: toJson(WebhookSchema, r.webhook, OPTS), sealed_url: r.sealedUrl, sealed_secret: r.sealedSecret };
}

/** Parses a subscription record; throws on a malformed one. */
export function decodeWebhook(o: JsonObject): WebhookRecord {
  if (typeof o.sealed_url !== "string" || typeof o.sealed_secret !== "string") throw new Error("webhook record lacks its sealed fields");
  return {
    webhook: fromJson(WebhookSchema, o.webhook as JsonValue, { ignoreUnknownFields: true }),
    sealedUrl: o.sealed_url,
    sealedSecret: o.sealed_secret,
  };
}

/** webhooks/deliveries/<id>.json */
export function encodeDelivery(r: WebhookDeliveryRecord): JsonObject {
  return {
    delivery: toJson(WebhookDeliverySchema, r.delivery, OPTS),
    event: r.event,
    ...(r.attemptOrderId ? { attempt_order_id: r.attemptOrderId } : {}),
  };
}

/** Parses a delivery record; throws on a malformed one. */
export function decodeDelivery(o: JsonObject): WebhookDeliveryRecord {
  if (typeof o.event !== "object" || o.event === null || Array.isArray(o.event)) throw new Error("delivery record lacks its event");
  return {
    delivery: fromJson(WebhookDeliverySchema, o.delivery as JsonValue, { ignoreUnknownFields: true }),
    event: o.event,
    ...(typeof o.attempt_order_id === "string" && o.attempt_order_id !== "" ? { attemptOrderId: o.attempt_order_id } : {}),
  };
}

/** A copy the caller may change. */
export function copyWebhook(r: WebhookRecord): WebhookRecord {
  return { ...r, webhook: copyMessage(WebhookSchema, r.webhook) };
}

/** A copy the caller may change. */
export function copyDelivery(r: WebhookDeliveryRecord): WebhookDeliveryRecord {
  return {
    delivery: copyMessage(WebhookDeliverySchema, r.delivery),
    event: structuredClone(r.event),
    ...(r.attemptOrderId ? { attemptOrderId: r.attemptOrderId } : {}),
  };
}

/** The key-ring context a subscription's URL is sealed under (the worker and GetWorkOrderSecrets open it). */
export function webhookUrlContext(webhookId: string): string {
  return `webhook/${webhookId}/url`;
}

/** The listing key of a delivery: (created_at, id). */
export function deliveryKey(d: WebhookDelivery): string {
  return tupleKey(timestampKey(d.createdAt), d.id);
}

/** When a delivery's next attempt is due (epoch ms). */
export function dueAt(d: WebhookDelivery): number {
  return d.nextAttemptAt ? timestampDate(d.nextAttemptAt).getTime() : 0;
}

/** The status of a subscription from its deliveries. */
export function deliveryStats(deliveries: Iterable<WebhookDelivery>): WebhookDeliveryStats {
  const stats: WebhookDeliveryStats = { backlog: 0, deadLettered: 0, lastFailure: "" };
  for (const d of deliveries) {
    if (d.state === WebhookDeliveryState.PENDING) stats.backlog += 1;
    if (d.state === WebhookDeliveryState.DEAD_LETTERED) stats.deadLettered += 1;
    if (d.deliveredAt) {
      const at = timestampDate(d.deliveredAt);
      if (!stats.lastSuccessAt || at > stats.lastSuccessAt) stats.lastSuccessAt = at;
    }
    const failed = d.lastFailureAt && timestampDate(d.lastFailureAt);
    if (failed && (!stats.lastFailureAt || failed > stats.lastFailureAt)) {
      stats.lastFailureAt = failed;
      stats.lastFailure = d.lastFailure;
    }
  }
  return stats;
}
