// The webhook loops, run by the leading controller only:
//   dispatch: read the event history from the stored cursor (less a look-back, since events of
//             concurrent writers may land slightly out of order), queue one delivery per matching
//             subscription and event (the id is derived from both, so queueing again is a no-op),
//             then move the cursor. At least once: a stop between queueing and moving the cursor
//             reads those events again, and queues nothing new.
//   deliver:  send the deliveries that are due, a bounded number at once, each in the background
//             (a slow receiver holds one slot, never the loop). 2xx: delivered. Otherwise the
//             next attempt waits a random time up to base * 2^attempts (capped: full jitter),
//             until the retry period from queued_at would be over: then the dead letter.
//             A subscription with a node_selector has its attempts made by agents
//             (webhook-orders.ts): the attempt is a pool work order, remembered in the delivery
//             record while in flight; it holds its slot until the order ends (claimed and
//             reported, or expired unclaimed), and the order's end is the attempt's outcome. A
//             delivery found with an order in flight (after a restart, on a new leader) waits for
//             that order instead of sending another attempt, unless that order ended before the
//             delivery was (re)queued: that is an earlier attempt's, and a fresh one is sent.
// The deploys that caused the events are never waited on by, nor told of, any of this: they
// wrote their events and went on.
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { toJson, type JsonObject } from "@bufbuild/protobuf";
import type { Logger } from "../../common/logging/logger.js";
import { EventSchema, type Event } from "../../gen/skipper/v1/event_pb.js";
import { WebhookDeliveryState, type WebhookDelivery } from "../../gen/skipper/v1/webhook_service_pb.js";
import { Periodic } from "../base/periodic.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { isFinishedStatus } from "../../common/order-status.js";
import type { WebhookDeliveryRecord, WebhookRecord, WebhookStore, EventStore, WorkOrderStore } from "../store/store.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";
import { dottedName, matchesAny } from "./event-names.js";
import { newDelivery, openSecrets } from "./webhook-subscriptions.js";
import { send, type AttemptOutcome, type SendRequest } from "./webhook-sender.js";
import { DELIVERY_HEADER, SIGNATURE_HEADER, signatureHeader } from "./webhook-signature.js";
import { attemptOrderId, isAttemptOrderEvent, isAttemptOrderId, orderAttempt, queueAttemptOrder } from "./webhook-orders.js";
import { fullJitterDelay } from "../../common/backoff.js";

/** How deliveries are paced; every field has a default. */
export interface WebhookSettings {
  /** How often the loops look for events and due deliveries (default 1 s). */
  pollMs: number;
  /** Deadline of one attempt (default 10 s). */
  attemptTimeoutMs: number;
  /** How long a delivery is retried before the dead letter (default 24 h). */
  retryForMs: number;
  /** The first retry waits up to this (default 1 s), each further one twice as long ... */
  backoffBaseMs: number;
  /** ... up to this (default 1 h). */
  backoffCapMs: number;
  /** Attempts under way at once (default 8) ... */
  concurrency: number;
  /** ... and to one subscription (default 2). */
  perWebhook: number;
  /** How far before the cursor the event history is read again (default 1 min). */
  lookBackMs: number;
  /** How long an agent's attempt may wait to be claimed, beyond its deadline (default 30 s). */
  claimMarginMs: number;
}

export const DEFAULT_WEBHOOK_SETTINGS: WebhookSettings = {
  pollMs: 1000,
  attemptTimeoutMs: 10_000,
  retryForMs: 24 * 3_600_000,
  backoffBaseMs: 1000,
  backoffCapMs: 3_600_000,
  concurrency: 8,
  perWebhook: 2,
  lookBackMs: 60_000,
  claimMarginMs: 30_000,
};

export interface WebhookWorkerDeps {
  store: WebhookStore & EventStore & Pick<WorkOrderStore, "createWorkOrder" | "getWorkOrder">;
  /** Rings the watches of the nodes that may take an agent's attempt (dispatch/order-feed.ts). */
  feed: { publish(order: WorkOrder): void };
  keyRing: SecretKeyRing;
  logger: Logger;
  now: () => Date;
  settings?: Partial<WebhookSettings>;
  random?: () => number;
  /** The attempt itself (tests may replace it). */
  send?: (req: SendRequest) => Promise<AttemptOutcome>;
}

const EVENT_PAGE = 500;

/** Queues deliveries from the event history and sends them. */
export class WebhookWorker {
  private readonly settings: WebhookSettings;
  private readonly periodic: Periodic;
  private readonly inFlight = new Map<string, { webhookId: string; done: Promise<void> }>();
  // Attempts that settled (their outcome stored) while a look for due deliveries was under way,
  // by that look's number: the look may have read the delivery as it stood before the outcome,
  // still due, and must not send it again.
  private looks = 0;
  private readonly settledDuring = new Map<string, number>();
  private readonly stopping = new AbortController();
  // Events of the look-back window this process queued already (id -> timestamp ms): read again
  // every round, they are not queued again. Forgotten as the window moves on; empty after a start.
  // A change of the subscriptions (one created or edited) clears it: what they match is new.
  private readonly seen = new Map<string, number>();
  private seenFor = "";
  // Attempts waiting for their order's end, by order id: told at once when it ends here.
  private readonly waking = new Map<string, () => void>();

  constructor(private readonly deps: WebhookWorkerDeps) {
    this.settings = { ...DEFAULT_WEBHOOK_SETTINGS, ...deps.settings };
    this.periodic = new Periodic(
      () => this.tick(),
      this.settings.pollMs,
      (err) => this.deps.logger.error({ action: "webhook", result: "error", err }, "webhook round failed"),
    );
  }

  start(): void {
    this.periodic.start();
  }

  /** Stops the loops and ends the attempts under way (unrecorded: they are sent again after a start). */
  async stop(): Promise<void> {
    this.stopping.abort();
    await this.periodic.stop();
    await Promise.all([...this.inFlight.values()].map((f) => f.done));
  }

  /** One round: queue what new events call for, then start the due deliveries. */
  async tick(): Promise<void> {
    try {
      // Without subscriptions a round costs this one read.
      const hooks = await this.deps.store.listWebhooks();
      if (hooks.length === 0) return;
      await this.dispatch(hooks);
      await this.deliver(hooks);
    } catch (err) {
      this.deps.logger.error({ action: "webhook", result: "error", err }, "webhook round failed");
    }
  }

  /** Queues a delivery for every subscription an event since the cursor matches; returns how many. */
  async dispatch(subscriptions?: WebhookRecord[]): Promise<number> {
    const { store } = this.deps;
    // Paused ones too: their deliveries wait in the queue until they are resumed.
    const hooks = subscriptions ?? (await store.listWebhooks());
    if (hooks.length === 0) return 0;
    const versions = hooks.map((h) => `${h.webhook.id}@${h.webhook.updatedAt ? timestampDate(h.webhook.updatedAt).getTime() : 0}`).join();
    if (versions !== this.seenFor) {
      this.seen.clear();
      this.seenFor = versions;
    }
    const earliest = Math.min(...hooks.map(createdMs));
    const cursor = (await store.getWebhookCursor())?.getTime() ?? earliest;
    const since = new Date(Math.max(cursor, earliest) - this.settings.lookBackMs);
    let queued = 0;
    let last = cursor;
    let pageToken = "";
    do {
      const page = await store.listEvents({ since, pageSize: EVENT_PAGE, pageToken });
      const fresh = page.items.filter((e) => !this.seen.has(e.id));
      const records = fresh.flatMap((e) => this.deliveriesOf(e, hooks));
      if (records.length > 0) queued += await store.enqueueWebhookDeliveries(records);
      const before = last;
      for (const e of fresh) {
        const at = e.timestamp ? timestampDate(e.timestamp).getTime() : 0;
        this.seen.set(e.id, at);
        last = Math.max(last, at);
      }
      // Page by page: a long catch-up that is cut short resumes near where it was.
      if (last > before) await store.putWebhookCursor(new Date(last));
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    for (const [id, at] of this.seen) if (at < since.getTime()) this.seen.delete(id);
    return queued;
  }

  /**
   * Starts the due deliveries there are free slots for, at most `perWebhook` at once to one
   * subscription (a receiver that hangs takes its own slots, not everyone's); returns how many started.
   */
  async deliver(subscriptions?: WebhookRecord[]): Promise<number> {
    const free = this.settings.concurrency - this.inFlight.size;
    if (free <= 0) return 0;
    const hooks = new Map((subscriptions ?? (await this.deps.store.listWebhooks())).map((h) => [h.webhook.id, h]));
    const busy = new Map<string, number>();
    for (const webhookId of [...this.inFlight.values()].map((f) => f.webhookId)) busy.set(webhookId, (busy.get(webhookId) ?? 0) + 1);
    const full = (webhookId: string) => (busy.get(webhookId) ?? 0) >= this.settings.perWebhook;
    const skip = [...hooks.values()].filter((h) => h.webhook.paused || full(h.webhook.id)).map((h) => h.webhook.id);
    const look = ++this.looks;
    const due = await this.deps.store.dueWebhookDeliveries(this.deps.now(), free + this.inFlight.size, skip);
    let started = 0;
    for (const r of due) {
      const { id, webhookId } = r.delivery;
      if (started === free) break;
      if (this.inFlight.has(id) || (this.settledDuring.get(id) ?? 0) >= look || full(webhookId)) continue;
      busy.set(webhookId, (busy.get(webhookId) ?? 0) + 1);
      const done = this.attempt(r, hooks.get(webhookId))
        .catch((err: unknown) => this.deps.logger.error({ action: "webhook_delivery", result: "error", err }, "webhook attempt failed"))
        .finally(() => {
          this.settledDuring.set(id, this.looks);
          this.inFlight.delete(id);
        });
      this.inFlight.set(id, { webhookId, done });
      started += 1;
    }
    // Settled before this look began: it read their outcome.
    for (const [id, n] of this.settledDuring) if (n <= look) this.settledDuring.delete(id);
    return started;
  }

  /** An order ended (reconcile triggers): the attempt waiting for it, if any, reads its outcome now. */
  orderEnded(order: WorkOrder): void {
    if (isAttemptOrderId(order.id)) this.waking.get(order.id)?.();
  }

  /** Waits until no attempt is under way (tests). */
  async settle(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight.values()].map((f) => f.done));
  }

  private deliveriesOf(event: Event, hooks: WebhookRecord[]): WebhookDeliveryRecord[] {
    const name = dottedName(event.type);
    const at = event.timestamp ? timestampDate(event.timestamp).getTime() : 0;
    // The events of the agents' attempt orders are the worker's own doing, never delivered.
    if (isAttemptOrderEvent(event)) return [];
    return hooks
      .filter((h) => at >= createdMs(h) && (h.webhook.tenantId === "" || h.webhook.tenantId === event.tenantId))
      .filter((h) => matchesAny(h.webhook.eventTypes, name))
      .map((h) => ({
        delivery: newDelivery(h.webhook.id, event.id, name, this.deps.now()),
        event: toJson(EventSchema, event, { useProtoFieldName: true }) as JsonObject,
      }));
  }

  // One attempt, and what it means for the delivery.
  private async attempt(r: WebhookDeliveryRecord, hook: WebhookRecord | undefined): Promise<void> {
    const d = r.delivery;
    let at = this.deps.now();
    let outcome: AttemptOutcome;
    let nodeId: string | undefined;
    if (r.attemptOrderId || (hook && Object.keys(hook.webhook.nodeSelector).length > 0)) {
      const byAgent = await this.attemptByAgent(r, hook, at);
      if (!byAgent) return;
      ({ outcome, nodeId } = byAgent);
      at = byAgent.at ?? this.deps.now();
    } else if (!hook) outcome = { status: 0, text: "the subscription was deleted" };
    else {
      const { url, secret } = openSecrets(this.deps.keyRing, hook);
      const req = signedRequest(d.id, r, secret, at);
      outcome = await (this.deps.send ?? send)({
        url,
        ...req,
        caPem: hook.webhook.caPem || undefined,
        allowPrivateNetwork: hook.webhook.allowPrivateNetwork,
        timeoutMs: this.settings.attemptTimeoutMs,
        signal: this.stopping.signal,
      });
      if (this.stopping.signal.aborted) return;
      // The URL is a secret: an error text that quotes it shows its host only.
      outcome.text = outcome.text.replaceAll(url.href, url.host);
    }
    const next = this.afterAttempt(d, hook !== undefined, outcome, at);
    // The node whose agent made this attempt; none for the controller's own.
    next.lastNodeId = nodeId ?? "";
    await this.deps.store.updateWebhookDelivery(next);
    const ok = next.state === WebhookDeliveryState.DELIVERED;
    this.deps.logger[ok ? "info" : "warn"](
      {
        action: "webhook_delivery",
        result: ok ? "ok" : next.state === WebhookDeliveryState.DEAD_LETTERED ? "dead_lettered" : "retry",
        node_id: nodeId,
        metadata: { delivery_id: d.id, webhook_id: d.webhookId, event_id: d.eventId, attempts: next.attempts, status: outcome.status },
      },
      ok ? "webhook delivered" : "webhook attempt failed",
    );
  }

  /**
   * An attempt made by an agent: the order of the one in flight, or a new one queued and
   * remembered in the delivery; waits for its end. Undefined when the worker stops first (the
   * order stays remembered, and whoever leads next takes its outcome).
   */
  private async attemptByAgent(
    r: WebhookDeliveryRecord,
    hook: WebhookRecord | undefined,
    at: Date,
  ): Promise<{ outcome: AttemptOutcome; nodeId: string; at?: Date } | undefined> {
    const d = r.delivery;
    let orderId = r.attemptOrderId;
    if (orderId && this.endedBefore(await this.deps.store.getWorkOrder(orderId), d)) orderId = undefined;
    if (!orderId) {
      if (!hook) return { outcome: { status: 0, text: "the subscription was deleted" }, nodeId: "" };
      orderId = await this.freshOrderId(d);
      const { secret } = openSecrets(this.deps.keyRing, hook);
      const req = signedRequest(d.id, r, secret, at);
      const { attemptTimeoutMs, claimMarginMs } = this.settings;
      const a = { orderId, webhook: hook.webhook, deliveryId: d.id, ...req, attemptTimeoutMs, claimMarginMs, now: at };
      await queueAttemptOrder({ store: this.deps.store, feed: this.deps.feed }, a);
      // Remembered before anything waits on it: a restart from here takes this order's outcome.
      if (!(await this.deps.store.updateWebhookDelivery(d, orderId))) return undefined;
    }
    const order = await this.orderEnd(orderId);
    if (order === null) return undefined;
    return orderAttempt(order, orderId);
  }

  /**
   * True when `order` ended before the delivery was last queued (a redelivery since): its outcome
   * is an earlier attempt's and never this one's. A redelivery that raced the worker's final write
   * may have put back such an order, or an attempt count whose next order id is taken by one.
   */
  private endedBefore(order: WorkOrder | undefined, d: WebhookDelivery): boolean {
    if (!order?.finishedAt || !d.queuedAt || !isFinishedStatus(order.status)) return false;
    return timestampDate(order.finishedAt).getTime() < timestampDate(d.queuedAt).getTime();
  }

  // The id of the next attempt's order: attempt count + 1, past ids an earlier attempt's ended order holds.
  private async freshOrderId(d: WebhookDelivery): Promise<string> {
    let n = d.attempts + 1;
    while (this.endedBefore(await this.deps.store.getWorkOrder(attemptOrderId(d.id, n)), d)) n += 1;
    return attemptOrderId(d.id, n);
  }

  // The order once it ended (undefined: it is gone), or null when the worker stops first.
  private async orderEnd(orderId: string): Promise<WorkOrder | undefined | null> {
    const signal = this.stopping.signal;
    while (!signal.aborted) {
      const order = await this.deps.store.getWorkOrder(orderId);
      if (!order || isFinishedStatus(order.status)) return order;
      // Woken by the order's end here, else a look each poll (another controller may have ended it).
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal.removeEventListener("abort", done);
          this.waking.delete(orderId);
          resolve();
        };
        const timer = setTimeout(done, this.settings.pollMs);
        signal.addEventListener("abort", done, { once: true });
        this.waking.set(orderId, done);
      });
    }
    return null;
  }

  // The delivery after an attempt: delivered, retried later, or dead-lettered.
  private afterAttempt(d: WebhookDelivery, retriable: boolean, outcome: AttemptOutcome, at: Date): WebhookDelivery {
    const next: WebhookDelivery = { ...d, attempts: d.attempts + 1, lastAttemptAt: timestampFromDate(at), lastStatus: outcome.status };
    next.lastResponse = outcome.text;
    if (outcome.status >= 200 && outcome.status < 300) {
      return { ...next, state: WebhookDeliveryState.DELIVERED, deliveredAt: timestampFromDate(at) };
    }
    next.lastFailureAt = timestampFromDate(at);
    next.lastFailure = outcome.status > 0 ? `${outcome.status}: ${outcome.text}` : outcome.text;
    const wait = this.backoff(next.attempts);
    const since = d.queuedAt ? timestampDate(d.queuedAt).getTime() : at.getTime();
    if (!retriable || at.getTime() + wait - since > this.settings.retryForMs) {
      return { ...next, state: WebhookDeliveryState.DEAD_LETTERED, deadLetteredAt: timestampFromDate(at) };
    }
    return { ...next, nextAttemptAt: timestampFromDate(new Date(at.getTime() + wait)) };
  }

  // Full jitter: a random wait up to min(cap, base * 2^(failures - 1)).
  private backoff(failures: number): number {
    const { backoffBaseMs, backoffCapMs } = this.settings;
    return fullJitterDelay(failures - 1, backoffBaseMs, backoffCapMs, this.deps.random);
  }
}

// The body and the signed headers of one attempt made at `at`.
function signedRequest(deliveryId: string, r: WebhookDeliveryRecord, secret: string, at: Date) {
  const body = JSON.stringify({ id: deliveryId, event: r.event, timestamp: at.toISOString() });
  return { body, headers: { [DELIVERY_HEADER]: deliveryId, [SIGNATURE_HEADER]: signatureHeader(secret, at, body) } };
}

function createdMs(h: WebhookRecord): number {
  return h.webhook.createdAt ? timestampDate(h.webhook.createdAt).getTime() : 0;
}
