// deliver_webhook: one attempt at a webhook delivery, made from this host for a subscription whose
// node_selector picks it (endpoints only this network reaches). The controller built and signed
// the request; it is sent as given.
//
//   1. the action is there, its deadline in range                  -> WEBHOOK_INVALID
//   2. the URL, asked for under the order's claim (GetWorkOrderSecrets webhook_url; never in the
//      order): an https:// URL                                      -> WEBHOOK_URL_UNAVAILABLE
//   3. POST body with the headers (common/webhook-post.ts: no redirects followed, ca_pem trusted
//      when given, the deadline, at most 1 KiB of the answer kept); unless allow_private_network,
//      a loopback, private or link-local destination (the URL's or what its name resolves to)
//      is refused unsent, as the controller refuses it              -> WEBHOOK_PRIVATE_ADDRESS
//   4. the answer: 2xx                                              -> WEBHOOK_DELIVERED
//      another status                                               -> WEBHOOK_REJECTED
//      none (refused, timed out, TLS)                               -> WEBHOOK_NO_ANSWER
// The result carries WebhookAttemptResult (status, the answer's start, duration, error); the
// controller makes it the attempt's outcome and decides on retries. The URL never appears in it:
// a text quoting it shows its host only.
import { create } from "@bufbuild/protobuf";
import { durationMs } from "@bufbuild/protobuf/wkt";
import { WebhookAttemptResultSchema } from "../../gen/skipper/v1/work_order_pb.js";
import { postWebhook } from "../../common/webhook-post.js";
import { abortReason, executorOf, orderOutcome } from "./executor.js";

// What is kept of the receiver's answer.
const KEEP_BYTES = 1024;
const MAX_TIMEOUT_MS = 5 * 60_000;
// Headers the request sets itself.
const OWN_HEADERS = new Set(["content-length", "host", "transfer-encoding", "connection"]);

export const deliverWebhook = executorOf("deliverWebhook", async (action, _order, ctx) => {
  const started = performance.now();
  const fail = (code: string, message: string, error = message) =>
    orderOutcome(code, message, started, { success: false, details: { webhook: { status: 0, error } } });
  if (!action) return fail("WEBHOOK_INVALID", "the order carries no deliver_webhook action");
  const timeoutMs = action.timeout ? durationMs(action.timeout) : 10_000;
  if (timeoutMs <= 0 || timeoutMs > MAX_TIMEOUT_MS)
    return fail("WEBHOOK_INVALID", `timeout must be within 5 minutes (got ${timeoutMs} ms)`);
  let url: URL;
  try {
    if (!ctx.webhookUrl) throw new Error("this agent cannot ask for it");
    url = new URL(await ctx.webhookUrl());
  } catch (e) {
    return fail("WEBHOOK_URL_UNAVAILABLE", `the subscription's URL did not arrive: ${(e as Error).message}`);
  }
  if (url.protocol !== "https:") return fail("WEBHOOK_URL_UNAVAILABLE", `the URL of ${action.urlHost} is not https://`);
  const headers = Object.fromEntries(Object.entries(action.headers).filter(([k]) => !OWN_HEADERS.has(k.toLowerCase())));
  const answer = await postWebhook({
    url,
    body: action.body,
    headers,
    caPem: action.caPem || undefined,
    timeoutMs,
    signal: ctx.signal,
    stoppedText: `the attempt was stopped (${abortReason(ctx.signal)})`,
    allowPrivateNetwork: action.allowPrivateNetwork,
    keepBytes: KEEP_BYTES,
  });
  // The URL is a secret of the subscription: postWebhook shows its host only (hideUrl), before the cut.
  const text = answer.text;
  const durationMsTaken = BigInt(Math.round(performance.now() - started));
  const webhook = create(WebhookAttemptResultSchema, {
    status: answer.status,
    response: answer.status > 0 ? text : "",
    error: answer.status > 0 ? "" : text,
    durationMs: durationMsTaken,
  });
  const to = action.urlHost || url.host;
  if (answer.status >= 200 && answer.status < 300) {
    return orderOutcome("WEBHOOK_DELIVERED", `${to} answered ${answer.status}`, started, { success: true, details: { webhook } });
  }
  if (answer.status > 0) {
    return orderOutcome("WEBHOOK_REJECTED", `${to} answered ${answer.status}`, started, { success: false, details: { webhook } });
  }
  const privateNet = /^refused unsent|PRIVATE_ADDRESS/.test(text);
  const code = privateNet ? "WEBHOOK_PRIVATE_ADDRESS" : "WEBHOOK_NO_ANSWER";
  return orderOutcome(code, `no answer from ${to}: ${text}`, started, { success: false, details: { webhook } });
});
