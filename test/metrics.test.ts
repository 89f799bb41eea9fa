// GET /metrics against the real controller over HTTP/2 + TLS: who may scrape (a viewer key yes;
// no credential, a node, a key limited to some tenants no, unless --metrics-open), that what it
// serves parses strictly as Prometheus' text format, that the counters, histograms and gauges
// move as orders are created, claimed, finished, replayed and expire, and that no label carries
// an id, a secret or text a caller chose. Plus the census' cost bound, with a fake clock.
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { fleetCensus } from "../controller/metrics/fleet-census.js";
import type { Store } from "../controller/store/store.js";
import { startController, ADMIN_TOKEN, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { parsePrometheusText, sampleSum, type Family } from "./helpers/prometheus-text.js";

// Ids and text that must never show in the metrics.
const NODE = "node-mx-4f1c";
const TENANT = "tenant-mx-9a7e";
const SERVICE = "svc-mx-2b8d";
const SECRET = "s3cret-mx-71d0";
const FREE_TEXT = "free-text-mx-c3e5";

interface Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: string;
}

/** One request over HTTP/2 + TLS (a session of its own). */
async function request(tc: TestController, path: string, headers: Record<string, string> = {}, method = "GET"): Promise<Answer> {
  const session = http2.connect(tc.url, { ca: tc.ca });
  try {
    return await new Promise<Answer>((resolve, reject) => {
      const req = session.request({ ":method": method, ":path": path, ...headers });
      let answer: Omit<Answer, "body"> = { status: 0, headers: {} };
      let body = "";
      req.setEncoding("utf8");
      req.on("response", (h) => {
        answer = { status: Number(h[":status"]), headers: h };
      });
      req.on("data", (chunk: string) => {
        body += chunk;
      });
      req.on("end", () => resolve({ ...answer, body }));
      req.on("error", reject);
      req.end();
    });
  } finally {
    session.close();
  }
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** Scrapes /metrics as the admin and parses it strictly. */
async function scrape(tc: TestController): Promise<Map<string, Family>> {
  const r = await request(tc, "/metrics", { "x-admin-token": ADMIN_TOKEN });
  expect(r.status).toBe(200);
  return parsePrometheusText(r.body);
}

/** Resolves once `check` holds, trying again as the controller makes progress (up to 20 s). */
async function until(check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("the condition never held");
    await new Promise((r) => setTimeout(r, 20));
  }
}

function resource(type: "tenant" | "service", id: string, value: Record<string, unknown>): Resource {
  return create(ResourceSchema, { id, resourceType: type, desiredState: { kind: { case: type, value } } as never });
}

describe("GET /metrics", () => {
  let tc: TestController;
  let nodeToken: string;
  const orderIds: string[] = [];
  const keyIds: string[] = [];

  beforeAll(async () => {
    // The fleet's gauges are counted at every scrape here (default: kept 5 s).
    tc = await startController({ tls: true, metricsCensusMs: 0 });
    nodeToken = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: NODE })).token;
  });
  afterAll(async () => {
    await tc?.stop();
  });

  it("a viewer API key may scrape; no credential, a node and a key limited to some tenants may not (the last two audited)", async () => {
    const access = tc.client(AccessService, { admin: true });
    const viewer = await access.createApiKey({ name: "prometheus", role: Role.VIEWER });
    const scoped = await access.createApiKey({ name: "scoped-viewer", role: Role.VIEWER, scope: { tenantIds: [TENANT] } });
    keyIds.push(viewer.apiKey!.id, scoped.apiKey!.id);

    const ok = await request(tc, "/metrics", bearer(viewer.secret));
    expect(ok.status).toBe(200);
    expect(ok.headers["content-type"]).toBe("text/plain; version=0.0.4; charset=utf-8");
    expect(parsePrometheusText(ok.body).get("skipper_build_info")?.samples[0]?.labels.store).toBe("file");

    const anonymous = await request(tc, "/metrics");
    expect(anonymous.status).toBe(401);
    expect(JSON.parse(anonymous.body).error.code).toBe("UNAUTHORIZED");
    expect(anonymous.body).not.toContain("skipper_");
    for (const token of [nodeToken, scoped.secret]) {
      const refused = await request(tc, "/metrics", { ...bearer(token), "x-request-id": `mx-refused-${token.slice(0, 3)}` });
      expect(refused.status).toBe(403);
      expect(JSON.parse(refused.body).error.code).toBe("FORBIDDEN");
    }
    const post = await request(tc, "/metrics", bearer(viewer.secret), "POST");
    expect([post.status, post.headers.allow]).toEqual([405, "GET, HEAD"]);
    const head = await request(tc, "/metrics", bearer(viewer.secret), "HEAD");
    expect([head.status, head.body]).toEqual([200, ""]);

    const audited = (await tc.controller.store.listAuditEntries({})).items.filter((e) => e.rpc === "GET /metrics");
    expect(audited.map((e) => [e.outcome, e.requestId])).toEqual([
      ["FORBIDDEN", "mx-refused-skn"],
      ["FORBIDDEN", "mx-refused-skk"],
    ]);
  });

  it("calls refused at the front door are counted by method and code, Connect and REST alike", async () => {
    const before = await scrape(tc);
    const labels = { service: "skipper.v1.ResourceService", method: "ListResources", code: "unauthenticated" };
    expect((await rpcError(tc.client(ResourceService).listResources({}))).code).toBe("UNAUTHORIZED");
    expect((await request(tc, "/v1/resources")).status).toBe(401);
    const after = await scrape(tc);
    expect(sampleSum(after, "skipper_rpc_requests_total", labels) - sampleSum(before, "skipper_rpc_requests_total", labels)).toBe(2);
  });

  it("counters, histograms and gauges move as orders are created, claimed, finished and replayed", async () => {
    const before = await scrape(tc);
    const delta = (after: Map<string, Family>, name: string, labels: Record<string, string>) =>
      sampleSum(after, name, labels) - sampleSum(before, name, labels);
    const node = tc.client(NodeService, { token: nodeToken });
    const nodeOrders = tc.client(WorkOrderService, { token: nodeToken });
    await node.heartbeat({ nodeId: NODE, agentVersion: "test", heartbeatIntervalMs: 5000n });

    // A tenant placed on the node: the reconciler issues its deploy; the node claims and applies it.
    const resources = tc.client(ResourceService, { admin: true });
    await resources.createResource({
      resourceType: "tenant",
      resource: resource("tenant", TENANT, { deploymentPolicy: { targetNodeId: NODE } }),
    });
    await resources.createResource({
      resourceType: "service",
      resource: resource("service", SERVICE, { tenantId: TENANT, image: "busybox:stable", env: { DB_PASSWORD: SECRET } }),
    });
    await tc.controller.reconciler.idle();
    const deploy = (await node.getNextWorkOrder({ nodeId: NODE })).workOrder!;
    expect(deploy.type).toBe(WorkOrderType.DEPLOY_SERVICE);
    const claimed = (await nodeOrders.claimWorkOrder({ id: deploy.id })).workOrder!;
    await nodeOrders.reportWorkOrderResult({
      id: deploy.id,
      result: { success: true, code: "APPLY_OK" },
      fencingToken: claimed.claim!.fencingToken,
    });

    // An ad-hoc inspect sent twice with one idempotency key (one order), which fails with a code
    // the contract does not know; and one cancelled before any claim.
    const adHoc = (key: string) => tc.client(WorkOrderService, { admin: true, headers: { "x-idempotency-key": key } });
    const inspect = { type: WorkOrderType.INSPECT, target: { nodeId: NODE }, action: { kind: { case: "inspect" as const, value: {} } } };
    const first = (await adHoc("mx-key-1").createWorkOrder(inspect)).workOrder!;
    expect((await adHoc("mx-key-1").createWorkOrder(inspect)).workOrder!.id).toBe(first.id);
    await nodeOrders.claimWorkOrder({ id: first.id });
    await nodeOrders.reportWorkOrderResult({
      id: first.id,
      result: { success: false, code: "MADE_UP_CODE", message: `${FREE_TEXT} ${TENANT}` },
    });
    const dropped = (await adHoc("mx-key-2").createWorkOrder(inspect)).workOrder!;
    await tc.client(WorkOrderService, { admin: true }).cancelWorkOrder({ id: dropped.id, reason: FREE_TEXT });
    orderIds.push(deploy.id, first.id, dropped.id);
    await tc.controller.reconciler.idle();

    const after = await scrape(tc);
    expect(delta(after, "skipper_work_orders_created_total", { type: "deploy_service" })).toBe(1);
    expect(delta(after, "skipper_work_orders_created_total", { type: "inspect" })).toBe(2);
    expect(delta(after, "skipper_work_orders_finished_total", { type: "deploy_service", status: "success", code: "APPLY_OK" })).toBe(1);
    expect(delta(after, "skipper_work_orders_finished_total", { type: "inspect", status: "failed", code: "OTHER" })).toBe(1);
    expect(delta(after, "skipper_work_orders_finished_total", { type: "inspect", status: "cancelled", code: "CANCELLED" })).toBe(1);
    expect(delta(after, "skipper_work_order_dispatch_latency_seconds_count", { type: "deploy_service" })).toBe(1);
    expect(delta(after, "skipper_work_order_dispatch_latency_seconds_count", { type: "inspect" })).toBe(1);
    const claim = { service: "skipper.v1.WorkOrderService", method: "ClaimWorkOrder" };
    expect(delta(after, "skipper_rpc_requests_total", { ...claim, code: "ok" })).toBe(2);
    expect(delta(after, "skipper_rpc_duration_seconds_count", claim)).toBe(2);
    expect(delta(after, "skipper_idempotency_hits_total", { method: "CreateWorkOrder", result: "replayed" })).toBe(1);
    expect(delta(after, "skipper_reconcile_pass_duration_seconds_count", { result: "ok" })).toBeGreaterThan(0);
    expect(delta(after, "skipper_store_write_duration_seconds_count", { operation: "createWorkOrder" })).toBe(3);
    expect(delta(after, "skipper_store_write_duration_seconds_count", { operation: "finishWorkOrder" })).toBe(2);

    // The gauges, counted from the store at this scrape.
    expect(sampleSum(after, "skipper_nodes", { liveness: "online" })).toBe(1);
    expect(sampleSum(after, "skipper_nodes")).toBe(1);
    expect(sampleSum(after, "skipper_tenants")).toBe(1);
    expect(after.get("skipper_rollouts")?.samples.length).toBeGreaterThan(0);
    expect(sampleSum(after, "skipper_work_orders", { type: "deploy_service", status: "success" })).toBe(1);
    expect(sampleSum(after, "skipper_work_orders", { type: "inspect", status: "failed" })).toBe(1);
    expect(sampleSum(after, "skipper_work_orders", { type: "inspect", status: "cancelled" })).toBe(1);
    expect(sampleSum(after, "skipper_controller_leader")).toBe(1);
    expect(after.get("process_cpu_user_seconds_total")?.type).toBe("counter");
  });

  it("no label value is an id, a secret or text a caller chose, and only the documented label names appear", async () => {
    const r = await request(tc, "/metrics", { "x-admin-token": ADMIN_TOKEN });
    const families = parsePrometheusText(r.body);
    const forbidden = [NODE, TENANT, SERVICE, SECRET, FREE_TEXT, "MADE_UP_CODE", ...orderIds, ...keyIds];
    expect(orderIds).toHaveLength(3);
    for (const text of forbidden) expect(r.body).not.toContain(text);
    const names = new Set<string>();
    for (const f of families.values()) {
      if (!f.name.startsWith("skipper_")) continue;
      for (const s of f.samples) for (const name of Object.keys(s.labels)) names.add(name);
    }
    expect([...names].sort()).toEqual(
      ["code", "convergence", "le", "liveness", "method", "operation", "result", "service", "status", "store", "type", "version"].sort(),
    );
  });
});

describe("GET /metrics, more", () => {
  it("counts a lapsed lease by the order's type", async () => {
    const tc = await startController({ tls: true, leaseMs: 300 });
    try {
      const token = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: NODE })).token;
      const order = (
        await tc.client(WorkOrderService, { admin: true }).createWorkOrder({
          type: WorkOrderType.INSPECT,
          target: { nodeId: NODE },
          action: { kind: { case: "inspect", value: {} } },
        })
      ).workOrder!;
      // Claimed and never renewed: the lease monitor puts it back to pending.
      await tc.client(WorkOrderService, { token }).claimWorkOrder({ id: order.id });
      await until(async () => (await tc.controller.store.getWorkOrder(order.id))?.status === WorkOrderStatus.PENDING);
      expect(sampleSum(await scrape(tc), "skipper_work_order_leases_expired_total", { type: "inspect" })).toBe(1);
    } finally {
      await tc.stop();
    }
  });

  it("with --metrics-open, anyone who reaches the port may scrape", async () => {
    const tc = await startController({ tls: true, metricsOpen: true });
    try {
      const r = await request(tc, "/metrics");
      expect(r.status).toBe(200);
      expect(sampleSum(parsePrometheusText(r.body), "skipper_build_info")).toBe(1);
    } finally {
      await tc.stop();
    }
  });
});

describe("the fleet census", () => {
  it("reads the store at most once per period however often it is asked, and scrapes that meet share one count", async () => {
    let reads = 0;
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const store = {
      scanResources: async () => ({ items: [], nextPageToken: "" }),
      countWorkOrders: async () => {
        reads++;
        await gate;
        return [{ status: WorkOrderStatus.PENDING, type: WorkOrderType.INSPECT, count: reads }];
      },
    } as unknown as Store;
    let now = 0;
    const census = fleetCensus(store, { ttlMs: 5000, clock: () => now });
    const meeting = [census(), census(), census()];
    release();
    const counts = await Promise.all(meeting);
    expect(reads).toBe(1);
    expect(counts.every((c) => c === counts[0])).toBe(true);
    now = 4999;
    await census();
    expect(reads).toBe(1);
    now = 5000;
    expect((await census()).workOrders[0]?.count).toBe(2);
    expect(reads).toBe(2);
  });
});
