// The webhook worker's path for a subscription with a node_selector, on a file store with a fake
// clock: an attempt is a pool work order (no URL in it), remembered in the delivery while in
// flight, holding its slot until the order ends; the order's end is the attempt's outcome; a
// restarted worker takes the outcome of the order in flight instead of sending another; an order
// nobody claimed fails the attempt with its reason; the attempt orders' own events are not
// delivered; a redelivery never takes the outcome of an order that ended before it; the URL goes
// only to a claimer the node_selector still picks. The order's end is faked by what the store
// answers for it (no agent here).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toJsonString } from "@bufbuild/protobuf";
import { durationMs, timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { WebhookDeliveryState } from "../gen/skipper/v1/webhook_service_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { createLogger } from "../common/logging/logger.js";
import { recordEvents } from "../controller/events/event-recorder.js";
import { FileStore } from "../controller/store/file/file-store.js";
import type { Store } from "../controller/store/store.js";
import { SecretKeyRing } from "../controller/tls/secret-key-ring.js";
import { verifySignature } from "../controller/webhooks/webhook-signature.js";
import { createWebhook, getWebhook, redeliver, updateWebhook } from "../controller/webhooks/webhook-subscriptions.js";
import { WebhookWorker } from "../controller/webhooks/webhook-worker.js";
import { waitFor } from "./helpers/processes.js";
import { res } from "./helpers/resources.js";
import { resolveOrderSecrets, valuesHandedTo } from "../controller/dispatch/order-secrets.js";

const SECRET = "0123456789abcdef-agent";
const URL_TEXT = "https://hooks.site-b.internal/in/T0k3n";

describe("webhook attempts made by agents", () => {
  let dir: string;
  let store: FileStore;
  let keyRing: SecretKeyRing;
  let clock: number;
  const now = () => new Date(clock);
  const { logger } = createLogger({ service: "test", stdout: false, level: "error" });
  let published: WorkOrder[];
  // What the store answers for an order once the test ends it (as an agent's report or the expiry would).
  let ended: Map<string, WorkOrder>;
  let view: Store;
  const worker = () =>
    new WebhookWorker({
      store: view,
      keyRing,
      logger,
      now,
      feed: { publish: (o) => published.push(o) },
      send: () => Promise.reject(new Error("the controller must not send itself")),
      random: () => 1,
      settings: { pollMs: 20, backoffBaseMs: 100, backoffCapMs: 1000, retryForMs: 10_000, attemptTimeoutMs: 2000, claimMarginMs: 3000 },
    });
  const deps = () => ({ store, keyRing, now });
  const delivery = async () => (await store.listWebhookDeliveries({})).items[0]!;
  const end = (order: WorkOrder, fields: Partial<WorkOrder>) => {
    ended.set(order.id, create(WorkOrderSchema, { ...order, ...fields, finishedAt: timestampFromDate(now()) }));
  };
  const delivered = (order: WorkOrder, nodeId: string, status: number, response: string) =>
    end(order, {
      status: status < 300 ? WorkOrderStatus.SUCCESS : WorkOrderStatus.FAILED,
      claim: { $typeName: "skipper.v1.WorkOrderClaim", nodeId, fencingToken: 1n },
      result: create(WorkOrderSchema.fields.find((f) => f.localName === "result")!.message!, {
        success: status < 300,
        code: status < 300 ? "WEBHOOK_DELIVERED" : "WEBHOOK_REJECTED",
        details: { webhook: { status, response, durationMs: 3n } },
      }) as WorkOrder["result"],
    } as Partial<WorkOrder>);

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-webhook-agent-units-"));
    store = new FileStore(dir);
    await store.open();
    keyRing = await SecretKeyRing.load({ dataDir: dir });
    clock = Date.parse("2026-11-29T10:00:00Z");
    published = [];
    ended = new Map();
    view = Object.create(store) as Store;
    view.getWorkOrder = async (id: string) => ended.get(id) ?? (await store.getWorkOrder(id));
  });
  afterEach(async () => {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });

  async function subscribe(selector: Record<string, string>) {
    const hook = (
      await createWebhook(deps(), { url: URL_TEXT, eventTypes: ["*"], secret: SECRET, nodeSelector: selector, allowPrivateNetwork: true })
    ).webhook;
    clock += 1000;
    await recordEvents(store, [{ id: "ev1", type: "deployment_failed", requestId: "r", correlationId: "c", tenantId: "t1", at: now() }]);
    return hook;
  }

  it("an attempt is a signed pool order without the URL, remembered while in flight; its 200 delivers", async () => {
    const hook = await subscribe({ site: "b" });
    const w = worker();
    expect(await w.dispatch()).toBe(1);
    expect(await w.deliver()).toBe(1);
    await waitFor("the attempt's order", async () => ((await delivery()).attemptOrderId ? true : undefined), 5000, 10);
    const r = await delivery();
    expect(r.attemptOrderId).toBe(`whk-${r.delivery.id}-1`);
    const order = (await store.getWorkOrder(r.attemptOrderId!))!;
    expect(published.map((o) => o.id)).toEqual([order.id]);
    expect(order.type).toBe(WorkOrderType.DELIVER_WEBHOOK);
    expect(order.status).toBe(WorkOrderStatus.PENDING);
    expect(order.target).toMatchObject({ nodeId: "", tenantId: "", pool: { nodeSelector: { site: "b" } } });
    expect(order.target!.requiredCapabilities).toEqual(["webhook.deliver"]);
    expect(order.maxAttempts).toBe(1);
    expect(timestampDate(order.expiresAt!).getTime() - clock).toBe(2000 + 3000);
    expect(durationMs(order.timeout!)).toBeGreaterThan(2000);
    // The URL is the subscription's secret: nowhere in the order or its events.
    const json = toJsonString(WorkOrderSchema, order);
    expect(json).not.toContain("T0k3n");
    expect(json).not.toContain(SECRET);
    const events = (await store.listEvents({ since: new Date(0), pageSize: 100 })).items;
    expect(JSON.stringify(events.map((e) => e.data))).not.toContain("T0k3n");
    const action = order.action!.kind.case === "deliverWebhook" ? order.action!.kind.value : undefined;
    const body = new TextDecoder().decode(action!.body);
    expect(action).toMatchObject({ webhookId: hook.id, deliveryId: r.delivery.id, urlHost: "hooks.site-b.internal" });
    expect(verifySignature(SECRET, action!.headers["x-skipper-signature"]!, body, now())).toBe(true);
    expect(action!.headers["x-skipper-delivery"]).toBe(r.delivery.id);
    // In flight: the slot stays taken, and no second order goes out.
    expect(await w.deliver()).toBe(0);
    expect(published).toHaveLength(1);
    delivered(order, "node-b1", 200, "thanks");
    w.orderEnded(ended.get(order.id)!);
    await w.settle();
    const after = await delivery();
    expect(after.attemptOrderId).toBeUndefined();
    expect(after.delivery).toMatchObject({ state: WebhookDeliveryState.DELIVERED, attempts: 1, lastStatus: 200, lastNodeId: "node-b1" });
  });

  it("a restarted worker takes the outcome of the order in flight and sends no second attempt", async () => {
    await subscribe({ site: "b" });
    const first = worker();
    await first.dispatch();
    await first.deliver();
    await waitFor("the attempt's order", async () => ((await delivery()).attemptOrderId ? true : undefined), 5000, 10);
    await first.stop();
    const orderId = (await delivery()).attemptOrderId!;
    expect(orderId).toBeDefined();
    const second = worker();
    expect(await second.deliver()).toBe(1);
    delivered((await store.getWorkOrder(orderId))!, "node-b2", 500, "busy");
    await second.settle();
    expect(published).toHaveLength(1);
    const r = await delivery();
    expect(r.attemptOrderId).toBeUndefined();
    expect(r.delivery).toMatchObject({ state: WebhookDeliveryState.PENDING, attempts: 1, lastStatus: 500, lastNodeId: "node-b2" });
    expect(r.delivery.lastFailure).toBe("500: busy");
    // The retry is a new order: attempt 2.
    clock = timestampDate(r.delivery.nextAttemptAt!).getTime();
    expect(await second.deliver()).toBe(1);
    await waitFor("the second order", async () => ((await delivery()).attemptOrderId?.endsWith("-2") ? true : undefined), 5000, 10);
    expect(published.map((o) => o.id)).toEqual([orderId, orderId.replace(/-1$/, "-2")]);
    delivered(published[1]!, "node-b1", 204, "");
    await second.settle();
    expect((await delivery()).delivery).toMatchObject({ state: WebhookDeliveryState.DELIVERED, attempts: 2 });
  });

  it("a redelivery that read the delivery before the worker took its order's outcome sends a fresh attempt, not that outcome again", async () => {
    await subscribe({ site: "b" });
    const w = worker();
    await w.dispatch();
    await w.deliver();
    await waitFor("the attempt's order", async () => ((await delivery()).attemptOrderId ? true : undefined), 5000, 10);
    // The redelivery reads the delivery now, while attempt 1 is in flight ...
    const stale = await delivery();
    const first = published[0]!;
    expect(stale.attemptOrderId).toBe(first.id);
    // ... the order ends with a 200 and the worker writes the outcome ...
    delivered(first, "node-b1", 200, "thanks");
    w.orderEnded(ended.get(first.id)!);
    await w.settle();
    expect((await delivery()).delivery).toMatchObject({ state: WebhookDeliveryState.DELIVERED, attempts: 1 });
    // ... and then the redelivery writes back what it read.
    clock += 1000;
    const racing = Object.create(view) as Store;
    racing.getWebhookDelivery = async () => stale;
    await redeliver({ store: racing, keyRing, now }, stale.delivery.webhookId, stale.delivery.id);
    const queued = await delivery();
    expect(queued.attemptOrderId).toBeUndefined();
    expect(queued.delivery.state).toBe(WebhookDeliveryState.PENDING);
    // The ended order's 200 is not taken again: a second order goes out, and only its end delivers.
    expect(await w.deliver()).toBe(1);
    await waitFor(
      "a second order, or the delivery marked delivered",
      async () => (published.length > 1 || (await delivery()).delivery.state === WebhookDeliveryState.DELIVERED ? true : undefined),
      5000,
      10,
    );
    expect(published.map((o) => o.id)).toEqual([first.id, first.id.replace(/-1$/, "-2")]);
    expect((await delivery()).delivery.state).toBe(WebhookDeliveryState.PENDING);
    delivered(published[1]!, "node-b2", 204, "");
    await w.settle();
    expect((await delivery()).delivery).toMatchObject({ state: WebhookDeliveryState.DELIVERED, lastNodeId: "node-b2", lastStatus: 204 });
  });

  it("a redelivery while the agent's attempt is in flight keeps it: its outcome is taken, no second order", async () => {
    await subscribe({ site: "b" });
    const w = worker();
    await w.dispatch();
    await w.deliver();
    await waitFor("the attempt's order", async () => ((await delivery()).attemptOrderId ? true : undefined), 5000, 10);
    await w.stop();
    const r = await delivery();
    clock += 1000;
    await redeliver({ store: view, keyRing, now }, r.delivery.webhookId, r.delivery.id);
    expect((await delivery()).attemptOrderId).toBe(published[0]!.id);
    const next = worker();
    expect(await next.deliver()).toBe(1);
    clock += 10;
    delivered(published[0]!, "node-b1", 200, "ok");
    await next.settle();
    expect(published).toHaveLength(1);
    expect((await delivery()).delivery).toMatchObject({ state: WebhookDeliveryState.DELIVERED, attempts: 1 });
  });

  it("an order nobody claimed before it expired fails the attempt, saying no node took it", async () => {
    await subscribe({ site: "nowhere" });
    const w = worker();
    await w.dispatch();
    await w.deliver();
    await waitFor("the attempt's order", async () => ((await delivery()).attemptOrderId ? true : undefined), 5000, 10);
    const order = published[0]!;
    end(order, {
      status: WorkOrderStatus.FAILED,
      result: { $typeName: "skipper.v1.WorkOrderResult", success: false, retriable: false, code: "EXPIRED", message: "expired" },
    } as Partial<WorkOrder>);
    await w.settle();
    const r = await delivery();
    expect(r.delivery.state).toBe(WebhookDeliveryState.PENDING);
    expect(r.delivery.lastFailure).toBe("no node matching site=nowhere with webhook.deliver took the attempt");
    expect(r.delivery.lastNodeId).toBe("");
    expect(r.attemptOrderId).toBeUndefined();
  });

  it("the attempt orders' own events are not delivered, even to a subscription to every event", async () => {
    await subscribe({ site: "b" });
    const w = worker();
    expect(await w.dispatch()).toBe(1);
    await w.deliver();
    await waitFor("the attempt's order", async () => ((await delivery()).attemptOrderId ? true : undefined), 5000, 10);
    delivered(published[0]!, "node-b1", 200, "ok");
    await w.settle();
    clock += 1000;
    // The order's work_order_created is in the history now; reading it queues nothing.
    expect(await w.dispatch()).toBe(0);
    expect((await store.listWebhookDeliveries({})).items).toHaveLength(1);
  });

  it("a node_selector is checked as labels; an update replaces it, an empty one hands delivery back to the controller", async () => {
    await expect(createWebhook(deps(), { url: URL_TEXT, eventTypes: ["*"], nodeSelector: { "bad key": "x" } })).rejects.toThrow(
      /node_selector/,
    );
    await expect(createWebhook(deps(), { url: URL_TEXT, eventTypes: ["*"], nodeSelector: { site: "not ok!" } })).rejects.toThrow(
      /node_selector\.site/,
    );
    const hook = (await createWebhook(deps(), { url: URL_TEXT, eventTypes: ["*"], nodeSelector: { site: "b" }, allowPrivateNetwork: true }))
      .webhook;
    expect(hook.nodeSelector).toEqual({ site: "b" });
    expect((await updateWebhook(deps(), hook.id, { description: "x" })).nodeSelector).toEqual({ site: "b" });
    expect((await updateWebhook(deps(), hook.id, { nodeSelector: { site: "a", zone: "1" } })).nodeSelector).toEqual({
      site: "a",
      zone: "1",
    });
    expect((await updateWebhook(deps(), hook.id, { nodeSelector: {} })).nodeSelector).toEqual({});
    expect((await getWebhook(deps(), hook.id)).nodeSelector).toEqual({});
  });

  it("the URL goes only to a claimer the node_selector still picks; an emptied or changed selector refuses it (WEBHOOK_UNAVAILABLE)", async () => {
    await subscribe({ site: "b" });
    const w = worker();
    await w.dispatch();
    await w.deliver();
    await waitFor("the attempt's order", async () => ((await delivery()).attemptOrderId ? true : undefined), 5000, 10);
    await w.stop();
    const hookId = (await delivery()).delivery.webhookId;
    const claimed = create(WorkOrderSchema, {
      ...published[0]!,
      status: WorkOrderStatus.RUNNING,
      claim: { $typeName: "skipper.v1.WorkOrderClaim", nodeId: "node-b1", fencingToken: 1n },
    });
    const nodes = Object.create(store) as Store;
    nodes.getResource = async (type, id) =>
      type === "node" && id === "node-b1" ? res("node", id, { case: "node", value: { labels: { site: "b", zone: "2" } } }) : undefined;
    const refusal = () => resolveOrderSecrets(nodes, keyRing, claimed).catch((e: unknown) => e);
    expect((await resolveOrderSecrets(nodes, keyRing, claimed)).webhookUrl).toBe(URL_TEXT);
    await updateWebhook(deps(), hookId, { nodeSelector: { site: "c" } });
    expect(await refusal()).toMatchObject({ code: "CONFLICT", details: { reason: "WEBHOOK_UNAVAILABLE", webhook_id: hookId } });
    expect(((await refusal()) as Error).message).toMatch(/node node-b1 no longer matches/);
    await updateWebhook(deps(), hookId, { nodeSelector: {} });
    expect(await refusal()).toMatchObject({ code: "CONFLICT", details: { reason: "WEBHOOK_UNAVAILABLE" } });
    expect(((await refusal()) as Error).message).toMatch(/no longer has a node_selector/);
    // A node that is gone is refused too; what its report must not carry back still names the URL and its path.
    claimed.claim!.nodeId = "node-gone";
    await updateWebhook(deps(), hookId, { nodeSelector: { site: "b" } });
    expect(await refusal()).toMatchObject({ details: { reason: "WEBHOOK_UNAVAILABLE" } });
    expect(await valuesHandedTo(nodes, keyRing, claimed)).toEqual([URL_TEXT, "/in/T0k3n"]);
  });
});
