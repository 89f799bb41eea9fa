// The controller over its real transport: HTTP/2 + TLS with the generated CA, Connect protocol
// through the generated clients, plus gRPC (stock grpc-js client at canonical paths) and gRPC-Web.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile, readdir } from "node:fs/promises";
import { join } from "node:path";
import { Code, createClient } from "@connectrpc/connect";
import { createGrpcWebTransport, createConnectTransport } from "@connectrpc/connect-node";
import { fromJson, toBinary, fromBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { HealthService, CheckRequestSchema, CheckResponseSchema } from "../gen/skipper/v1/health_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { SnapshotService } from "../gen/skipper/v1/snapshot_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { ResourceSchema, DeploymentPhase } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus } from "../gen/skipper/v1/work_order_pb.js";
import { startController, ADMIN_TOKEN, type TestController } from "./helpers/controller.js";
import { SERVICES } from "../controller/server/build.js";
import { permissionOf } from "../controller/auth/permissions.js";
import { Permission } from "../gen/skipper/v1/access_pb.js";
import { rpcError } from "./helpers/errors.js";
import { waitFor } from "./helpers/processes.js";

let tc: TestController;
let nodeToken = "";
let otherNodeToken = "";

async function exampleTenant(id = "example-tenant", extraEnv: Record<string, string> = {}) {
  const json = JSON.parse(await readFile(new URL("../examples/tenant.json", import.meta.url), "utf8"));
  json.id = id;
  json.desired_state.tenant.compose.project_name = id;
  Object.assign(json.desired_state.tenant.compose.env, extraEnv);
  return fromJson(ResourceSchema, json);
}

beforeAll(async () => {
  tc = await startController({ tls: true, logToFile: true });
  const nodes = tc.client(NodeService, { admin: true });
  nodeToken = (await nodes.registerNode({ nodeId: "host-1", displayName: "Host one", labels: { env: "dev" } })).token;
  otherNodeToken = (await nodes.registerNode({ nodeId: "host-2" })).token;
});
afterAll(async () => {
  await tc?.stop();
});

describe("access policy", () => {
  it("every RPC of the contract declares the permission it needs, so a new one cannot go out without one", () => {
    const undeclared = SERVICES.flatMap((svc) => svc.methods.filter((m) => permissionOf(m) === Permission.UNSPECIFIED).map((m) => m.name));
    expect(undeclared).toEqual([]);
    expect(SERVICES.flatMap((svc) => svc.methods).length).toBeGreaterThan(30);
  });
});

describe("serving", () => {
  it("answers health over HTTP/2 + TLS with the envelope metadata and echoes the request id", async () => {
    let echoed = "";
    const res = await tc
      .client(HealthService)
      .check({}, { headers: { "x-request-id": "req-abc.1" }, onHeader: (h) => (echoed = h.get("x-request-id") ?? "") });
    expect(res.status).toBe("ok");
    expect(res.store).toBe("file");
    expect(res.meta?.schemaVersion).toBe("v1");
    expect(res.meta?.requestId).toBe("req-abc.1");
    expect(res.meta?.correlationId).toBe("req-abc.1");
    expect(echoed).toBe("req-abc.1");
  });

  it("serves gRPC at the canonical path to a stock grpc-js client", async () => {
    const creds = grpc.credentials.createSsl(Buffer.from(tc.ca!));
    const client = new grpc.Client(`127.0.0.1:${tc.serving.port}`, creds);
    const res = await new Promise<ReturnType<typeof fromBinary<typeof CheckResponseSchema>>>((resolve, reject) => {
      client.makeUnaryRequest(
        "/skipper.v1.HealthService/Check",
        (m: object) => Buffer.from(toBinary(CheckRequestSchema, m as never)),
        (b: Buffer) => fromBinary(CheckResponseSchema, b),
        {},
        new grpc.Metadata(),
        (err, value) => (err ? reject(err) : resolve(value!)),
      );
    });
    client.close();
    expect(res.status).toBe("ok");
    expect(res.meta?.schemaVersion).toBe("v1");
  });

  it("serves gRPC-Web and Connect over HTTP/1.1 under /v1", async () => {
    const web = createClient(
      HealthService,
      createGrpcWebTransport({ baseUrl: `${tc.url}/v1`, httpVersion: "1.1", nodeOptions: { ca: tc.ca } }),
    );
    expect((await web.check({})).status).toBe("ok");
    const h1 = createClient(
      HealthService,
      createConnectTransport({ baseUrl: `${tc.url}/v1`, httpVersion: "1.1", nodeOptions: { ca: tc.ca } }),
    );
    expect((await h1.check({})).status).toBe("ok");
  });

  it("refuses a TLS client that does not trust the generated CA", async () => {
    const untrusting = createClient(HealthService, createConnectTransport({ baseUrl: `${tc.url}/v1`, httpVersion: "2" }));
    const e = await rpcError(untrusting.check({}));
    // The handshake fails on the client before any request is sent: no skipper code, a TLS reason.
    expect(e.code).toBe("(no ApiError detail)");
    expect(e.message + String((e.err.cause as Error | undefined)?.message ?? "")).toMatch(/certificate/i);
  });
});

describe("auth", () => {
  it("rejects admin calls without a token, with a wrong token, and from a node token", async () => {
    expect((await rpcError(tc.client(ResourceService).listResources({}))).code).toBe("UNAUTHORIZED");
    const wrong = tc.client(ResourceService, { headers: { "x-admin-token": "not-the-admin-token" } });
    expect((await rpcError(wrong.listResources({}))).code).toBe("UNAUTHORIZED");
    const asNode = tc.client(ResourceService, { token: nodeToken });
    const e = await rpcError(asNode.listResources({}));
    expect(e.code).toBe("FORBIDDEN");
    expect(e.connectCode).toBe(Code.PermissionDenied);
  });

  it("accepts the admin token as a bearer token too", async () => {
    const res = await tc.client(ResourceService, { token: ADMIN_TOKEN }).listResources({ resourceType: "node" });
    expect(res.resources.map((r) => r.id)).toEqual(["host-1", "host-2"]);
  });

  it("lets a node act only on its own id", async () => {
    const asOther = tc.client(NodeService, { token: otherNodeToken });
    expect((await rpcError(asOther.heartbeat({ nodeId: "host-1" }))).code).toBe("FORBIDDEN");
    expect((await rpcError(asOther.getNextWorkOrder({ nodeId: "host-1" }))).code).toBe("FORBIDDEN");
    const ok = await asOther.heartbeat({ nodeId: "host-2", agentVersion: "test" });
    expect(ok.serverTime).toBeDefined();
  });

  it("refuses a node watching another node's orders with FORBIDDEN (permission denied), not an internal error", async () => {
    const asOther = tc.client(NodeService, { token: otherNodeToken });
    const watch = async () => {
      for await (const _ of asOther.watchWorkOrders({ nodeId: "host-1" })) return;
    };
    const e = await rpcError(watch());
    expect(e.code).toBe("FORBIDDEN");
    expect(e.connectCode).toBe(Code.PermissionDenied);
  });

  it("shows a node's last heartbeat, though a beat that changes nothing is stored at most every minute", async () => {
    const node = tc.client(NodeService, { token: otherNodeToken });
    const read = async () => {
      const r = (await tc.client(ResourceService, { admin: true }).getResource({ resourceType: "node", id: "host-2" })).resource!;
      return r.currentState?.kind.case === "node" ? timestampDate(r.currentState.kind.value.lastHeartbeatAt!).getTime() : 0;
    };
    const listed = async () => {
      const r = (await tc.client(ResourceService, { admin: true }).listResources({ resourceType: "node" })).resources.find(
        (x) => x.id === "host-2",
      )!;
      return r.currentState?.kind.case === "node" ? timestampDate(r.currentState.kind.value.lastHeartbeatAt!).getTime() : 0;
    };
    const beat = async () => timestampDate((await node.heartbeat({ nodeId: "host-2", agentVersion: "test" })).serverTime!).getTime();
    const first = await beat();
    // Beats until one comes at least a second after the first (by the controller's clock).
    const second = await waitFor(
      "a beat a second after the first",
      async () => {
        const at = await beat();
        return at - first >= 1000 ? at : undefined;
      },
      30_000,
      100,
    );
    expect(second - first).toBeGreaterThanOrEqual(1000);
    expect(await read()).toBe(second);
    expect(await listed()).toBe(second);
  });

  it("stores node tokens only as hashes", async () => {
    const raw = await readFile(join(tc.dataDir, "auth", "nodes", "host-1.json"), "utf8");
    expect(raw).not.toContain(nodeToken);
    expect(raw).toMatch(/[0-9a-f]{64}/);
  });

  it("invalidates the old token when it is rotated", async () => {
    const nodes = tc.client(NodeService, { admin: true });
    await nodes.registerNode({ nodeId: "host-3" }).catch(() => undefined);
    const first = (await nodes.rotateNodeToken({ nodeId: "host-3" })).token;
    const second = (await nodes.rotateNodeToken({ nodeId: "host-3" })).token;
    expect((await rpcError(tc.client(NodeService, { token: first }).heartbeat({ nodeId: "host-3" }))).code).toBe("UNAUTHORIZED");
    await tc.client(NodeService, { token: second }).heartbeat({ nodeId: "host-3" });
  });
});

describe("validation", () => {
  it.each(["../x", "..", "a/b", "/etc/passwd", "a\u0000b", "tënant", "x".repeat(200), ""])(
    "refuses the id %j with INVALID_REQUEST",
    async (id) => {
      const e = await rpcError(tc.client(ResourceService, { admin: true }).getResource({ resourceType: "tenant", id }));
      expect(e.code).toBe("INVALID_REQUEST");
      expect(e.details.field).toBe("id");
    },
  );

  it("refuses an unknown resource type and a spec of the wrong kind", async () => {
    const rs = tc.client(ResourceService, { admin: true });
    expect((await rpcError(rs.listResources({ resourceType: "secrets" }))).code).toBe("INVALID_REQUEST");
    const tenant = await exampleTenant("wrong-kind");
    const e = await rpcError(rs.createResource({ resourceType: "service", resource: { ...tenant, resourceType: "" } }));
    expect(e.code).toBe("INVALID_REQUEST");
  });

  it("refuses malformed request and correlation id headers", async () => {
    const e = await rpcError(tc.client(HealthService).check({}, { headers: { "x-request-id": "bad id with spaces" } }));
    expect(e.code).toBe("INVALID_REQUEST");
  });
});

describe("resources", () => {
  it("creates idempotently and refuses a different spec under the same id", async () => {
    const rs = tc.client(ResourceService, { admin: true });
    const tenant = await exampleTenant("idem-tenant");
    const a = await rs.createResource({ resourceType: "tenant", resource: tenant });
    const b = await rs.createResource({ resourceType: "tenant", resource: tenant });
    expect(b.resource?.metadata?.resourceVersion).toBe(a.resource?.metadata?.resourceVersion);
    const changed = await exampleTenant("idem-tenant", { GREETING: "different" });
    expect((await rpcError(rs.createResource({ resourceType: "tenant", resource: changed }))).code).toBe("CONFLICT");
  });

  it("replaces desired_state with a resource_version precondition and refuses a stale one", async () => {
    const rs = tc.client(ResourceService, { admin: true });
    await rs.createResource({ resourceType: "tenant", resource: await exampleTenant("versioned") });
    // The reconciler writes the tenant's status too; read the version once it is done.
    await tc.controller.reconciler.idle();
    const created = (await rs.getResource({ resourceType: "tenant", id: "versioned" })).resource!;
    const v1 = created.metadata!.resourceVersion;
    const next = await exampleTenant("versioned", { GREETING: "v2" });
    const updated = (
      await rs.updateResource({ resourceType: "tenant", id: "versioned", desiredState: next.desiredState, resourceVersion: v1 })
    ).resource!;
    expect(BigInt(updated.metadata!.resourceVersion)).toBeGreaterThan(BigInt(v1));
    await tc.controller.reconciler.idle();
    const before = (await rs.getResource({ resourceType: "tenant", id: "versioned" })).resource!;
    const e = await rpcError(
      rs.updateResource({ resourceType: "tenant", id: "versioned", desiredState: created.desiredState, resourceVersion: v1 }),
    );
    expect(e.code).toBe("CONFLICT");
    const after = (await rs.getResource({ resourceType: "tenant", id: "versioned" })).resource!;
    expect(after.metadata!.resourceVersion).toBe(before.metadata!.resourceVersion);
    expect(after.desiredState).toEqual(updated.desiredState);
    const types = (await tc.client(EventService, { admin: true }).listEvents({ resourceId: "versioned" })).events
      .map((e) => e.type)
      .filter((t) => t.startsWith("resource_") || t === "desired_state_changed");
    expect(types).toEqual(["resource_created", "resource_updated", "desired_state_changed"]);
  });

  it("returns RESOURCE_NOT_FOUND with the type and id in details", async () => {
    const e = await rpcError(tc.client(ResourceService, { admin: true }).getResource({ resourceType: "tenant", id: "nope" }));
    expect(e.code).toBe("RESOURCE_NOT_FOUND");
    expect(e.details).toEqual({ resource_type: "tenant", resource_id: "nope" });
  });
});

describe("deploy flow", () => {
  it("applies a tenant, hands the order to its node, and records the outcome everywhere", async () => {
    const rs = tc.client(ResourceService, { admin: true });
    await rs.createResource(
      { resourceType: "tenant", resource: await exampleTenant("flow-tenant", { DB_PASSWORD: "hunter2-secret" }) },
      { headers: { "x-request-id": "create-req-1", "x-correlation-id": "corr-flow-1" } },
    );
    // The reconciler deploys the new tenant once its writes settle; Apply returns that order rather than a second.
    await tc.controller.reconciler.idle();
    const apply = await tc
      .client(DeploymentService, { admin: true })
      .apply(
        { tenantId: "flow-tenant", nodeId: "host-1" },
        { headers: { "x-request-id": "apply-req-1", "x-correlation-id": "corr-flow-2" } },
      );
    const order = apply.workOrder!;
    expect(order.status).toBe(WorkOrderStatus.PENDING);
    expect(order.requestId).toBe("create-req-1");
    expect(order.correlationId).toBe("corr-flow-1");
    expect((await tc.client(WorkOrderService, { admin: true }).listWorkOrders({ tenantId: "flow-tenant" })).workOrders).toHaveLength(1);
    expect(order.target).toMatchObject({ tenantId: "flow-tenant", nodeId: "host-1" });
    expect(order.desiredState?.composeProject?.env.DB_PASSWORD).toBe("hunter2-secret");
    expect(apply.deployment?.desiredState?.kind.case).toBe("deployment");

    const node = tc.client(NodeService, { token: nodeToken });
    const wo = tc.client(WorkOrderService, { token: nodeToken });
    // Other tenants of this file deploy to host-1 too: the order is among the node's pending ones.
    const next = await node.getNextWorkOrder({ nodeId: "host-1" });
    expect(next.workOrder?.target?.nodeId).toBe("host-1");
    const pendingIds = (
      await tc.client(WorkOrderService, { admin: true }).listWorkOrders({ nodeId: "host-1", status: WorkOrderStatus.PENDING })
    ).workOrders.map((o) => o.id);
    expect(pendingIds).toContain(order.id);
    const otherWo = tc.client(WorkOrderService, { token: otherNodeToken });
    expect((await rpcError(otherWo.claimWorkOrder({ id: order.id }))).code).toBe("FORBIDDEN");

    const claimed = await wo.claimWorkOrder({ id: order.id });
    expect(claimed.workOrder?.status).toBe(WorkOrderStatus.RUNNING);
    expect(claimed.workOrder?.claim?.nodeId).toBe("host-1");
    expect((await node.getNextWorkOrder({ nodeId: "host-1" })).workOrder?.id).not.toBe(order.id);

    const result = {
      success: true,
      code: "APPLY_OK",
      message: "Desired state applied",
      details: { durationMs: 12n, composePath: "/opt/skipper/tenants/flow-tenant/docker-compose.yml", changedResources: ["service-web"] },
    };
    const done = await wo.reportWorkOrderResult({ id: order.id, result });
    expect(done.duplicate).toBe(false);
    expect(done.workOrder?.status).toBe(WorkOrderStatus.SUCCESS);
    const again = await wo.reportWorkOrderResult({
      id: order.id,
      result: { success: false, code: "COMPOSE_FAILED", message: "late duplicate" },
    });
    expect(again.duplicate).toBe(true);
    expect(again.workOrder?.result?.code).toBe("APPLY_OK");
    expect(again.workOrder?.finishedAt).toEqual(done.workOrder?.finishedAt);

    const dep = (await rs.getResource({ resourceType: "deployment", id: apply.deployment!.id })).resource!;
    expect(dep.currentState?.kind.case === "deployment" && dep.currentState.kind.value.phase).toBe(DeploymentPhase.SUCCEEDED);
    const tenant = (await rs.getResource({ resourceType: "tenant", id: "flow-tenant" })).resource!;
    expect(tenant.currentState?.kind.case === "tenant" && tenant.currentState.kind.value.resultCode).toBe("APPLY_OK");
    expect(tenant.lastAppliedState?.kind.case).toBe("tenant");

    // Reading the snapshot writes the one still owed (writes are coalesced, off the report's path).
    const snap = (await tc.client(SnapshotService, { admin: true }).getTenantSnapshot({ tenantId: "flow-tenant" })).snapshot!;
    const events = (await tc.client(EventService, { admin: true }).listEvents({ correlationId: "corr-flow-1" })).events;
    const types = events.map((e) => e.type);
    for (const t of [
      "deployment_started",
      "work_order_created",
      "work_order_started",
      "work_order_succeeded",
      "deployment_succeeded",
      "snapshot_created",
    ]) {
      expect(types).toContain(t);
    }
    expect(types.filter((t) => t === "work_order_succeeded")).toHaveLength(1);

    expect(snap.scope).toBe("tenant");
    expect(snap.correlationId).toBe("corr-flow-1");
    const diff = snap.diffs.find((d) => d.resourceType === "tenant" && d.resourceId === "flow-tenant");
    expect(diff?.changes, JSON.stringify(diff?.changes)).toEqual([]);
    expect(diff?.inSync).toBe(true);
    const snapText = await readFile(join(tc.dataDir, "snapshots", "tenants", "flow-tenant.json"), "utf8");
    expect(snapText).toContain("[REDACTED]");
    expect(snapText).not.toContain("hunter2-secret");
    const system = (await tc.client(SnapshotService, { admin: true }).getSystemSnapshot({})).snapshot!;
    expect(system.resources.length).toBeGreaterThanOrEqual(3);
  });

  it("lets exactly one of many simultaneous claims win", async () => {
    await tc
      .client(ResourceService, { admin: true })
      .createResource({ resourceType: "tenant", resource: await exampleTenant("race-tenant") });
    const order = (await tc.client(DeploymentService, { admin: true }).apply({ tenantId: "race-tenant" })).workOrder!;
    const wo = tc.client(WorkOrderService, { token: nodeToken });
    const outcomes = await Promise.allSettled(Array.from({ length: 12 }, () => wo.claimWorkOrder({ id: order.id })));
    const wins = outcomes.filter((o) => o.status === "fulfilled");
    expect(wins).toHaveLength(1);
    for (const o of outcomes.filter((o) => o.status === "rejected")) {
      const e = await rpcError(Promise.reject((o as PromiseRejectedResult).reason));
      expect(e.code).toBe("WORK_ORDER_NOT_CLAIMABLE");
      expect(e.connectCode).toBe(Code.FailedPrecondition);
    }
  });

  it("replays an apply with the same idempotency key and refuses the key with another body", async () => {
    await tc
      .client(ResourceService, { admin: true })
      .createResource({ resourceType: "tenant", resource: await exampleTenant("idem-apply") });
    const dep = tc.client(DeploymentService, { admin: true });
    const h = { headers: { "x-idempotency-key": "apply-once-123" } };
    const [a, b] = await Promise.all([dep.apply({ tenantId: "idem-apply" }, h), dep.apply({ tenantId: "idem-apply" }, h)]);
    expect(b.workOrder?.id).toBe(a.workOrder?.id);
    expect(b.deployment?.id).toBe(a.deployment?.id);
    const list = await tc.client(WorkOrderService, { admin: true }).listWorkOrders({ tenantId: "idem-apply" });
    expect(list.workOrders).toHaveLength(1);
    const e = await rpcError(dep.apply({ tenantId: "idem-apply", nodeId: "host-2" }, h));
    expect(e.code).toBe("CONFLICT");
    const files = await readdir(join(tc.dataDir, "idempotency"));
    expect(files.some((f) => f.includes("apply-once-123"))).toBe(false);
  });

  it("refuses to apply a tenant whose node is unknown", async () => {
    const t = await exampleTenant("orphan");
    if (t.desiredState?.kind.case === "tenant") t.desiredState.kind.value.deploymentPolicy!.targetNodeId = "ghost-node";
    await tc.client(ResourceService, { admin: true }).createResource({ resourceType: "tenant", resource: t });
    const e = await rpcError(tc.client(DeploymentService, { admin: true }).apply({ tenantId: "orphan" }));
    expect(e.code).toBe("RESOURCE_NOT_FOUND");
  });
});

describe("observability", () => {
  it("writes structured logs with request ids and without secrets", async () => {
    const day = new Date().toISOString().slice(0, 10);
    // Logs are written asynchronously: wait for the apply's line to reach the file (complete
    // lines only: the stream may be mid-write).
    const text = await waitFor(
      "the apply's log line",
      async () => {
        const all = await readFile(join(tc.dataDir, "logs", day, "skipper-controller.ndjson"), "utf8").catch(() => "");
        const complete = all.slice(0, all.lastIndexOf("\n") + 1);
        return complete
          .split("\n")
          .some((l) => l.includes('"request_id":"apply-req-1"') && l.includes('"action":"DeploymentService.Apply"'))
          ? complete
          : undefined;
      },
      30_000,
      50,
    );
    const lines = text
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    const apply = lines.find((l) => l.request_id === "apply-req-1" && l.action === "DeploymentService.Apply");
    expect(apply).toMatchObject({ level: "info", service: "skipper-controller", correlation_id: "corr-flow-2", result: "ok" });
    expect(typeof apply.timestamp).toBe("string");
    expect(text).not.toContain(ADMIN_TOKEN);
    expect(text).not.toContain(nodeToken);
    expect(text).not.toContain("hunter2-secret");
  });
});
