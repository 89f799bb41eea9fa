// The REST router on its own: routes derived from the real contract, served by createRestHandler
// on a real HTTP server, executed through a Connect router transport with fake service
// implementations and a tiny interceptor standing in for the boundary (ids + ApiError details).
// Plain fetch for ordinary calls; node:http for paths fetch would normalise ("%2e%2e").
import { CONNECT_CODE } from "../controller/boundary/api-errors.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { readFile } from "node:fs/promises";
import { create, createFileRegistry, setExtension, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import {
  FieldDescriptorProto_Label as Label,
  FieldDescriptorProto_Type as Type,
  FileDescriptorProtoSchema,
  MethodOptionsSchema,
  timestampFromDate,
} from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createRouterTransport, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { http as httpOption } from "../gen/google/api/annotations_pb.js";
import { HttpRuleSchema } from "../gen/google/api/http_pb.js";
import { ApiErrorSchema } from "../gen/skipper/v1/envelope_pb.js";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { HealthService } from "../gen/skipper/v1/health_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { SnapshotService } from "../gen/skipper/v1/snapshot_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { type WorkOrderSchema, WorkOrderStatus } from "../gen/skipper/v1/work_order_pb.js";
import { conflict, forbidden, isSkipperError, notClaimable, notFound, unauthorized } from "../controller/base/errors.js";
import { checkId, checkResourceType } from "../controller/base/id-checks.js";
import { BodyBudgets, DEFAULT_BODY_LIMITS } from "../controller/boundary/body-limits.js";
import { createRestHandler, describeRoutes, type RestHandler } from "../controller/boundary/rest/rest-handler.js";

const SERVICES: DescService[] = [
  HealthService,
  ResourceService,
  WorkOrderService,
  NodeService,
  DeploymentService,
  SnapshotService,
  EventService,
];
const MAX_BODY = 64 * 1024;
const META_TIME = "2024-01-02T03:04:05Z";

// What the fakes saw: the last request message per RPC and the last forwarded headers.
const seen = new Map<string, unknown>();
let seenHeaders = new Headers();
let idCounter = 0;

// Stand-in for the boundary interceptor: ids in and out, domain errors -> ApiError details.
const boundary: Interceptor = (next) => async (req) => {
  const requestId = req.header.get("x-request-id") ?? `rid-${++idCounter}`;
  const correlationId = req.header.get("x-correlation-id") ?? requestId;
  seenHeaders = new Headers(req.header);
  try {
    const res = await next(req);
    res.header.set("x-request-id", requestId);
    res.header.set("x-correlation-id", correlationId);
    return res;
  } catch (e) {
    let err: ConnectError;
    if (isSkipperError(e)) {
      const detail = create(ApiErrorSchema, { code: e.code, message: e.message, details: e.details });
      err = new ConnectError(e.message, CONNECT_CODE[e.code], undefined, [{ desc: ApiErrorSchema, value: detail }]);
    } else if (e instanceof ConnectError) {
      err = e;
    } else {
      err = new ConnectError("internal error", Code.Internal);
    }
    err.metadata.set("x-request-id", requestId);
    err.metadata.set("x-correlation-id", correlationId);
    throw err;
  }
};

function record<T>(name: string, req: T): T {
  seen.set(name, req);
  return req;
}

const meta = () => ({ schemaVersion: "v1", timestamp: timestampFromDate(new Date(META_TIME)) });
const order = (id: string): MessageInitShape<typeof WorkOrderSchema> => ({
  id,
  resourceType: "work_order",
  status: WorkOrderStatus.PENDING,
});

function fakeRoutes(router: ConnectRouter): void {
  router.service(HealthService, { check: () => ({ meta: meta(), status: "ok", version: "test", store: "fake" }) });
  router.service(ResourceService, {
    listResources: (req) => (record("ListResources", req), {}),
    getResource: (req) => {
      record("GetResource", req);
      checkResourceType(req.resourceType);
      checkId(req.id, "id");
      if (req.id === "absent") throw notFound(req.resourceType, req.id);
      return { meta: meta(), resource: { id: req.id, resourceType: req.resourceType } };
    },
    createResource: (req) => {
      record("CreateResource", req);
      if (req.resource?.id === "taken") throw conflict("resource already exists", { resource_id: "taken" });
      return { resource: { id: req.resource?.id, desiredState: req.resource?.desiredState, resourceType: req.resourceType } };
    },
    updateResource: (req) => (record("UpdateResource", req), { resource: { id: req.id, resourceType: req.resourceType } }),
  });
  router.service(WorkOrderService, {
    listWorkOrders: (req) => (record("ListWorkOrders", req), { workOrders: [order("wo-1")] }),
    getWorkOrder: (req) => {
      if (req.id === "forbidden") throw forbidden("not your work order");
      if (req.id === "exists") throw new ConnectError("already there", Code.AlreadyExists);
      if (req.id === "unavailable") throw new ConnectError("try later", Code.Unavailable);
      if (req.id === "boom") throw new Error("secret internal detail at /srv/x.ts:12");
      return { workOrder: order(req.id) };
    },
    claimWorkOrder: (req) => {
      throw notClaimable("work order is not pending", { work_order_id: req.id, status: "running" });
    },
    reportWorkOrderResult: (req) => (record("ReportWorkOrderResult", req), { workOrder: order(req.id), duplicate: false }),
  });
  router.service(NodeService, {
    heartbeat: (req) => (record("Heartbeat", req), { pendingWorkOrders: 2 }),
    getNextWorkOrder: (req) => {
      if (req.nodeId === "unauth") throw unauthorized();
      return req.nodeId === "idle" ? {} : { workOrder: order("wo-next") };
    },
    registerNode: (req) => (record("RegisterNode", req), { token: "skn.x" }),
  });
  router.service(DeploymentService, { apply: (req) => (record("Apply", req), {}) });
  router.service(SnapshotService, {
    getSystemSnapshot: () => ({ snapshot: { scope: "system" } }),
    getTenantSnapshot: (req) => ({ snapshot: { scope: "tenant", tenantId: req.tenantId } }),
  });
  router.service(EventService, { listEvents: (req) => (record("ListEvents", req), {}) });
}

// Serves a REST handler on 127.0.0.1:0; paths it declines answer 418 so fall-through is visible.
async function serveRest(rest: RestHandler): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    void rest.handle(req, res).then((handled) => {
      if (!handled) res.writeHead(418).end("not mine");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

let rest: RestHandler;
let server: { url: string; close(): Promise<void> };

beforeAll(async () => {
  const transport = createRouterTransport(fakeRoutes, { router: { interceptors: [boundary] } });
  const limits = { ...DEFAULT_BODY_LIMITS, admitted: { ...DEFAULT_BODY_LIMITS.admitted, maxBytes: MAX_BODY } };
  rest = createRestHandler({ services: SERVICES, transport, budgets: new BodyBudgets(limits) });
  server = await serveRest(rest);
});
afterAll(() => server?.close());

// biome-ignore lint/suspicious/noExplicitAny: a JSON body, read by path in assertions
type Reply = { status: number; headers: Headers; body: Record<string, any> };

async function call(method: string, path: string, opts: { body?: unknown; headers?: Record<string, string> } = {}): Promise<Reply> {
  const res = await fetch(server.url + path, {
    method,
    headers: { "content-type": "application/json", ...opts.headers },
    body: opts.body === undefined ? undefined : typeof opts.body === "string" ? opts.body : JSON.stringify(opts.body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text.startsWith("{") ? JSON.parse(text) : { text } };
}

// node:http sends the path exactly as given (fetch would resolve "%2e%2e" before sending).
function rawGet(path: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${server.url}/`, { method: "GET", path }, (res) => {
      let text = "";
      res.on("data", (c) => (text += c));
      res.on("end", () =>
        resolve({ status: res.statusCode!, headers: new Headers(res.headers as Record<string, string>), body: JSON.parse(text) }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

function expectErrorEnvelope(r: Reply, status: number, code: string): void {
  expect(r.status).toBe(status);
  expect(r.headers.get("content-type")).toBe("application/json");
  expect(Object.keys(r.body).sort()).toEqual(["correlation_id", "data", "error", "metadata", "request_id", "schema_version"]);
  expect(r.body.data).toBeNull();
  expect(r.body.error).toMatchObject({ code, message: expect.any(String), details: expect.any(Object) });
  expect(r.body.request_id).toMatch(/.+/);
  expect(r.headers.get("x-request-id")).toBe(r.body.request_id);
  expect(JSON.stringify(r.body)).not.toMatch(/at .*\.(ts|js):\d+/);
}

describe("derived route table", () => {
  it("lists the seed routes from the google.api.http options, additional bindings included", () => {
    const table = describeRoutes(rest.routes).map((r) => `${r.method} ${r.path}`);
    expect(table).toEqual(
      expect.arrayContaining([
        "GET /v1/health",
        "GET /health",
        "GET /v1/resources",
        "GET /v1/resources/{resource_type}/{id}",
        "PUT /v1/resources/{resource_type}/{id}",
        "POST /v1/resources/{resource_type}",
        "GET /v1/work-orders",
        "GET /v1/work-orders/{id}",
        "GET /v1/nodes/{node_id}/work-orders/next",
        "POST /v1/nodes/{node_id}/heartbeat",
        "POST /v1/work-orders/{id}/result",
        "POST /v1/deployments/{tenant_id}/apply",
        "GET /v1/snapshots/system/latest",
        "GET /v1/snapshots/tenants/{tenant_id}/latest",
      ]),
    );
    // Listed in contract order (services, then methods), not matching order.
    expect(table.slice(0, 3)).toEqual(["GET /v1/health", "GET /health", "GET /v1/resources"]);
    expect(table.at(-1)).toBe("GET /v1/events");
    expect(rest.describe()).toContainEqual({ method: "GET", path: "/health", rpc: "skipper.v1.HealthService.Check" });
    expect(rest.describe()).toContainEqual({
      method: "POST",
      path: "/v1/resources/{resource_type}",
      rpc: "skipper.v1.ResourceService.CreateResource",
    });
  });
});

describe("binding", () => {
  it("takes query parameters by proto name and JSON name, parsed by type", async () => {
    const r = await call("GET", "/v1/resources?resource_type=tenant&page_size=5&pageToken=abc");
    expect(r.status).toBe(200);
    expect(seen.get("ListResources")).toMatchObject({ resourceType: "tenant", pageSize: 5, pageToken: "abc" });
  });

  it.each([
    ["pending", WorkOrderStatus.PENDING],
    ["RUNNING", WorkOrderStatus.RUNNING],
    ["WORK_ORDER_STATUS_SUCCESS", WorkOrderStatus.SUCCESS],
    ["4", WorkOrderStatus.FAILED],
  ])("accepts enum value %s (short alias, full name or number)", async (text, expected) => {
    const r = await call("GET", `/v1/work-orders?status=${text}&node_id=host-1`);
    expect(r.status).toBe(200);
    expect(seen.get("ListWorkOrders")).toMatchObject({ status: expected, nodeId: "host-1" });
    expect(r.body.data.work_orders[0].status).toBe("WORK_ORDER_STATUS_PENDING");
  });

  it.each([
    ["2024-05-01T10:00:00Z", "2024-05-01T10:00:00.000Z"],
    ["2024-05-01T12:00:00%2B02:00", "2024-05-01T10:00:00.000Z"],
    ["2024-05-01T12:00:00+02:00", "2024-05-01T10:00:00.000Z"],
  ])("parses Timestamp query parameter since=%s as RFC 3339", async (text, iso) => {
    const r = await call("GET", `/v1/events?since=${text}`);
    expect(r.status).toBe(200);
    const req = seen.get("ListEvents") as { since: { seconds: bigint } };
    expect(new Date(Number(req.since.seconds) * 1000).toISOString()).toBe(iso);
  });

  it.each([
    ["/v1/work-orders?status=bogus", "status"],
    ["/v1/resources?page_size=abc", "page_size"],
    ["/v1/resources?page_size=99999999999", "page_size"],
    ["/v1/resources?page_size=1&page_size=2", "page_size"],
    ["/v1/events?since=yesterday", "since"],
    ["/v1/resources?bogus=1", "bogus"],
    ["/v1/resources/tenant/x?id=y", "id"],
    ["/v1/resources?resource_type=%zz", "resource_type"],
  ])("refuses %s with 400 naming the field", async (path, field) => {
    const r = await call("GET", path);
    expectErrorEnvelope(r, 400, "INVALID_REQUEST");
    expect(r.body.error.details.field).toBe(field);
  });

  it("names the accepted parameters when one is unknown", async () => {
    const r = await call("GET", "/v1/resources?type=tenant");
    expect(r.body.error.message).toContain("unknown query parameter");
    expect(r.body.error.details.allowed).toEqual([
      "resource_type",
      "page_size",
      "page_token",
      "tenant_id",
      "label_selector",
      "include_deleted",
      "since_revision",
      "capabilities",
      "liveness",
    ]);
  });

  it('refuses query parameters on a body "*" route', async () => {
    const r = await call("POST", "/v1/deployments/t1/apply?node_id=n1", { body: {} });
    expectErrorEnvelope(r, 400, "INVALID_REQUEST");
  });

  it('binds a body: "resource" route from the example file as it is, with 201 for Create', async () => {
    const text = await readFile(new URL("../examples/tenant.json", import.meta.url), "utf8");
    const r = await call("POST", "/v1/resources/tenant", { body: text });
    expect(r.status).toBe(201);
    expect(r.body.data.id).toBe("example-tenant");
    expect(r.body.data.desired_state.tenant.deployment_policy.target_node_id).toBe("host-1");
    expect(seen.get("CreateResource")).toMatchObject({ resourceType: "tenant", resource: { id: "example-tenant" } });
  });

  it('binds body "*" with path variables, which must agree with the body', async () => {
    const body = { desired_state: { tenant: { display_name: "T" } }, resource_version: "3", labels: { env: "dev" } };
    const ok = await call("PUT", "/v1/resources/tenant/t1", { body: { ...body, id: "t1" } });
    expect(ok.status).toBe(200);
    expect(seen.get("UpdateResource")).toMatchObject({ resourceType: "tenant", id: "t1", resourceVersion: "3", labels: { env: "dev" } });
    const clash = await call("PUT", "/v1/resources/tenant/t1", { body: { ...body, id: "t2" } });
    expectErrorEnvelope(clash, 400, "INVALID_REQUEST");
    expect(clash.body.error.details.field).toBe("id");
  });

  it("parses nested bodies with enums and 64-bit integers, and accepts an empty body", async () => {
    const hb = await call("POST", "/v1/nodes/host-1/heartbeat", {
      body: { agent_version: "1.0", capabilities: { compose_variant: "COMPOSE_VARIANT_PLUGIN_V2" }, uptime_seconds: "42" },
    });
    expect(hb.status).toBe(200);
    expect(hb.body.data).toEqual({ pending_work_orders: 2 });
    expect(seen.get("Heartbeat")).toMatchObject({ nodeId: "host-1", uptimeSeconds: 42n, capabilities: { composeVariant: 2 } });
    const applied = await call("POST", "/v1/deployments/t1/apply");
    expect(applied.status).toBe(200);
    expect(seen.get("Apply")).toMatchObject({ tenantId: "t1", nodeId: "" });
    const result = await call("POST", "/v1/work-orders/wo-1/result", { body: { result: { success: true, code: "APPLY_OK" } } });
    expect(result.body.data).toMatchObject({ duplicate: false, work_order: { id: "wo-1" } });
    expect(seen.get("ReportWorkOrderResult")).toMatchObject({ id: "wo-1", result: { success: true, code: "APPLY_OK" } });
  });

  it.each([
    ["{not json", "resource"],
    ['{"id": "x", "bogus": 1}', "bogus"],
    ['{"id": 5}', "id"],
    ["[1, 2]", "resource"],
  ])("refuses body %s with 400 INVALID_REQUEST", async (body, field) => {
    const r = await call("POST", "/v1/resources/tenant", { body });
    expectErrorEnvelope(r, 400, "INVALID_REQUEST");
    expect(r.body.error.details.field).toBe(field);
  });
});

describe("envelope", () => {
  it.each(["/v1/health", "/health"])("wraps GET %s in the seed envelope without meta", async (path) => {
    const r = await call("GET", path, { headers: { "x-request-id": "req-1", "x-correlation-id": "corr-1" } });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toBe("application/json");
    expect(r.body).toEqual({
      schema_version: "v1",
      request_id: "req-1",
      correlation_id: "corr-1",
      data: { status: "ok", version: "test", store: "fake", controller_id: "", leading: false },
      error: null,
      metadata: { timestamp: META_TIME },
    });
  });

  it("emits implicit fields and a current timestamp when the response has no meta", async () => {
    const before = Date.now();
    const r = await call("GET", "/v1/resources");
    expect(r.body.data).toEqual({ resources: [], next_page_token: "", revision: "0" });
    expect(Date.parse(r.body.metadata.timestamp)).toBeGreaterThanOrEqual(before - 1000);
  });

  it("returns only the response_body field, and null when it is unset", async () => {
    const next = await call("GET", "/v1/nodes/host-1/work-orders/next");
    expect(next.body.data).toMatchObject({ id: "wo-next", status: "WORK_ORDER_STATUS_PENDING" });
    const none = await call("GET", "/v1/nodes/idle/work-orders/next");
    expect(none.status).toBe(200);
    expect(none.body.data).toBeNull();
    expect(none.body.error).toBeNull();
    const snap = await call("GET", "/v1/snapshots/tenants/t1/latest");
    expect(snap.body.data).toMatchObject({ scope: "tenant", tenant_id: "t1" });
    expect((await call("GET", "/v1/snapshots/system/latest")).body.data.scope).toBe("system");
  });
});

describe("errors", () => {
  it.each([
    ["GET", "/v1/resources/tenant/absent", 404, "RESOURCE_NOT_FOUND", undefined],
    ["GET", "/v1/resources/planet/x", 400, "INVALID_REQUEST", undefined],
    ["GET", "/v1/nodes/unauth/work-orders/next", 401, "UNAUTHORIZED", undefined],
    ["GET", "/v1/work-orders/forbidden", 403, "FORBIDDEN", undefined],
    ["POST", "/v1/resources/tenant", 409, "CONFLICT", { id: "taken" }],
    ["POST", "/v1/work-orders/wo-1/claim", 409, "WORK_ORDER_NOT_CLAIMABLE", {}],
    ["GET", "/v1/work-orders/boom", 500, "INTERNAL_ERROR", undefined],
  ])("%s %s answers %i %s in the error envelope", async (method, path, status, code, body) => {
    const r = await call(method, path, { body, headers: { "x-request-id": "err-1", "x-correlation-id": "corr-e" } });
    expectErrorEnvelope(r, status, code);
    expect(r.body).toMatchObject({ request_id: "err-1", correlation_id: "corr-e" });
    expect(r.headers.get("x-correlation-id")).toBe("corr-e");
  });

  it("keeps the ApiError details and never leaks an internal message", async () => {
    const missing = await call("GET", "/v1/resources/tenant/absent");
    expect(missing.body.error.details).toEqual({ resource_type: "tenant", resource_id: "absent" });
    const boom = await call("GET", "/v1/work-orders/boom");
    expect(boom.body.error.message).toBe("internal error");
    expect(JSON.stringify(boom.body)).not.toContain("secret");
  });

  it.each([
    ["exists", 409, "CONFLICT", "already there"],
    ["unavailable", 503, "UNAVAILABLE", "try later"],
  ])("derives the code from the Connect code when there is no ApiError (%s)", async (id, status, code, message) => {
    const r = await call("GET", `/v1/work-orders/${id}`);
    expectErrorEnvelope(r, status, code);
    expect(r.body.error.message).toBe(message);
  });

  it("answers a wrong method on a known path with 405 and allow", async () => {
    const r = await call("POST", "/v1/resources/tenant/x");
    expectErrorEnvelope(r, 405, "INVALID_REQUEST");
    expect(r.headers.get("allow")).toBe("DELETE, GET, PATCH, PUT");
    expect((await call("POST", "/health")).headers.get("allow")).toBe("GET");
  });

  it("answers unknown paths under /v1 and /health with 404 and leaves others to the caller", async () => {
    expectErrorEnvelope(await call("GET", "/v1/nope"), 404, "RESOURCE_NOT_FOUND");
    expectErrorEnvelope(await call("GET", "/v1/resources/tenant/a/b"), 404, "RESOURCE_NOT_FOUND");
    expectErrorEnvelope(await call("GET", "/health/deep"), 404, "RESOURCE_NOT_FOUND");
    expect((await call("GET", "/metrics")).status).toBe(418);
  });

  it("refuses a path with an empty segment as INVALID_REQUEST", async () => {
    expectErrorEnvelope(await rawGet("/v1/resources/"), 400, "INVALID_REQUEST");
    expectErrorEnvelope(await rawGet("/v1/resources/tenant/"), 400, "INVALID_REQUEST");
  });

  it("answers 413 for a body over the limit, declared or streamed, and keeps serving", async () => {
    const big = JSON.stringify({ id: "x", metadata: { labels: { pad: "x".repeat(MAX_BODY) } } });
    const declared = await call("POST", "/v1/resources/tenant", { body: big });
    expectErrorEnvelope(declared, 413, "INVALID_REQUEST");
    const chunk = new TextEncoder().encode("x".repeat(16 * 1024));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 8) controller.enqueue(chunk);
        else controller.close();
      },
    });
    const res = await fetch(`${server.url}/v1/resources/tenant`, { method: "POST", body: stream, duplex: "half" } as RequestInit);
    expect(res.status).toBe(413);
    expect(((await res.json()) as Reply["body"]).error.code).toBe("INVALID_REQUEST");
    expect((await call("GET", "/v1/health")).status).toBe(200);
  });
});

describe("headers and path segments", () => {
  it("forwards auth, trace, idempotency and x-skipper-* headers only, and echoes the ids", async () => {
    const r = await call("POST", "/v1/nodes", {
      body: { node_id: "n1" },
      headers: {
        authorization: "Bearer t",
        "x-admin-token": "adm",
        "x-request-id": "fw-1",
        "x-correlation-id": "fw-c",
        "x-idempotency-key": "k1",
        "x-skipper-trace": "on",
        cookie: "session=1",
        "x-other": "no",
      },
    });
    expect(r.status).toBe(200);
    expect(Object.fromEntries(seenHeaders)).toMatchObject({
      authorization: "Bearer t",
      "x-admin-token": "adm",
      "x-request-id": "fw-1",
      "x-correlation-id": "fw-c",
      "x-idempotency-key": "k1",
      "x-skipper-trace": "on",
    });
    expect(seenHeaders.has("cookie")).toBe(false);
    expect(seenHeaders.has("x-other")).toBe(false);
    expect(r.headers.get("x-request-id")).toBe("fw-1");
    expect(r.headers.get("x-correlation-id")).toBe("fw-c");
  });

  it("uses the ids the RPC layer generated when the client sent none", async () => {
    const r = await call("GET", "/v1/health");
    expect(r.body.request_id).toMatch(/^rid-\d+$/);
    expect(r.headers.get("x-request-id")).toBe(r.body.request_id);
    expect(r.body.correlation_id).toBe(r.body.request_id);
  });

  it("gives REST-layer errors the client's valid ids, or fresh ones", async () => {
    const mine = await call("GET", "/v1/nope", { headers: { "x-request-id": "mine-1" } });
    expect(mine.body).toMatchObject({ request_id: "mine-1", correlation_id: "mine-1" });
    const bad = await call("GET", "/v1/nope", { headers: { "x-request-id": "bad id!" } });
    expect(bad.body.request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(bad.headers.get("x-request-id")).toBe(bad.body.request_id);
  });

  it('decodes %2e%2e to ".." and hands it to the handler, which refuses it', async () => {
    const r = await rawGet("/v1/resources/tenant/%2e%2e");
    expectErrorEnvelope(r, 400, "INVALID_REQUEST");
    expect(seen.get("GetResource")).toMatchObject({ id: ".." });
    expect(r.body.error.details.field).toBe("id");
  });

  it("keeps an encoded slash inside its segment", async () => {
    const r = await rawGet("/v1/resources/tenant/a%2Fb");
    expectErrorEnvelope(r, 400, "INVALID_REQUEST");
    expect(seen.get("GetResource")).toMatchObject({ resourceType: "tenant", id: "a/b" });
  });

  it("refuses malformed percent-encoding in a path segment", async () => {
    const r = await rawGet("/v1/resources/tenant/%E0%A4%A");
    expectErrorEnvelope(r, 400, "INVALID_REQUEST");
    expect(r.body.error.details.field).toBe("id");
  });
});

describe("HTTP/2", () => {
  it("serves the same routes through the HTTP/2 compatibility API", async () => {
    const h2 = http2.createServer((req, res) => void rest.handle(req, res));
    await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", resolve));
    const client = http2.connect(`http://127.0.0.1:${(h2.address() as AddressInfo).port}`);
    const request = (headers: http2.OutgoingHttpHeaders, body?: string) =>
      // biome-ignore lint/suspicious/noExplicitAny: a JSON body, read by path in assertions
      new Promise<{ status: number; requestId: unknown; body: Record<string, any> }>((resolve, reject) => {
        const stream = client.request(headers);
        let status = 0;
        let requestId: unknown;
        let text = "";
        stream.on("response", (h) => ((status = Number(h[":status"])), (requestId = h["x-request-id"])));
        stream.on("data", (c) => (text += c));
        stream.on("end", () => resolve({ status, requestId, body: JSON.parse(text) }));
        stream.on("error", reject);
        stream.end(body);
      });
    try {
      const health = await request({ ":path": "/v1/health", "x-request-id": "h2-1" });
      expect(health).toMatchObject({ status: 200, requestId: "h2-1", body: { request_id: "h2-1", data: { status: "ok" } } });
      const created = await request({ ":method": "POST", ":path": "/v1/resources/volume" }, JSON.stringify({ id: "vol-1" }));
      expect(created.status).toBe(201);
      expect(created.body.data).toMatchObject({ id: "vol-1", resource_type: "volume" });
    } finally {
      client.close();
      await new Promise<void>((resolve) => h2.close(() => resolve()));
    }
  });
});

describe("templates beyond the seed contract", () => {
  // A one-file contract built in memory, for rules the seed protos do not use.
  function probeService(rules: Array<[string, MessageInitShape<typeof HttpRuleSchema>]>): DescService {
    const field = (name: string, number: number, type: Type, label = Label.OPTIONAL) => ({ name, number, type, label, jsonName: name });
    const file = create(FileDescriptorProtoSchema, {
      name: "probe.proto",
      package: "probe",
      syntax: "proto3",
      messageType: ["Req", "Res"].map((name) => ({
        name,
        field: [field("id", 1, Type.STRING), field("tags", 2, Type.STRING, Label.REPEATED), field("count", 3, Type.INT64)],
      })),
      service: [
        {
          name: "ProbeService",
          method: rules.map(([name, rule]) => {
            const options = create(MethodOptionsSchema);
            setExtension(options, httpOption, create(HttpRuleSchema, rule));
            return { name, inputType: ".probe.Req", outputType: ".probe.Res", options };
          }),
        },
      ],
    });
    return createFileRegistry(file, () => undefined).getService("probe.ProbeService")!;
  }

  it("prefers a literal segment to a variable, and takes repeated and 64-bit query parameters", async () => {
    const probe = probeService([
      ["ByID", { pattern: { case: "get", value: "/v1/items/{id}" } }],
      ["Next", { pattern: { case: "get", value: "/v1/items/next" } }],
    ]);
    const transport = createRouterTransport((router) => {
      router.service(probe, {
        byID: (req: object) => ({ ...req }),
        next: () => ({ id: "from-next" }),
      } as never);
    });
    const probeRest = createRestHandler({ services: [probe], transport });
    const probeServer = await serveRest(probeRest);
    try {
      const next = (await (await fetch(`${probeServer.url}/v1/items/next`)).json()) as Reply["body"];
      expect(next.data.id).toBe("from-next");
      const byId = (await (await fetch(`${probeServer.url}/v1/items/i1?tags=a&tags=b&count=9007199254740993`)).json()) as Reply["body"];
      expect(byId.data).toEqual({ id: "i1", tags: ["a", "b"], count: "9007199254740993" });
    } finally {
      await probeServer.close();
    }
  });

  it("fails at start-up when a template names a field the request lacks", () => {
    const probe = probeService([["Bad", { pattern: { case: "get", value: "/v1/items/{nope}" } }]]);
    expect(() => createRestHandler({ services: [probe], transport: createRouterTransport(() => {}) })).toThrow(/\{nope\}/);
  });
});
