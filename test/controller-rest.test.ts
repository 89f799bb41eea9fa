// The REST routes derived from google.api.http, exercised with plain fetch against a real
// controller (plain HTTP here; TLS is covered by controller-rpc.test.ts and one https call below).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile, readdir } from "node:fs/promises";
import { existsSync } from "node:fs";
import https from "node:https";
import { join, dirname } from "node:path";
import { startController, ADMIN_TOKEN, type TestController } from "./helpers/controller.js";

let tc: TestController;
let tlsTc: TestController;
const admin = { "x-admin-token": ADMIN_TOKEN, "content-type": "application/json" };

async function call(method: string, path: string, opts: { body?: unknown; headers?: Record<string, string> } = {}) {
  const res = await fetch(tc.url + path, {
    method,
    headers: opts.headers ?? admin,
    body: opts.body === undefined ? undefined : typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body),
  });
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body, read by path in assertions
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, any> };
}

beforeAll(async () => {
  tc = await startController({ tls: false });
});
afterAll(async () => {
  await tc?.stop();
  await tlsTc?.stop();
});

describe("REST routes", () => {
  it("PATCH with an update_mask and DELETE map onto UpdateResource and DeleteResource", async () => {
    await call("POST", "/v1/resources/tenant", {
      body: { id: "rest-crud", desired_state: { tenant: { display_name: "before" } }, metadata: { labels: { a: "1" } } },
    });
    const patched = await call("PATCH", "/v1/resources/tenant/rest-crud", {
      body: { desired_state: { tenant: { display_name: "after" } }, update_mask: "desiredState.tenant.displayName" },
    });
    expect(patched.status).toBe(200);
    expect(patched.body.data.desired_state.tenant.display_name).toBe("after");
    expect(patched.body.data.metadata.labels).toEqual({ a: "1" });
    const badMask = await call("PATCH", "/v1/resources/tenant/rest-crud", { body: { update_mask: "desiredState.tenant.nope" } });
    expect(badMask.status).toBe(400);
    expect(badMask.body.error.details.field).toBe("update_mask");
    const del = await call("DELETE", "/v1/resources/tenant/rest-crud");
    expect(del.status).toBe(200);
    expect(typeof del.body.data.resource.deletion.deleted_at).toBe("string");
    expect((await call("GET", "/v1/resources/tenant/rest-crud")).status).toBe(404);
    expect((await call("GET", "/v1/resources/tenant/rest-crud?include_deleted=true")).status).toBe(200);
    const listed = await call("GET", "/v1/resources?resource_type=tenant&label_selector=a%3D1&include_deleted=true");
    expect(listed.body.data.resources.map((r: { id: string }) => r.id)).toEqual(["rest-crud"]);
    expect(Number(listed.body.data.revision)).toBeGreaterThan(0);
  });

  it("a path outside every route is a 404 envelope with the request's ids, in the body and the headers", async () => {
    const mine = await call("GET", "/nothing/here", { headers: { "x-request-id": "lost-1" } });
    expect(mine.status).toBe(404);
    expect(mine.body).toMatchObject({ request_id: "lost-1", correlation_id: "lost-1", data: null, error: { code: "RESOURCE_NOT_FOUND" } });
    expect(mine.headers.get("x-request-id")).toBe("lost-1");
    const fresh = await call("GET", "/favicon.ico", { headers: {} });
    expect(fresh.body.request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(fresh.headers.get("x-request-id")).toBe(fresh.body.request_id);
  });

  it("GET /health and /v1/health answer without credentials in the seed envelope", async () => {
    for (const path of ["/health", "/v1/health"]) {
      const r = await call("GET", path, { headers: { "x-request-id": "rest-h-1" } });
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ schema_version: "v1", request_id: "rest-h-1", correlation_id: "rest-h-1", error: null });
      expect(r.body.data.status).toBe("ok");
      expect(r.body.data.meta).toBeUndefined();
      expect(typeof r.body.metadata.timestamp).toBe("string");
      expect(r.headers.get("x-request-id")).toBe("rest-h-1");
    }
  });

  it("an admin promotes a label the agent reports, or trusts its key, with PATCH (the README's calls)", async () => {
    const reg = await call("POST", "/v1/nodes", { body: { node_id: "rest-labels", labels: { env: "dev" }, trusted_label_keys: ["zone"] } });
    expect(reg.status).toBe(200);
    expect(reg.body.data.node.desired_state.node.trusted_label_keys).toEqual(["zone"]);
    const promoted = await call("PATCH", "/v1/resources/node/rest-labels", {
      body: { desired_state: { node: { labels: { env: "dev", tier: "gold" } } }, update_mask: "desiredState.node.labels" },
    });
    expect(promoted.status).toBe(200);
    expect(promoted.body.data.desired_state.node).toMatchObject({ labels: { env: "dev", tier: "gold" }, trusted_label_keys: ["zone"] });
    const trusted = await call("PATCH", "/v1/resources/node/rest-labels", {
      body: { desired_state: { node: { trusted_label_keys: ["zone", "tier"] } }, update_mask: "desiredState.node.trustedLabelKeys" },
    });
    expect(trusted.body.data.desired_state.node.trusted_label_keys).toEqual(["zone", "tier"]);
    const bad = await call("PATCH", "/v1/resources/node/rest-labels", {
      body: { desired_state: { node: { trusted_label_keys: ["no spaces"] } }, update_mask: "desiredState.node.trustedLabelKeys" },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error.details.field).toBe("desired_state.node.trusted_label_keys[0]");
  });

  it("runs the seed flow: register, post the example files as they are, apply, poll, claim, report", async () => {
    const reg = await call("POST", "/v1/nodes", { body: { node_id: "host-1", display_name: "Local host", labels: { env: "dev" } } });
    expect(reg.status).toBe(200);
    const token = reg.body.data.token as string;
    expect(token).toMatch(/^skn\./);
    const node = { authorization: `Bearer ${token}`, "content-type": "application/json" };

    for (const name of ["tenant", "service"]) {
      const text = await readFile(new URL(`../examples/${name}.json`, import.meta.url), "utf8");
      const created = await call("POST", `/v1/resources/${name}`, { body: text, headers: { ...admin, "x-correlation-id": "rest-corr-1" } });
      expect(created.status).toBe(201);
      expect(created.body.data.id).toBe(JSON.parse(text).id);
      expect(created.body.data.metadata.resource_version).toMatch(/^\d+$/);
    }
    const got = await call("GET", "/v1/resources/tenant/example-tenant");
    expect(got.body.data.desired_state.tenant.deployment_policy.target_node_id).toBe("host-1");
    const list = await call("GET", "/v1/resources?resource_type=tenant");
    expect(list.body.data.resources.map((r: { id: string }) => r.id)).toEqual(["example-tenant"]);

    // The reconciler issued an order for the new tenant; Apply hands back that one, not a second.
    await tc.controller.reconciler.idle();
    const issued = await call("GET", "/v1/nodes/host-1/work-orders/next", { headers: node });
    expect(issued.status).toBe(200);
    expect(issued.body.data.correlation_id).toBe("rest-corr-1");
    const applied = await call("POST", "/v1/deployments/example-tenant/apply", {
      body: {},
      headers: { ...admin, "x-correlation-id": "rest-corr-2" },
    });
    expect(applied.status).toBe(200);
    const orderId = applied.body.data.work_order.id as string;
    expect(orderId).toBe(issued.body.data.id);
    expect(applied.body.data.work_order.status).toBe("WORK_ORDER_STATUS_PENDING");
    expect(applied.body.correlation_id).toBe("rest-corr-2");

    const pending = await call("GET", "/v1/work-orders?status=pending");
    expect(pending.body.data.work_orders.map((w: { id: string }) => w.id)).toContain(orderId);

    const hb = await call("POST", "/v1/nodes/host-1/heartbeat", {
      headers: node,
      body: { agent_version: "test", capabilities: { docker_available: false, os: "linux" } },
    });
    expect(hb.status).toBe(200);
    expect(hb.body.data.pending_work_orders).toBe(1);

    const next = await call("GET", "/v1/nodes/host-1/work-orders/next", { headers: node });
    expect(next.body.data.id).toBe(orderId);
    const claim = await call("POST", `/v1/work-orders/${orderId}/claim`, { headers: node, body: {} });
    expect(claim.status).toBe(200);
    expect(claim.body.data.status).toBe("WORK_ORDER_STATUS_RUNNING");
    const second = await call("POST", `/v1/work-orders/${orderId}/claim`, { headers: node, body: {} });
    expect(second.status).toBe(409);
    expect(second.body.error.code).toBe("WORK_ORDER_NOT_CLAIMABLE");
    expect(second.body.data).toBeNull();

    const result = {
      success: false,
      code: "COMPOSE_FAILED",
      message: "compose exited 1",
      details: { duration_ms: 5, command: { program: "docker", args: ["compose", "up"], exit_code: 1 } },
    };
    const done = await call("POST", `/v1/work-orders/${orderId}/result`, { headers: node, body: { result } });
    expect(done.status).toBe(200);
    expect(done.body.data.work_order.status).toBe("WORK_ORDER_STATUS_FAILED");
    expect(done.body.data.duplicate).toBe(false);

    const one = await call("GET", `/v1/work-orders/${orderId}`);
    expect(one.body.data.result.code).toBe("COMPOSE_FAILED");
    // The seed's short enum names on request, nested ones too; the full names stay the default.
    const short = await call("GET", `/v1/work-orders/${orderId}?enums=short`);
    expect(short.status).toBe(200);
    expect(short.body.data.status).toBe("failed");
    expect(short.body.data.type).toBe("deploy_service");
    const nested = (o: { result: { cause?: { reason?: string } } }) => o.result.cause?.reason;
    if (nested(one.body.data)) expect(nested(short.body.data)).toMatch(/^[a-z_]+$/);
    // Nothing else differs.
    const enums = { status: one.body.data.status, type: one.body.data.type, result: one.body.data.result };
    expect({ ...short.body.data, ...enums }).toEqual(one.body.data);
    const shortList = await call("GET", "/v1/work-orders?status=failed&enums=short");
    const statuses = shortList.body.data.work_orders.map((w: { status: string }) => w.status);
    expect(statuses.length).toBeGreaterThan(0);
    expect(new Set(statuses)).toEqual(new Set(["failed"]));
    // On a route whose request is the whole body too, and an unknown style is refused naming it.
    const shortNext = await call("POST", "/v1/deployments/example-tenant/apply?enums=short", { body: {} });
    expect(shortNext.status).toBe(200);
    expect(shortNext.body.data.work_order.status).toMatch(/^[a-z_]+$/);
    const loud = await call("GET", `/v1/work-orders/${orderId}?enums=loud`);
    expect(loud.status).toBe(400);
    expect(loud.body.error).toMatchObject({ code: "INVALID_REQUEST", details: { field: "enums" } });
    expect(existsSync(join(tc.dataDir, "work-orders", "finished", `${orderId}.json`))).toBe(true);
    expect(existsSync(join(tc.dataDir, "work-orders", "running", `${orderId}.json`))).toBe(false);

    const snap = await call("GET", "/v1/snapshots/tenants/example-tenant/latest");
    expect(snap.status).toBe(200);
    expect(snap.body.data.scope).toBe("tenant");
    const sys = await call("GET", "/v1/snapshots/system/latest");
    expect(sys.body.data.scope).toBe("system");
    const events = await call("GET", "/v1/events?type=deployment_failed&tenant_id=example-tenant");
    expect(events.body.data.events).toHaveLength(1);
    expect(events.body.data.events[0].correlation_id).toBe("rest-corr-1");
    const dayDirs = await readdir(join(tc.dataDir, "events"));
    expect(dayDirs.every((d) => /^\d{4}-\d{2}-\d{2}$/.test(d))).toBe(true);
  });

  it("maps errors to HTTP statuses with a machine-readable code", async () => {
    expect((await call("GET", "/v1/resources", { headers: {} })).status).toBe(401);
    const missing = await call("GET", "/v1/resources/tenant/absent");
    expect(missing.status).toBe(404);
    expect(missing.body.error).toMatchObject({ code: "RESOURCE_NOT_FOUND", details: { resource_type: "tenant", resource_id: "absent" } });
    const bad = await call("POST", "/v1/resources/tenant", { body: "{not json" });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe("INVALID_REQUEST");
    expect(JSON.stringify(bad.body)).not.toMatch(/at .*\.(ts|js):\d+/);
    const conflict = await call("PUT", "/v1/resources/tenant/example-tenant", {
      body: { desired_state: { tenant: { display_name: "x" } }, resource_version: "1" },
    });
    expect(conflict.status).toBe(409);
    expect(conflict.body.error.code).toBe("CONFLICT");
  });

  it.each([
    "/v1/resources/tenant/..",
    "/v1/resources/tenant/%2e%2e",
    "/v1/resources/tenant/..%2f..%2fetc%2fpasswd",
    "/v1/resources/tenant/%2fetc%2fpasswd",
    "/v1/resources/tenant/a%00b",
    "/v1/resources/tenant/t%C3%ABnant",
    `/v1/resources/tenant/${"a".repeat(300)}`,
    "/v1/resources/..%2f..%2fauth/x",
  ])("refuses traversal attempt %s with 400 INVALID_REQUEST", async (path) => {
    const r = await call("GET", path);
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe("INVALID_REQUEST");
  });

  it("writes nothing outside the data directory when a body carries a traversal id", async () => {
    const r = await call("POST", "/v1/resources/tenant", { body: { id: "../../escape", desired_state: { tenant: {} } } });
    expect(r.status).toBe(400);
    expect(existsSync(join(dirname(tc.dataDir), "escape.json"))).toBe(false);
    expect(existsSync(join(tc.dataDir, "escape.json"))).toBe(false);
  });
});

describe("REST over TLS", () => {
  it("answers on the TLS port for a client that trusts the generated CA", async () => {
    tlsTc = await startController({ tls: true });
    const body = await new Promise<string>((resolve, reject) => {
      https
        .get(`${tlsTc.url}/v1/health`, { ca: tlsTc.ca }, (res) => {
          let s = "";
          res.on("data", (c) => (s += c));
          res.on("end", () => resolve(s));
        })
        .on("error", reject);
    });
    expect(JSON.parse(body).data.status).toBe("ok");
  });
});
