// Webhook pieces on their own: event names and patterns, the signature a receiver checks, and the
// worker's rounds on a file store with a fake clock and a fake receiver (queueing once, retry
// waits with full jitter, the dead letter, paused subscriptions).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { WebhookDeliveryState } from "../gen/skipper/v1/webhook_service_pb.js";
import type { WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { createLogger } from "../common/logging/logger.js";
import { recordEvents } from "../controller/events/event-recorder.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { PostgresStore } from "../controller/store/postgres/pg-store.js";
import type { Store } from "../controller/store/store.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import { SecretKeyRing } from "../controller/tls/secret-key-ring.js";
import { checkPatterns, dottedName, matchesAny } from "../controller/webhooks/event-names.js";
import { signatureHeader, verifySignature } from "../controller/webhooks/webhook-signature.js";
import { createWebhook, openSecrets, resealWebhooks, updateWebhook } from "../controller/webhooks/webhook-subscriptions.js";
import { WebhookWorker } from "../controller/webhooks/webhook-worker.js";
import type { AttemptOutcome, SendRequest } from "../controller/webhooks/webhook-sender.js";
import { waitFor } from "./helpers/processes.js";
import { hideUrl, hideUrlTail } from "../common/webhook-post.js";

describe("the URL in what is kept of an answer", () => {
  const url = new URL("https://hooks.example:8443/in/T0k3n?sig=abc");
  it("shows the host for the whole URL and blanks its path and query alone", () => {
    expect(hideUrl(`at ${url.href}; path /in/T0k3n?sig=abc`, url)).toBe("at hooks.example:8443; path [REDACTED]");
    expect(hideUrl("nothing here", url)).toBe("nothing here");
  });
  it("cuts a start of the URL past its host, or of its path, from the end; a start within the host stays", () => {
    expect(hideUrlTail("see https://hooks.example:8443/in/T0", url)).toBe("see hooks.example:8443");
    expect(hideUrlTail("see https://hooks.example:8443/", url)).toBe("see hooks.example:8443");
    expect(hideUrlTail("see https://hooks.exam", url)).toBe("see https://hooks.exam");
    expect(hideUrlTail("path /in/T0k", url)).toBe("path [REDACTED]");
    expect(hideUrlTail("a / b", url)).toBe("a / b");
  });
});

describe("event names and patterns", () => {
  it("a stored type gets its subject, a dot and what happened", () => {
    expect(dottedName("deployment_failed")).toBe("deployment.failed");
    expect(dottedName("work_order_failed")).toBe("work_order.failed");
    expect(dottedName("node_offline")).toBe("node.offline");
    expect(dottedName("rollout_node_failed")).toBe("rollout.node_failed");
    expect(dottedName("desired_state_changed")).toBe("desired_state.changed");
    expect(dottedName("something")).toBe("something");
  });

  it("`*` matches all, `subject.*` a subject, a name itself", () => {
    expect(matchesAny(["*"], "node.offline")).toBe(true);
    expect(matchesAny(["deployment.*"], "deployment.failed")).toBe(true);
    expect(matchesAny(["deployment.*"], "deployments.failed")).toBe(false);
    expect(matchesAny(["rollout.failed"], "rollout.failed")).toBe(true);
    expect(matchesAny(["rollout.failed"], "rollout.node_failed")).toBe(false);
  });

  it("patterns other than names, `subject.*` and `*` are refused", () => {
    expect(checkPatterns(["deployment.*", "*", "node.offline", "node.offline"])).toEqual(["deployment.*", "*", "node.offline"]);
    for (const bad of [[], ["deploy*"], ["*.failed"], ["a.b.c"], ["Node.offline"], [""]]) expect(() => checkPatterns(bad)).toThrow();
  });
});

describe("signatures", () => {
  const at = new Date("2026-11-24T10:00:00Z");
  it("verify with the secret, within the tolerance, for the very body", () => {
    const header = signatureHeader("s3cret-s3cret-s3cret", at, '{"id":"1"}');
    expect(header).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    expect(verifySignature("s3cret-s3cret-s3cret", header, '{"id":"1"}', at)).toBe(true);
    expect(verifySignature("s3cret-s3cret-s3cret", header, '{"id":"2"}', at)).toBe(false);
    expect(verifySignature("other-other-other-1", header, '{"id":"1"}', at)).toBe(false);
    // A replay ten minutes later fails the time check.
    expect(verifySignature("s3cret-s3cret-s3cret", header, '{"id":"1"}', new Date(at.getTime() + 600_000))).toBe(false);
    expect(verifySignature("s3cret-s3cret-s3cret", "garbage", '{"id":"1"}', at)).toBe(false);
  });
});

// The worker on each store: the file store, and PostgreSQL when the run has one.
const BACKENDS = pgUrl() ? ["file", "postgres"] : ["file"];
let databases = 0;

describe.each(BACKENDS)("the webhook worker on the %s store", (backend) => {
  let dir: string;
  let store: Store;
  let keyRing: SecretKeyRing;
  let clock: number;
  const now = () => new Date(clock);
  const { logger } = createLogger({ service: "test", stdout: false, level: "error" });
  let answers: number[];
  let sent: SendRequest[];
  const published: WorkOrder[] = [];
  const feed = { publish: (o: WorkOrder) => published.push(o) };
  const send = async (req: SendRequest): Promise<AttemptOutcome> => {
    sent.push(req);
    const status = answers.shift() ?? 200;
    return { status, text: status === 200 ? "ok" : "nope" };
  };
  const worker = (retryForMs = 10_000) =>
    new WebhookWorker({
      store,
      keyRing,
      logger,
      now,
      feed,
      send,
      random: () => 1,
      settings: { backoffBaseMs: 100, backoffCapMs: 1000, retryForMs },
    });
  const deps = () => ({ store, keyRing, now });
  const event = (id: string, tenantId = "t1") =>
    recordEvents(store, [{ id, type: "deployment_failed", requestId: "r", correlationId: "c", tenantId, at: now() }]);

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-webhook-units-"));
    store =
      backend === "file"
        ? new FileStore(dir)
        : new PostgresStore(await freshDatabase(`webhooks_${process.pid}_${databases++}`), { maxConnections: 5 });
    await store.open();
    keyRing = await SecretKeyRing.load({ dataDir: dir });
    clock = Date.parse("2026-11-24T10:00:00Z");
    answers = [];
    sent = [];
  });
  afterEach(async () => {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("queues an event once per matching subscription, however often the history is read", async () => {
    const a = (await createWebhook(deps(), { url: "https://a.example/x", eventTypes: ["deployment.*"] })).webhook;
    await createWebhook(deps(), { url: "https://b.example/x", eventTypes: ["node.*"] });
    const c = (await createWebhook(deps(), { url: "https://c.example/x", eventTypes: ["*"], tenantId: "t2" })).webhook;
    clock += 1000;
    await event("ev1");
    await event("ev2", "t2");
    expect(await worker().dispatch()).toBe(3);
    expect(await worker().dispatch()).toBe(0);
    const queued = (await store.listWebhookDeliveries({})).items.map((r) => [r.delivery.webhookId, r.delivery.eventId]);
    expect(queued.sort()).toEqual(
      [
        [a.id, "ev1"],
        [a.id, "ev2"],
        [c.id, "ev2"],
      ].sort(),
    );
  });

  it("retries wait base * 2^n at most, and the dead letter comes when the next wait would pass the retry period", async () => {
    await createWebhook(deps(), { url: "https://a.example/x", eventTypes: ["*"], secret: "0123456789abcdef" });
    clock += 1000;
    await event("ev1");
    const w = worker(1000);
    await w.dispatch();
    answers = [500, 500, 500, 500, 500];
    const waits: number[] = [];
    for (let round = 0; round < 5; round++) {
      await w.deliver();
      await w.settle();
      const d = (await store.listWebhookDeliveries({})).items[0]!.delivery;
      if (d.state !== WebhookDeliveryState.PENDING) break;
      const wait = timestampDate(d.nextAttemptAt!).getTime() - clock;
      waits.push(wait);
      clock += wait;
    }
    expect(waits).toEqual([100, 200, 400]);
    const d = (await store.listWebhookDeliveries({})).items[0]!.delivery;
    expect(d.state).toBe(WebhookDeliveryState.DEAD_LETTERED);
    expect(d.attempts).toBe(4);
    expect(d.lastFailure).toBe("500: nope");
    expect(sent[0]!.url.href).toBe("https://a.example/x");
    expect(verifySignature("0123456789abcdef", sent[0]!.headers["x-skipper-signature"]!, sent[0]!.body, now())).toBe(true);
  });

  it("a receiver that hangs holds at most two attempts, and the other subscriptions' deliveries go meanwhile", async () => {
    await createWebhook(deps(), { url: "https://hangs.example/x", eventTypes: ["*"] });
    await createWebhook(deps(), { url: "https://fine.example/x", eventTypes: ["*"] });
    clock += 1000;
    for (const id of ["ev1", "ev2", "ev3"]) await event(id);
    const hanging: Array<() => void> = [];
    const w = new WebhookWorker({
      store,
      keyRing,
      logger,
      now,
      feed,
      send: (req) =>
        req.url.host === "hangs.example" ? new Promise((resolve) => hanging.push(() => resolve({ status: 200, text: "" }))) : send(req),
    });
    expect(await w.dispatch()).toBe(6);
    expect(await w.deliver()).toBe(4);
    expect(hanging).toHaveLength(2);
    expect(sent.map((r) => r.url.host)).toEqual(["fine.example", "fine.example"]);
    const delivered = async () =>
      (await store.listWebhookDeliveries({ state: WebhookDeliveryState.DELIVERED })).items.length === 2 ? true : undefined;
    await waitFor("the two sent to the fine receiver recorded", delivered, 10_000, 10);
    // The hanging receiver still holds its two slots; the fine one's third delivery goes now.
    expect(await w.deliver()).toBe(1);
    expect(sent.map((r) => r.url.host)).toEqual(["fine.example", "fine.example", "fine.example"]);
    for (const release of hanging) release();
    await w.settle();
  });

  it("an attempt that ends while the next look for due deliveries reads is not sent again by that look", async () => {
    await createWebhook(deps(), { url: "https://a.example/x", eventTypes: ["*"] });
    clock += 1000;
    await event("ev1");
    let answer: (() => void) | undefined;
    let reading: (() => void) | undefined;
    const read = new Promise<void>((r) => (reading = r));
    let gate: (() => void) | undefined;
    const gated = Object.create(store) as Store;
    let looks = 0;
    gated.dueWebhookDeliveries = async (...a: Parameters<Store["dueWebhookDeliveries"]>) => {
      const due = await store.dueWebhookDeliveries(...a);
      if (++looks === 2) {
        // The second look has read the delivery as pending; it goes on once the attempt ended.
        reading!();
        await new Promise<void>((r) => (gate = r));
      }
      return due;
    };
    const w = new WebhookWorker({
      store: gated,
      keyRing,
      logger,
      now,
      feed,
      send: (req) => {
        sent.push(req);
        return new Promise((resolve) => (answer = () => resolve({ status: 200, text: "ok" })));
      },
    });
    expect(await w.dispatch()).toBe(1);
    expect(await w.deliver()).toBe(1);
    const second = w.deliver();
    await read;
    answer!();
    await w.settle();
    expect((await store.listWebhookDeliveries({ state: WebhookDeliveryState.DELIVERED })).items).toHaveLength(1);
    gate!();
    expect(await second).toBe(0);
    await w.settle();
    expect(sent).toHaveLength(1);
  });

  it("after a key rotation, re-sealing puts every subscription under the new key, and it still opens once the old one is retired", async () => {
    const hook = (await createWebhook(deps(), { url: "https://a.example/x?t=1", eventTypes: ["*"], secret: "0123456789abcdef" })).webhook;
    const old = keyRing.primaryId;
    await keyRing.rotate();
    expect(await resealWebhooks(deps())).toBe(1);
    expect(await resealWebhooks(deps())).toBe(0);
    const r = (await store.getWebhook(hook.id))!;
    expect(SecretKeyRing.keyIdOf(r.sealedUrl)).not.toBe(old);
    await keyRing.retire();
    expect(openSecrets(keyRing, r).url.href).toBe("https://a.example/x?t=1");
    expect(openSecrets(keyRing, r).secret).toBe("0123456789abcdef");
  });

  it("a paused subscription sends nothing: its deliveries wait, and go once it is resumed", async () => {
    const hook = (await createWebhook(deps(), { url: "https://a.example/x", eventTypes: ["*"] })).webhook;
    clock += 1000;
    await event("ev1");
    const w = worker();
    await w.dispatch();
    await updateWebhook(deps(), hook.id, { paused: true });
    clock += 1000;
    await event("ev2");
    expect(await w.dispatch()).toBe(1);
    expect(await w.deliver()).toBe(0);
    expect((await store.webhookDeliveryStats(hook.id)).backlog).toBe(2);
    await updateWebhook(deps(), hook.id, { paused: false });
    expect(await w.deliver()).toBe(2);
    await w.settle();
    expect(sent).toHaveLength(2);
    expect((await store.getWebhook(hook.id))!.sealedUrl).not.toContain("a.example");
  });
});
