// Webhooks against a real local HTTPS receiver, with the controller in process (and, for the
// kill -9 case, as a process): signed deliveries verify, retries end in one delivery, a receiver
// that always fails ends in the dead letter and can be redelivered to, a hanging receiver does not
// hold up the calls that cause events, and secrets stay sealed on disk.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WebhookDeliveryState, WebhookService, type WebhookDelivery } from "../gen/skipper/v1/webhook_service_pb.js";
import { verifySignature } from "../controller/webhooks/webhook-signature.js";
import { build } from "../controller/server/build.js";
import { PgCoordination } from "../controller/store/postgres/pg-coordination.js";
import { PostgresStore } from "../controller/store/postgres/pg-store.js";
import { SecretKeyRing } from "../controller/tls/secret-key-ring.js";
import { createLogger } from "../common/logging/logger.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";
import { filesContaining } from "./helpers/files.js";
import { freePort, startControllerProcess, waitFor } from "./helpers/processes.js";
import { startReceiver, type Receiver } from "./helpers/webhook-receiver.js";
import { send } from "../controller/webhooks/webhook-sender.js";
import { hostname } from "node:os";

const SECRET = "shared-secret-for-tests-0123456789";
const FAST = { pollMs: 20, backoffBaseMs: 20, backoffCapMs: 100, attemptTimeoutMs: 5000, lookBackMs: 2000 };

function tenant(id: string) {
  return create(ResourceSchema, { id, resourceType: "tenant", desiredState: { kind: { case: "tenant", value: { displayName: id } } } });
}

let tc: TestController;
let receiver: Receiver;

beforeAll(async () => {
  tc = await startController({ webhooks: { ...FAST, retryForMs: 60_000 } });
});
afterAll(async () => {
  await tc.stop();
});
afterEach(async () => {
  await receiver?.close();
});

async function subscribe(c: TestController, r: Receiver, eventTypes = ["resource.*"], tenantId = "") {
  const created = await c
    .client(WebhookService, { admin: true })
    .createWebhook({ url: r.url, eventTypes, tenantId, secret: SECRET, caPem: r.caPem, allowPrivateNetwork: true });
  return created.webhook!;
}

/** The deliveries of a subscription once `ok` holds for them (polled, with a deadline). */
async function deliveriesWhen(c: TestController, webhookId: string, ok: (ds: WebhookDelivery[]) => boolean): Promise<WebhookDelivery[]> {
  const hooks = c.client(WebhookService, { admin: true });
  return waitFor(
    "webhook deliveries",
    async () => {
      const ds = (await hooks.listWebhookDeliveries({ webhookId })).deliveries;
      return ok(ds) ? ds : undefined;
    },
    20_000,
    20,
  );
}

describe("webhooks", () => {
  it("a delivery is signed over its time and body, and the receiver's check passes; URL and secret never sit in clear on disk", async () => {
    receiver = await startReceiver();
    const hook = await subscribe(tc, receiver);
    expect(hook.urlHost).toBe(new URL(receiver.url).host);
    await tc.client(ResourceService, { admin: true }).createResource({ resourceType: "tenant", resource: tenant("signed") });
    const [d] = await deliveriesWhen(tc, hook.id, (ds) => ds.some((x) => x.state === WebhookDeliveryState.DELIVERED));
    const got = receiver.received.find((r) => r.headers["x-skipper-delivery"] === d!.id)!;
    expect(verifySignature(SECRET, String(got.headers["x-skipper-signature"]), got.body, new Date())).toBe(true);
    expect(verifySignature("another-secret-0123456789", String(got.headers["x-skipper-signature"]), got.body, new Date())).toBe(false);
    expect(verifySignature(SECRET, String(got.headers["x-skipper-signature"]), got.body.replace("signed", "other!"), new Date())).toBe(
      false,
    );
    const body = JSON.parse(got.body) as { id: string; event: { type: string; resource_id: string }; timestamp: string };
    expect(body.id).toBe(d!.id);
    expect(body.event).toMatchObject({ type: "resource_created", resource_id: "signed" });
    expect(d!.eventType).toBe("resource.created");
    const status = (await tc.client(WebhookService, { admin: true }).getWebhook({ id: hook.id })).webhook!.status!;
    expect(status.lastSuccessAt).toBeDefined();
    expect(status.backlog).toBe(0n);
    expect(await filesContaining(tc.dataDir, "secret-path-token-31415")).toEqual([]);
    expect(await filesContaining(tc.dataDir, SECRET)).toEqual([]);
  });

  it("a receiver that fails 3 times and then recovers gets the event once", async () => {
    receiver = await startReceiver();
    receiver.answer = (n) => (n < 3 ? 503 : 200);
    const hook = await subscribe(tc, receiver, ["resource.created"], "flaky");
    await tc.client(ResourceService, { admin: true }).createResource({ resourceType: "tenant", resource: tenant("flaky") });
    const [d] = await deliveriesWhen(tc, hook.id, (ds) => ds.some((x) => x.state === WebhookDeliveryState.DELIVERED));
    expect(d!.attempts).toBe(4);
    expect(d!.lastFailure).toMatch(/^503: receiver says no/);
    expect(receiver.received.map((r) => r.status)).toEqual([503, 503, 503, 200]);
    expect(new Set(receiver.received.map((r) => r.headers["x-skipper-delivery"]))).toEqual(new Set([d!.id]));
    const status = (await tc.client(WebhookService, { admin: true }).getWebhook({ id: hook.id })).webhook!.status!;
    expect(status.lastFailure).toMatch(/^503/);
    expect(status.lastSuccessAt).toBeDefined();
  });

  it("patterns and the tenant filter choose the events: another tenant's and another subject's are not queued", async () => {
    receiver = await startReceiver();
    const mine = await subscribe(tc, receiver, ["resource.created"], "chosen");
    const other = await subscribe(tc, receiver, ["deployment.*", "node.offline"]);
    const rs = tc.client(ResourceService, { admin: true });
    await rs.createResource({ resourceType: "tenant", resource: tenant("not-chosen") });
    await rs.createResource({ resourceType: "tenant", resource: tenant("chosen") });
    const ds = await deliveriesWhen(tc, mine.id, (x) => x.some((d) => d.state === WebhookDeliveryState.DELIVERED));
    expect(ds).toHaveLength(1);
    const hooks = tc.client(WebhookService, { admin: true });
    expect((await hooks.listWebhookDeliveries({ webhookId: other.id })).deliveries).toEqual([]);
  });

  it("a receiver that never answers does not hold up the calls that cause events", async () => {
    receiver = await startReceiver();
    receiver.answer = () => 0;
    await subscribe(tc, receiver, ["*"]);
    const rs = tc.client(ResourceService, { admin: true });
    await rs.createResource({ resourceType: "tenant", resource: tenant("slow-1") });
    await waitFor("an attempt under way", async () => (receiver.received.length > 0 ? true : undefined), 20_000, 20);
    // An attempt hangs now; more changes are answered all the same (each well within the attempt's deadline).
    for (const id of ["slow-2", "slow-3"]) {
      const started = Date.now();
      await rs.createResource({ resourceType: "tenant", resource: tenant(id) });
      expect(Date.now() - started).toBeLessThan(FAST.attemptTimeoutMs);
    }
  });
});

describe("the dead letter", () => {
  let dc: TestController;
  beforeAll(async () => {
    dc = await startController({ webhooks: { ...FAST, retryForMs: 300 } });
  });
  afterAll(async () => {
    await dc.stop();
  });

  it("a receiver that always fails ends in the dead letter with its last response, and a redelivery reaches it once it recovers", async () => {
    receiver = await startReceiver();
    receiver.answer = () => 500;
    const hook = await subscribe(dc, receiver, ["resource.*"]);
    await dc.client(ResourceService, { admin: true }).createResource({ resourceType: "tenant", resource: tenant("doomed") });
    const [dead] = await deliveriesWhen(dc, hook.id, (ds) => ds.some((x) => x.state === WebhookDeliveryState.DEAD_LETTERED));
    expect(dead!.lastStatus).toBe(500);
    expect(dead!.lastResponse).toBe("receiver says no (500)");
    expect(dead!.attempts).toBeGreaterThan(1);
    const hooks = dc.client(WebhookService, { admin: true });
    const listed = await hooks.listWebhookDeliveries({ webhookId: hook.id, state: WebhookDeliveryState.DEAD_LETTERED });
    expect(listed.deliveries.map((d) => d.id)).toEqual([dead!.id]);
    expect((await hooks.getWebhook({ id: hook.id })).webhook!.status).toMatchObject({ deadLettered: 1n, backlog: 0n });

    receiver.answer = () => 200;
    const before = receiver.received.length;
    await hooks.redeliverWebhookDelivery({ webhookId: hook.id, id: dead!.id });
    const [done] = await deliveriesWhen(dc, hook.id, (ds) => ds.some((x) => x.state === WebhookDeliveryState.DELIVERED));
    expect(done!.id).toBe(dead!.id);
    expect(receiver.received.slice(before).map((r) => r.status)).toEqual([200]);
  });
});

describe("a controller killed with deliveries queued", () => {
  it("loses none: after kill -9 and a start on the same data, every event reaches the receiver", async () => {
    receiver = await startReceiver();
    receiver.answer = () => 503;
    const port = await freePort();
    const env = { SKIPPER_WEBHOOK_BACKOFF: "50ms" };
    let cp = await startControllerProcess({ port, env });
    try {
      const hooks = cp.admin(WebhookService);
      const hook = (
        await hooks.createWebhook({
          url: receiver.url,
          eventTypes: ["resource.created"],
          secret: SECRET,
          caPem: receiver.caPem,
          allowPrivateNetwork: true,
        })
      ).webhook!;
      const rs = cp.admin(ResourceService);
      for (const id of ["k1", "k2", "k3"]) await rs.createResource({ resourceType: "tenant", resource: tenant(id) });
      await waitFor(
        "three deliveries queued and failing",
        async () => {
          const ds = (await hooks.listWebhookDeliveries({ webhookId: hook.id })).deliveries;
          return ds.length === 3 && ds.every((d) => d.state === WebhookDeliveryState.PENDING && d.attempts > 0) ? true : undefined;
        },
        30_000,
        20,
      );
      // Two more, killed straight after: queued or not yet, they must not be lost either.
      for (const id of ["k4", "k5"]) await rs.createResource({ resourceType: "tenant", resource: tenant(id) });
      cp.child.kill("SIGKILL");
      await new Promise((resolve) => cp.child.once("exit", resolve));

      receiver.answer = () => 200;
      cp = await startControllerProcess({ port, env, dataDir: cp.dataDir });
      const after = cp.admin(WebhookService);
      const ds = await waitFor(
        "five deliveries delivered",
        async () => {
          const list = (await after.listWebhookDeliveries({ webhookId: hook.id })).deliveries;
          return list.length === 5 && list.every((d) => d.state === WebhookDeliveryState.DELIVERED) ? list : undefined;
        },
        30_000,
        50,
      );
      const delivered = receiver.received
        .filter((r) => r.status === 200)
        .map((r) => JSON.parse(r.body) as { event: { resource_id: string } });
      expect(new Set(delivered.map((b) => b.event.resource_id))).toEqual(new Set(["k1", "k2", "k3", "k4", "k5"]));
      expect(new Set(ds.map((d) => d.eventId)).size).toBe(5);
    } finally {
      await cp.stop();
    }
  });
});

describe("the REST routes", () => {
  let rc: TestController;
  beforeAll(async () => {
    rc = await startController({ tls: false, webhooks: FAST });
  });
  afterAll(async () => {
    await rc.stop();
  });

  async function call(method: string, path: string, body?: unknown) {
    const res = await fetch(rc.url + path, {
      method,
      headers: { "x-admin-token": ADMIN_TOKEN, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    // biome-ignore lint/suspicious/noExplicitAny: a JSON body, read by path in assertions
    return { status: res.status, text, data: (JSON.parse(text) as { data: any }).data };
  }

  it("a host that resolves to a private address is refused at the attempt, before any connection; allowed, it is delivered", async () => {
    receiver = await startReceiver();
    const url = new URL(receiver.url);
    // This machine's own name passes the written URL's check (a name), and resolves (here, in
    // /etc/hosts) to a loopback or private address when sent.
    const named = new URL(receiver.url);
    named.hostname = hostname();
    const refused = await send({ url: named, body: "{}", headers: {}, caPem: receiver.caPem, timeoutMs: 5000 });
    expect(refused.status).toBe(0);
    expect(refused.text).toContain("not a public address");
    const literal = await send({ url, body: "{}", headers: {}, caPem: receiver.caPem, timeoutMs: 5000 });
    expect([literal.status, literal.text]).toEqual([0, expect.stringContaining("refused unsent")]);
    expect(receiver.received).toHaveLength(0);
    const sent = await send({ url, body: "{}", headers: {}, caPem: receiver.caPem, timeoutMs: 5000, allowPrivateNetwork: true });
    expect(sent.status).toBe(200);
    expect(receiver.received).toHaveLength(1);
  });

  it("a URL aimed at this machine or a private network is refused unless the subscription allows the private network", async () => {
    for (const url of [
      "https://127.0.0.1/in",
      "https://localhost:8443/in",
      "https://[::1]/in",
      "https://169.254.169.254/latest",
      "https://10.1.2.3/x",
      "https://[::ffff:192.168.1.1]/x",
    ]) {
      const refused = await call("POST", "/v1/webhooks", { url, event_types: ["*"] });
      expect([url, refused.status, JSON.parse(refused.text).error.details]).toEqual([
        url,
        400,
        { field: "url", reason: "PRIVATE_ADDRESS" },
      ]);
    }
    const allowed = await call("POST", "/v1/webhooks", { url: "https://127.0.0.1/in", event_types: ["*"], allow_private_network: true });
    expect(allowed.status).toBe(201);
    const id = allowed.data.webhook.id as string;
    // Turning the allowance off while the URL is private is refused too, and changes nothing.
    expect((await call("PATCH", `/v1/webhooks/${id}`, { allow_private_network: false })).status).toBe(400);
    expect((await call("GET", `/v1/webhooks/${id}`)).data.webhook.allow_private_network).toBe(true);
    expect((await call("DELETE", `/v1/webhooks/${id}`)).status).toBe(200);
  });

  it("create, read, pause, list deliveries and delete; the URL and the secret come back nowhere but the created secret once", async () => {
    const url = "https://hooks.example.com/in/secret-path-token-27182?key=query-secret-161803";
    const created = await call("POST", "/v1/webhooks", { url, event_types: ["deployment.*", "node.offline"], description: "ops" });
    expect(created.status).toBe(201);
    const id = created.data.webhook.id as string;
    expect(created.data.webhook).toMatchObject({ url_host: "hooks.example.com", event_types: ["deployment.*", "node.offline"] });
    expect(created.data.secret).toMatch(/^whsec_/);
    const read = await call("GET", `/v1/webhooks/${id}`);
    expect(read.data.webhook.status).toMatchObject({ backlog: "0", dead_lettered: "0" });
    const paused = await call("PATCH", `/v1/webhooks/${id}`, { paused: true });
    expect(paused.data.webhook.paused).toBe(true);
    const listed = await call("GET", "/v1/webhooks");
    expect(listed.data.webhooks.map((w: { id: string }) => w.id)).toEqual([id]);
    expect((await call("GET", `/v1/webhooks/${id}/deliveries?state=dead_lettered`)).data.deliveries ?? []).toEqual([]);
    for (const r of [created, read, paused, listed]) {
      expect(r.text).not.toContain("secret-path-token-27182");
      expect(r.text).not.toContain("query-secret-161803");
    }
    expect(read.text).not.toContain(created.data.secret);
    expect(await filesContaining(rc.dataDir, "secret-path-token-27182")).toEqual([]);
    expect(await filesContaining(rc.dataDir, created.data.secret)).toEqual([]);
    expect((await call("DELETE", `/v1/webhooks/${id}`)).status).toBe(200);
    expect((await call("GET", `/v1/webhooks/${id}`)).status).toBe(404);
  });

  it("an http:// URL, a bad pattern or a short secret is INVALID_REQUEST", async () => {
    for (const body of [
      { url: "http://hooks.example.com/x", event_types: ["*"] },
      { url: "https://hooks.example.com/x", event_types: ["deploy*"] },
      { url: "https://hooks.example.com/x", event_types: ["*"], secret: "short" },
      { url: "https://hooks.example.com/x", event_types: ["*"], ca_pem: "not a pem" },
    ]) {
      const r = await call("POST", "/v1/webhooks", body);
      expect(r.status).toBe(400);
      expect(r.text).toContain("INVALID_REQUEST");
    }
  });
});

describe.skipIf(!pgUrl())("two controllers on one PostgreSQL", () => {
  it("the leader alone sends, what the follower was asked for too; when the leader stops, the other takes over", async () => {
    receiver = await startReceiver();
    const db = await freshDatabase(`webhooks_pair_${process.pid}`);
    const dir = await mkdtemp(join(tmpdir(), "skipper-webhooks-pair-"));
    const keyRing = await SecretKeyRing.load({ dataDir: dir });
    const { logger } = createLogger({ service: "test", stdout: false, level: "error" });
    const start = (id: string) =>
      build({
        dataDir: join(dir, id),
        logger,
        adminToken: ADMIN_TOKEN,
        store: new PostgresStore(db, { maxConnections: 8 }),
        coordination: new PgCoordination(db, { controllerId: id, pollMs: 100 }),
        keyRing,
        webhooks: FAST,
      });
    const a = await start("a");
    await waitFor("a leads", async () => (a.coordination.leading ? true : undefined), 20_000, 20);
    const b = await start("b");
    const headers = { "x-admin-token": ADMIN_TOKEN };
    try {
      const viaB = createClient(WebhookService, b.transport);
      const hook = (
        await viaB.createWebhook(
          { url: receiver.url, eventTypes: ["resource.created"], secret: SECRET, caPem: receiver.caPem, allowPrivateNetwork: true },
          { headers },
        )
      ).webhook!;
      const resourcesB = createClient(ResourceService, b.transport);
      for (const id of ["p1", "p2", "p3"]) await resourcesB.createResource({ resourceType: "tenant", resource: tenant(id) }, { headers });
      const delivered = async (n: number) =>
        waitFor(
          `${n} deliveries delivered`,
          async () => {
            const ds = (await viaB.listWebhookDeliveries({ webhookId: hook.id }, { headers })).deliveries;
            return ds.length === n && ds.every((d) => d.state === WebhookDeliveryState.DELIVERED) ? ds : undefined;
          },
          20_000,
          20,
        );
      await delivered(3);
      expect(receiver.received.map((r) => r.headers["x-skipper-delivery"]).length).toBe(3);

      await a.close();
      await waitFor("b leads", async () => (b.coordination.leading ? true : undefined), 20_000, 20);
      await resourcesB.createResource({ resourceType: "tenant", resource: tenant("p4") }, { headers });
      await delivered(4);
      expect(new Set(receiver.received.map((r) => (JSON.parse(r.body) as { event: { resource_id: string } }).event.resource_id))).toEqual(
        new Set(["p1", "p2", "p3", "p4"]),
      );
    } finally {
      await a.close().catch(() => undefined);
      await b.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
