// Attempts made by agents, for a subscription with a node_selector: the controller builds and
// signs the request as for its own attempts, and one attempt is a pool work order (deliver_webhook)
// for the nodes the selector picks that hold webhook.deliver; the first to ask claims it. The
// URL is not in the order (the claim holder gets it from GetWorkOrderSecrets). The order's id is
// derived from the delivery and the attempt's number, so queueing it again (after a restart, by
// the next leader) finds the same order. Its end is the attempt's outcome.
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { v4 as uuidv4 } from "uuid";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import { WorkOrderActionSchema } from "../../gen/skipper/v1/order_action_pb.js";
import type { Webhook } from "../../gen/skipper/v1/webhook_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { AttemptOutcome } from "../../common/webhook-post.js";
import { isSkipperError } from "../base/errors.js";
import { buildEvent, transitionEventId } from "../events/event-recorder.js";
import { pendingOrder } from "../reconcile/plan-deployment.js";
import type { WorkOrderStore } from "../store/store.js";

/** The capability a node needs to take an attempt. */
export const DELIVER_CAPABILITY = "webhook.deliver";

// Attempt orders' ids start with this: "whk-<delivery id>-<attempt number>".
const PREFIX = "whk-";

/** The order id of attempt `attempt` (1-based) of delivery `deliveryId`. */
export function attemptOrderId(deliveryId: string, attempt: number): string {
  return `${PREFIX}${deliveryId}-${attempt}`;
}

/** True for an attempt order's id. */
export function isAttemptOrderId(id: string): boolean {
  return id.startsWith(PREFIX);
}

/**
 * True for an event about an attempt order (created, started, ended): never delivered itself, or
 * a subscription to work_order.* would queue a delivery for each of its own attempts, forever.
 */
export function isAttemptOrderEvent(e: Event): boolean {
  return isAttemptOrderId(e.workOrderId) || (e.resourceType === "work_order" && isAttemptOrderId(e.resourceId));
}

/** A selector as people write it: k=v,k2=v2 (sorted). */
export function selectorText(selector: Record<string, string>): string {
  return Object.entries(selector)
    .map(([k, v]) => `${k}=${v}`)
    .sort()
    .join(",");
}

/** One signed request, as the agent is to send it. */
export interface AttemptRequest {
  orderId: string;
  webhook: Webhook;
  deliveryId: string;
  body: string;
  headers: Record<string, string>;
  attemptTimeoutMs: number;
  claimMarginMs: number;
  now: Date;
}

/** What queueing an attempt order needs. */
export interface AttemptOrderDeps {
  store: Pick<WorkOrderStore, "createWorkOrder" | "getWorkOrder">;
  /** Rings the watches of the nodes that may take it. */
  feed: { publish(order: WorkOrder): void };
}

// How much longer than its POST the order may run: the agent reports its own "no answer" first.
const ORDER_TIMEOUT_MARGIN_MS = 5000;

/** The pending pool order of one attempt. */
export function attemptOrder(a: AttemptRequest): WorkOrder {
  const w = a.webhook;
  const trace = { requestId: uuidv4(), correlationId: a.deliveryId };
  const action = create(WorkOrderActionSchema, {
    kind: {
      case: "deliverWebhook",
      value: {
        webhookId: w.id,
        deliveryId: a.deliveryId,
        urlHost: w.urlHost,
        headers: { "content-type": "application/json", ...a.headers },
        body: new TextEncoder().encode(a.body),
        caPem: w.caPem,
        allowPrivateNetwork: w.allowPrivateNetwork,
        timeout: durationFromMs(a.attemptTimeoutMs),
      },
    },
  });
  return pendingOrder({
    id: a.orderId,
    type: WorkOrderType.DELIVER_WEBHOOK,
    target: { tenantId: "", nodeId: "", pool: { nodeSelector: { ...w.nodeSelector } }, requiredCapabilities: [DELIVER_CAPABILITY] },
    trace,
    now: a.now,
    reason: "webhook_delivery",
    labels: { webhook_id: w.id },
    action,
    maxAttempts: 1,
    timeout: durationFromMs(a.attemptTimeoutMs + ORDER_TIMEOUT_MARGIN_MS),
    // Unclaimed by then, it ends EXPIRED, which is the attempt's failure.
    expiresAt: timestampFromDate(new Date(a.now.getTime() + a.attemptTimeoutMs + a.claimMarginMs)),
  });
}

/** Stores the attempt's order with its work_order_created and rings the pool; an order stored under that id already is answered as it is. */
export async function queueAttemptOrder(deps: AttemptOrderDeps, a: AttemptRequest): Promise<WorkOrder> {
  const existing = await deps.store.getWorkOrder(a.orderId);
  if (existing) return existing;
  const order = attemptOrder(a);
  let stored: WorkOrder;
  try {
    stored = await deps.store.createWorkOrder(order, (o) => [createdEvent(o, a)]);
  } catch (e) {
    const raced = isSkipperError(e) && e.code === "CONFLICT" ? await deps.store.getWorkOrder(a.orderId) : undefined;
    if (!raced) throw e;
    return raced;
  }
  deps.feed.publish(stored);
  return stored;
}

// Names and ids only: no URL, body or signature.
function createdEvent(o: WorkOrder, a: AttemptRequest): Event {
  return buildEvent({
    id: transitionEventId(o.id, "work_order_created"),
    type: "work_order_created",
    resourceType: "work_order",
    resourceId: o.id,
    workOrderId: o.id,
    requestId: o.requestId,
    correlationId: o.correlationId,
    data: {
      type: "deliver_webhook",
      reason: "controller",
      webhook_id: a.webhook.id,
      delivery_id: a.deliveryId,
      pool: selectorText(a.webhook.nodeSelector) || "*",
      required_capabilities: DELIVER_CAPABILITY,
    },
  });
}

/** An ended attempt order as the delivery records it: the outcome, the node that made it, when. */
export interface OrderAttempt {
  outcome: AttemptOutcome;
  nodeId: string;
  at?: Date;
}

/**
 * What an ended attempt order (or a missing one) means for its delivery: the receiver's answer
 * when the agent got one or says why not; else why no agent made it (nobody claimed it in time,
 * cancelled, the claim lapsed).
 */
export function orderAttempt(order: WorkOrder | undefined, orderId: string): OrderAttempt {
  if (!order) return { outcome: { status: 0, text: `the attempt's work order ${orderId} is gone` }, nodeId: "" };
  const nodeId = order.claim?.nodeId || order.attempts.at(-1)?.nodeId || order.target?.nodeId || "";
  const at = order.finishedAt ? timestampDate(order.finishedAt) : undefined;
  const r = order.result;
  const answer = r?.details?.webhook;
  if (answer && (answer.status > 0 || answer.error !== "")) {
    const outcome = answer.status > 0 ? { status: answer.status, text: answer.response } : { status: 0, text: answer.error };
    return { outcome, nodeId, at };
  }
  if (order.status === WorkOrderStatus.SUCCESS)
    return { outcome: { status: 0, text: "the agent reported success without an answer" }, nodeId, at };
  if (r?.code === "EXPIRED" && nodeId === "") {
    const sel = selectorText(order.target?.pool?.nodeSelector ?? {}) || "(any node)";
    return { outcome: { status: 0, text: `no node matching ${sel} with ${DELIVER_CAPABILITY} took the attempt` }, nodeId, at };
  }
  const why = r ? `${r.code}: ${r.message}` : (WorkOrderStatus[order.status] ?? "ended");
  return { outcome: { status: 0, text: `the attempt's work order ${order.id} ended ${why}`.slice(0, 512) }, nodeId, at };
}
