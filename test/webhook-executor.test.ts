// The agent's deliver_webhook executor against a real HTTPS receiver on loopback: it POSTs the
// body with the headers as the controller built them, to the URL it is handed under the claim, and
// reports the answer (WebhookAttemptResult); redirects are not followed; a private destination is
// refused unsent unless the subscription allows it; the deadline holds; a URL that does not arrive
// fails the attempt. The URL never appears in what it reports.
import { create, toJsonString } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { WorkOrderActionSchema } from "../gen/skipper/v1/order_action_pb.js";
import { WorkOrderResultSchema, WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { deliverWebhook } from "../agent/executors/deliver-webhook.js";
import type { ExecContext } from "../agent/executors/executor.js";
import { startReceiver, type Receiver } from "./helpers/webhook-receiver.js";

const TOKEN = "path-token-only-the-node-knows";
let receiver: Receiver | undefined;

afterEach(async () => {
  await receiver?.close();
  receiver = undefined;
});

function order(r: Receiver, fields: { allowPrivateNetwork?: boolean; timeoutMs?: number } = {}) {
  const action = create(WorkOrderActionSchema, {
    kind: {
      case: "deliverWebhook",
      value: {
        webhookId: "wh1",
        deliveryId: "d1",
        urlHost: new URL(r.url).host,
        headers: { "content-type": "application/json", "x-skipper-delivery": "d1", "x-skipper-signature": "t=1,v1=ab" },
        body: new TextEncoder().encode('{"id":"d1"}'),
        caPem: r.caPem,
        allowPrivateNetwork: fields.allowPrivateNetwork ?? true,
        timeout: durationFromMs(fields.timeoutMs ?? 5000),
      },
    },
  });
  return create(WorkOrderSchema, { id: "whk-d1-1", type: WorkOrderType.DELIVER_WEBHOOK, action });
}

function ctx(url: () => Promise<string>, signal = new AbortController().signal): ExecContext {
  return { config: {} as ExecContext["config"], host: {} as ExecContext["host"], log: pino({ level: "silent" }), signal, webhookUrl: url };
}

describe("the deliver_webhook executor", () => {
  it("POSTs the body with the controller's headers and reports a 2xx as delivered", async () => {
    receiver = await startReceiver(`/in/${TOKEN}`);
    const r = receiver;
    const out = await deliverWebhook(
      order(r),
      ctx(async () => r.url),
    );
    expect(out.result).toMatchObject({ success: true, code: "WEBHOOK_DELIVERED" });
    expect(out.result.details!.webhook).toMatchObject({ status: 200, response: "ok", error: "" });
    expect(r.received).toHaveLength(1);
    expect(r.received[0]!.body).toBe('{"id":"d1"}');
    expect(r.received[0]!.headers).toMatchObject({ "x-skipper-delivery": "d1", "x-skipper-signature": "t=1,v1=ab" });
    expect(toJsonString(WorkOrderResultSchema, out.result)).not.toContain(TOKEN);
  });

  it("another status fails the attempt with the answer's start; a redirect is not followed", async () => {
    receiver = await startReceiver();
    const r = receiver;
    r.answer = (n) => (n === 0 ? 500 : 302);
    const failed = await deliverWebhook(
      order(r),
      ctx(async () => r.url),
    );
    expect(failed.result).toMatchObject({ success: false, code: "WEBHOOK_REJECTED" });
    expect(failed.result.details!.webhook).toMatchObject({ status: 500, response: "receiver says no (500)" });
    const moved = await deliverWebhook(
      order(r),
      ctx(async () => r.url),
    );
    expect(moved.result.details!.webhook!.status).toBe(302);
    expect(r.received).toHaveLength(2);
  });

  it("an answer quoting the URL keeps its host only: whole, its path alone, or cut at the 1 KiB edge", async () => {
    receiver = await startReceiver(`/hooks/${TOKEN}?k=v`);
    const r = receiver;
    const url = new URL(r.url);
    const echoes = [
      // The cut (1024 bytes) falls inside the token: without blanking first, its start would be kept.
      `${"x".repeat(1024 - (r.url.length - 8))}${r.url} and more`,
      `${"y".repeat(1024 - (r.url.length - 8))}${r.url}`.slice(0, 1024),
      `not found: ${url.pathname}${url.search} (try again)`,
      `${"z".repeat(1000)}${url.pathname}`,
    ];
    r.answer = () => 404;
    r.reply = (n) => echoes[n]!;
    for (let i = 0; i < echoes.length; i++) {
      const out = await deliverWebhook(
        order(r),
        ctx(async () => r.url),
      );
      const response = out.result.details!.webhook!.response;
      expect(out.result.code).toBe("WEBHOOK_REJECTED");
      expect(response.length).toBeGreaterThan(0);
      expect(Buffer.byteLength(response)).toBeLessThanOrEqual(1024 + url.host.length);
      expect(response).not.toContain(TOKEN.slice(0, 4));
      expect(response).not.toContain("/hooks/");
      expect(toJsonString(WorkOrderResultSchema, out.result)).not.toContain(TOKEN.slice(0, 4));
    }
    expect(r.received).toHaveLength(4);
  });

  it("a loopback receiver is refused unsent unless the subscription allows the private network", async () => {
    receiver = await startReceiver(`/in/${TOKEN}`);
    const r = receiver;
    const out = await deliverWebhook(
      order(r, { allowPrivateNetwork: false }),
      ctx(async () => r.url),
    );
    expect(out.result).toMatchObject({ success: false, code: "WEBHOOK_PRIVATE_ADDRESS" });
    expect(out.result.details!.webhook!.error).toMatch(
      /refused unsent: 127\.0\.0\.1 is not a public address \(allow_private_network is off\)/,
    );
    expect(r.received).toEqual([]);
    expect(toJsonString(WorkOrderResultSchema, out.result)).not.toContain(TOKEN);
  });

  it("a receiver that does not answer in time is no answer; a URL that does not arrive fails unsent", async () => {
    receiver = await startReceiver();
    const r = receiver;
    r.answer = () => 0;
    const slow = await deliverWebhook(
      order(r, { timeoutMs: 300 }),
      ctx(async () => r.url),
    );
    expect(slow.result).toMatchObject({ success: false, code: "WEBHOOK_NO_ANSWER" });
    expect(slow.result.details!.webhook).toMatchObject({ status: 0, error: "no answer within 300 ms" });
    const missing = await deliverWebhook(
      order(r),
      ctx(() => Promise.reject(new Error("webhook wh1 was deleted"))),
    );
    expect(missing.result).toMatchObject({ success: false, code: "WEBHOOK_URL_UNAVAILABLE" });
    expect(missing.result.message).toContain("webhook wh1 was deleted");
    expect(r.received).toHaveLength(1);
  });
});
