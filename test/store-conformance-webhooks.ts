// The webhook part of the store conformance suite (store-conformance.ts calls it for every backend).
import { create, toJson } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { WebhookDeliverySchema, WebhookDeliveryState, WebhookSchema, type WebhookDelivery } from "../gen/skipper/v1/webhook_service_pb.js";
import type { Store, WebhookDeliveryRecord, WebhookRecord } from "../controller/store/store.js";

const T0 = Date.parse("2026-11-22T10:00:00.000Z");
const at = (offsetMs: number) => new Date(T0 + offsetMs);

function hook(id: string, offsetMs = 0): WebhookRecord {
  return {
    webhook: create(WebhookSchema, {
      id,
      urlHost: "hooks.example.com",
      eventTypes: ["deployment.*"],
      createdAt: timestampFromDate(at(offsetMs)),
      updatedAt: timestampFromDate(at(offsetMs)),
    }),
    sealedUrl: `sealed-url-${id}`,
    sealedSecret: `sealed-secret-${id}`,
  };
}

function delivery(
  id: string,
  webhookId: string,
  offsetMs: number,
  fields: Omit<Partial<WebhookDelivery>, "$typeName" | "$unknown"> = {},
): WebhookDeliveryRecord {
  return {
    delivery: create(WebhookDeliverySchema, {
      id,
      webhookId,
      eventId: `ev-${id}`,
      eventType: "deployment.failed",
      state: WebhookDeliveryState.PENDING,
      createdAt: timestampFromDate(at(offsetMs)),
      nextAttemptAt: timestampFromDate(at(offsetMs)),
      ...fields,
    }),
    event: { id: `ev-${id}`, type: "deployment_failed" },
  };
}

const ids = (records: WebhookDeliveryRecord[]) => records.map((r) => r.delivery.id);

/** Webhook subscriptions, deliveries and the dispatcher's cursor. */
export function describeWebhookConformance(current: () => Store, reopen: () => Promise<boolean>): void {
  describe("webhooks", () => {
    it("subscriptions are stored, replaced, listed oldest first and deleted with their deliveries", async () => {
      const store = current();
      await store.putWebhook(hook("wh2", 10));
      await store.putWebhook(hook("wh1", 0));
      const changed = hook("wh2", 10);
      changed.webhook.paused = true;
      await store.putWebhook(changed);
      const got = await store.getWebhook("wh2");
      expect(toJson(WebhookSchema, got!.webhook)).toEqual(toJson(WebhookSchema, changed.webhook));
      expect(got!.sealedUrl).toBe("sealed-url-wh2");
      expect((await store.listWebhooks()).map((r) => r.webhook.id)).toEqual(["wh1", "wh2"]);
      await store.enqueueWebhookDeliveries([delivery("d1", "wh2", 0), delivery("d2", "wh1", 0)]);
      expect(await store.deleteWebhook("wh2")).toBe(true);
      expect(await store.deleteWebhook("wh2")).toBe(false);
      expect(await store.getWebhook("wh2")).toBeUndefined();
      expect(await store.getWebhookDelivery("d1")).toBeUndefined();
      expect(ids((await store.listWebhookDeliveries({})).items)).toEqual(["d2"]);
    });

    it("queueing a delivery again is a no-op, whatever its state", async () => {
      const store = current();
      await store.putWebhook(hook("wh1"));
      expect(await store.enqueueWebhookDeliveries([delivery("d1", "wh1", 0), delivery("d2", "wh1", 5)])).toBe(2);
      const sent = (await store.getWebhookDelivery("d1"))!.delivery;
      sent.state = WebhookDeliveryState.DELIVERED;
      sent.deliveredAt = timestampFromDate(at(1));
      expect(await store.updateWebhookDelivery(sent)).toBe(true);
      expect(await store.enqueueWebhookDeliveries([delivery("d1", "wh1", 0), delivery("d3", "wh1", 7)])).toBe(1);
      expect((await store.getWebhookDelivery("d1"))!.delivery.state).toBe(WebhookDeliveryState.DELIVERED);
      expect((await store.getWebhookDelivery("d1"))!.event).toEqual({ id: "ev-d1", type: "deployment_failed" });
      expect(await store.updateWebhookDelivery(delivery("gone", "wh1", 0).delivery)).toBe(false);
      expect(await store.getWebhookDelivery("gone")).toBeUndefined();
    });

    it("a subscription's node_selector and a delivery's attempt in flight are kept, across a reopen", async () => {
      const store = current();
      const agents = hook("wh1");
      agents.webhook.nodeSelector = { site: "b", zone: "1" };
      await store.putWebhook(agents);
      await store.enqueueWebhookDeliveries([delivery("d1", "wh1", 0), delivery("d2", "wh1", 5)]);
      expect((await store.getWebhookDelivery("d1"))!.attemptOrderId).toBeUndefined();
      // The attempt's order is remembered with the delivery, in the same write.
      const d1 = (await store.getWebhookDelivery("d1"))!.delivery;
      d1.lastNodeId = "node-b1";
      expect(await store.updateWebhookDelivery(d1, "whk-d1-1")).toBe(true);
      const read = async () => [await store.getWebhookDelivery("d1"), (await store.dueWebhookDeliveries(at(10), 10))[0]];
      for (const r of await read()) expect(r).toMatchObject({ attemptOrderId: "whk-d1-1", delivery: { id: "d1", lastNodeId: "node-b1" } });
      expect((await store.listWebhookDeliveries({})).items.map((r) => r.attemptOrderId)).toEqual(["whk-d1-1", undefined]);
      if (await reopen()) {
        const again = current();
        expect((await again.getWebhookDelivery("d1"))!.attemptOrderId).toBe("whk-d1-1");
        expect((await again.getWebhook("wh1"))!.webhook.nodeSelector).toEqual({ site: "b", zone: "1" });
      }
      const store2 = current();
      expect((await store2.getWebhook("wh1"))!.webhook.nodeSelector).toEqual({ site: "b", zone: "1" });
      // Its outcome recorded: no attempt in flight any more.
      const done = (await store2.getWebhookDelivery("d1"))!.delivery;
      done.state = WebhookDeliveryState.DELIVERED;
      expect(await store2.updateWebhookDelivery(done)).toBe(true);
      expect((await store2.getWebhookDelivery("d1"))!.attemptOrderId).toBeUndefined();
      expect((await store2.getWebhookDelivery("d1"))!.delivery.lastNodeId).toBe("node-b1");
    });

    it("deliveries list by creation, filtered and paged; due ones come earliest first", async () => {
      const store = current();
      await store.putWebhook(hook("wh1"));
      await store.putWebhook(hook("wh2"));
      await store.enqueueWebhookDeliveries([
        delivery("d3", "wh1", 30, { nextAttemptAt: timestampFromDate(at(100)) }),
        delivery("d1", "wh1", 10, { nextAttemptAt: timestampFromDate(at(50)) }),
        delivery("d2", "wh2", 20, { nextAttemptAt: timestampFromDate(at(40)) }),
        delivery("d4", "wh1", 40, { state: WebhookDeliveryState.DEAD_LETTERED }),
      ]);
      const first = await store.listWebhookDeliveries({ webhookId: "wh1", pageSize: 2 });
      expect(ids(first.items)).toEqual(["d1", "d3"]);
      const second = await store.listWebhookDeliveries({ webhookId: "wh1", pageSize: 2, pageToken: first.nextPageToken });
      expect(ids(second.items)).toEqual(["d4"]);
      expect(second.nextPageToken).toBe("");
      expect(ids((await store.listWebhookDeliveries({ state: WebhookDeliveryState.DEAD_LETTERED })).items)).toEqual(["d4"]);
      expect(ids(await store.dueWebhookDeliveries(at(60), 10))).toEqual(["d2", "d1"]);
      expect(ids(await store.dueWebhookDeliveries(at(200), 2))).toEqual(["d2", "d1"]);
      expect(ids(await store.dueWebhookDeliveries(at(0), 10))).toEqual([]);
      expect(ids(await store.dueWebhookDeliveries(at(200), 10, ["wh2"]))).toEqual(["d1", "d3"]);
    });

    it("a subscription's status counts its backlog and dead letters and names its last success and failure", async () => {
      const store = current();
      await store.putWebhook(hook("wh1"));
      await store.enqueueWebhookDeliveries([
        delivery("d1", "wh1", 0, {
          state: WebhookDeliveryState.DELIVERED,
          deliveredAt: timestampFromDate(at(30)),
          lastFailureAt: timestampFromDate(at(20)),
          lastFailure: "503: busy",
        }),
        delivery("d2", "wh1", 1, {
          state: WebhookDeliveryState.DEAD_LETTERED,
          lastFailureAt: timestampFromDate(at(25)),
          lastFailure: "500: no",
        }),
        delivery("d3", "wh1", 2),
        delivery("d4", "other", 3),
      ]);
      const stats = await store.webhookDeliveryStats("wh1");
      expect(stats).toEqual({ backlog: 1, deadLettered: 1, lastSuccessAt: at(30), lastFailureAt: at(25), lastFailure: "500: no" });
      expect(await store.webhookDeliveryStats("none")).toEqual({ backlog: 0, deadLettered: 0, lastFailure: "" });
    });

    it("retention deletes delivered and dead-lettered deliveries created before a time, never pending ones", async () => {
      const store = current();
      await store.putWebhook(hook("wh1"));
      await store.enqueueWebhookDeliveries([
        delivery("d1", "wh1", 0, { state: WebhookDeliveryState.DELIVERED }),
        delivery("d2", "wh1", 1, { state: WebhookDeliveryState.DEAD_LETTERED }),
        delivery("d3", "wh1", 2),
        delivery("d4", "wh1", 50, { state: WebhookDeliveryState.DELIVERED }),
      ]);
      expect(await store.pruneWebhookDeliveries(at(10))).toBe(2);
      expect(await store.pruneWebhookDeliveries(at(10))).toBe(0);
      expect(ids((await store.listWebhookDeliveries({})).items)).toEqual(["d3", "d4"]);
      expect(ids(await store.dueWebhookDeliveries(at(100), 10))).toEqual(["d3"]);
    });

    it("the dispatcher's cursor is absent at first, then the last time put", async () => {
      const store = current();
      expect(await store.getWebhookCursor()).toBeUndefined();
      await store.putWebhookCursor(at(10));
      await store.putWebhookCursor(at(20));
      expect(await store.getWebhookCursor()).toEqual(at(20));
    });

    it("subscriptions, deliveries and the cursor survive reopening", async (ctx) => {
      let store = current();
      await store.putWebhook(hook("wh1"));
      await store.enqueueWebhookDeliveries([delivery("d1", "wh1", 0), delivery("d2", "wh1", 5)]);
      const failed = (await store.getWebhookDelivery("d2"))!.delivery;
      failed.attempts = 2;
      failed.lastFailure = "503: busy";
      await store.updateWebhookDelivery(failed);
      await store.putWebhookCursor(at(9));
      if (!(await reopen())) return ctx.skip();
      store = current();
      expect(toJson(WebhookSchema, (await store.getWebhook("wh1"))!.webhook)).toEqual(toJson(WebhookSchema, hook("wh1").webhook));
      expect(toJson(WebhookDeliverySchema, (await store.getWebhookDelivery("d2"))!.delivery)).toEqual(
        toJson(WebhookDeliverySchema, failed),
      );
      expect(ids(await store.dueWebhookDeliveries(at(10), 10))).toEqual(["d1", "d2"]);
      expect(await store.getWebhookCursor()).toEqual(at(9));
    });
  });
}
