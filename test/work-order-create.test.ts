// WorkOrderService.CreateWorkOrder inside a real controller (file store, plain HTTP so the REST
// route can be called with fetch), with the test playing the node's agent over the API: what an
// admin may queue, what is refused before anything is stored, idempotency keys, expiry, rollback
// resolution and what the reconciler does after a rollback.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import { create, equals, type MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs, durationMs, timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type CreateWorkOrderRequestSchema, WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import type { Event } from "../gen/skipper/v1/event_pb.js";
import { ProcessOperation, WorkOrderActionSchema } from "../gen/skipper/v1/order_action_pb.js";
import { ConvergenceStatus, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { startController, ADMIN_TOKEN, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { waitFor } from "./helpers/processes.js";

type CreateInit = MessageInitShape<typeof CreateWorkOrderRequestSchema>;
type ActionInit = NonNullable<CreateInit["action"]>;

let tc: TestController;
let seq = 0;

const admin = () => tc.client(WorkOrderService, { admin: true });
const resources = () => tc.client(ResourceService, { admin: true });
const sha256 = (b: Uint8Array | string) => createHash("sha256").update(b).digest("hex");
const inMs = (ms: number) => timestampFromDate(new Date(Date.now() + ms));

/** A fresh id, so every test works on nodes and tenants of its own. */
const uid = (prefix: string) => `${prefix}-${++seq}`;

/** Registers a node; returns its id and token. */
async function node(prefix = "wo-node"): Promise<{ id: string; token: string }> {
  const id = uid(prefix);
  const { token } = await tc.client(NodeService, { admin: true }).registerNode({ nodeId: id });
  return { id, token };
}

/** A tenant with no placement: the reconciler issues nothing for it. */
async function idleTenant(prefix = "wo-tenant"): Promise<string> {
  const id = uid(prefix);
  await resources().createResource({
    resourceType: "tenant",
    resource: create(ResourceSchema, {
      id,
      resourceType: "tenant",
      desiredState: { kind: { case: "tenant", value: { displayName: id } } },
    }),
  });
  return id;
}

/** A tenant with a compose project placed on `nodeId`. */
function composeTenant(id: string, nodeId: string, env: Record<string, string>) {
  return create(ResourceSchema, {
    id,
    resourceType: "tenant",
    desiredState: {
      kind: {
        case: "tenant",
        value: {
          deploymentPolicy: { targetNodeId: nodeId },
          compose: { projectName: id, composeFile: "services:\n  app:\n    image: busybox\n", env },
        },
      },
    },
  });
}

async function allOrders(filter: { nodeId?: string; tenantId?: string } = {}): Promise<WorkOrder[]> {
  const out: WorkOrder[] = [];
  let pageToken = "";
  do {
    const page = await admin().listWorkOrders({ ...filter, pageSize: 1000, pageToken });
    out.push(...page.workOrders);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return out;
}

async function events(filter: { type?: string; workOrderId?: string; tenantId?: string }): Promise<Event[]> {
  const out: Event[] = [];
  let pageToken = "";
  do {
    const page = await tc.client(EventService, { admin: true }).listEvents({ ...filter, pageSize: 1000, pageToken });
    out.push(...page.events);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return out;
}

/** What "nothing was stored" compares: every order, and every work_order_created event. */
async function footprint(): Promise<{ orders: number; created: number }> {
  return { orders: (await allOrders()).length, created: (await events({ type: "work_order_created" })).length };
}

async function getOrder(id: string): Promise<WorkOrder> {
  return (await admin().getWorkOrder({ id })).workOrder!;
}

/** Claims `id` as the node and reports `result` with the claim's fencing token. */
async function claimAndFinish(token: string, id: string, result: { success: boolean; code: string; message?: string }): Promise<WorkOrder> {
  const wo = tc.client(WorkOrderService, { token });
  const claimed = (await wo.claimWorkOrder({ id })).workOrder!;
  const done = await wo.reportWorkOrderResult({ id, result: { message: "", ...result }, fencingToken: claimed.claim!.fencingToken });
  return done.workOrder!;
}

beforeAll(async () => {
  tc = await startController({ tls: false });
});
afterAll(async () => {
  await tc?.stop();
});

describe("CreateWorkOrder refuses bad input and stores nothing", () => {
  let n = "";
  let tenant = "";
  beforeAll(async () => {
    n = (await node("bad-node")).id;
    tenant = await idleTenant("bad-tenant");
  });

  const upload = (path: string, content = "hello\n", hash?: string): ActionInit => ({
    kind: {
      case: "uploadFiles",
      value: { files: [{ path, content: new TextEncoder().encode(content), sha256: hash ?? sha256(content) }] },
    },
  });
  const command = (...argv: string[]): ActionInit => ({ kind: { case: "executeCommand", value: { command: { argv } } } });
  const inspect: ActionInit = { kind: { case: "inspect", value: {} } };
  const goodSpec = {
    module: "web-app",
    version: "1.2.3",
    source: { kind: { case: "url" as const, value: "https://example.com/web-app.tar.gz" } },
    sha256: "a".repeat(64),
    argv: ["bin/server"],
  };

  const cases: Array<[string, () => CreateInit, string]> = [
    [
      "a deploy_service order (the reconciler's)",
      () => ({ type: WorkOrderType.DEPLOY_SERVICE, target: { nodeId: n, tenantId: tenant } }),
      "type",
    ],
    [
      "a remove_service order (the reconciler's)",
      () => ({ type: WorkOrderType.REMOVE_SERVICE, target: { nodeId: n, tenantId: tenant } }),
      "type",
    ],
    [
      "an action that does not match the type",
      () => ({ type: WorkOrderType.INSPECT, target: { nodeId: n }, action: { kind: { case: "restartService", value: {} } } }),
      "action",
    ],
    ["a missing node", () => ({ type: WorkOrderType.INSPECT, action: inspect }), "target.node_id"],
    [
      "a tenant on an execute_command order",
      () => ({ type: WorkOrderType.EXECUTE_COMMAND, target: { nodeId: n, tenantId: tenant }, action: command("echo", "hi") }),
      "target.tenant_id",
    ],
    [
      "an upload path that climbs out (../x)",
      () => ({ type: WorkOrderType.UPLOAD_FILES, target: { nodeId: n }, action: upload("../x") }),
      "action.upload_files.files[0].path",
    ],
    [
      "an absolute upload path",
      () => ({ type: WorkOrderType.UPLOAD_FILES, target: { nodeId: n }, action: upload("/etc/passwd") }),
      "action.upload_files.files[0].path",
    ],
    [
      "an upload over the agent's docker-compose.yml",
      () => ({ type: WorkOrderType.UPLOAD_FILES, target: { nodeId: n, tenantId: tenant }, action: upload("docker-compose.yml") }),
      "action.upload_files.files[0].path",
    ],
    [
      "an upload whose sha256 does not match its content",
      () => ({ type: WorkOrderType.UPLOAD_FILES, target: { nodeId: n }, action: upload("a.txt", "hello\n", sha256("other")) }),
      "action.upload_files.files[0].sha256",
    ],
    [
      "a shell string as argv[0] (sh -c)",
      () => ({ type: WorkOrderType.EXECUTE_COMMAND, target: { nodeId: n }, action: command("sh -c", "id") }),
      "action.execute_command.command.argv",
    ],
    [
      "shell syntax in argv[0] (echo;id)",
      () => ({ type: WorkOrderType.EXECUTE_COMMAND, target: { nodeId: n }, action: command("echo;id") }),
      "action.execute_command.command.argv",
    ],
    [
      "a file:// health probe",
      () => ({
        type: WorkOrderType.HEALTH_CHECK,
        target: { nodeId: n },
        action: { kind: { case: "healthCheck", value: { probes: [{ kind: { case: "http", value: { url: "file:///etc/passwd" } } }] } } },
      }),
      "action.health_check.probes[0].http.url",
    ],
    [
      "a tcp probe on port 0",
      () => ({
        type: WorkOrderType.HEALTH_CHECK,
        target: { nodeId: n },
        action: { kind: { case: "healthCheck", value: { probes: [{ kind: { case: "tcp", value: { host: "127.0.0.1", port: 0 } } }] } } },
      }),
      "action.health_check.probes[0].tcp.port",
    ],
    [
      "an expires_at in the past",
      () => ({ type: WorkOrderType.INSPECT, target: { nodeId: n }, action: inspect, expiresAt: inMs(-60_000) }),
      "expires_at",
    ],
    [
      "a timeout over 24h",
      () => ({ type: WorkOrderType.INSPECT, target: { nodeId: n }, action: inspect, timeout: durationFromMs(24 * 3600_000 + 1000) }),
      "timeout",
    ],
    ["max_attempts 11", () => ({ type: WorkOrderType.INSPECT, target: { nodeId: n }, action: inspect, maxAttempts: 11 }), "max_attempts"],
    [
      "a deploy_process module name that is not one",
      () => ({
        type: WorkOrderType.DEPLOY_PROCESS,
        target: { nodeId: n },
        action: { kind: { case: "deployProcess", value: { spec: { ...goodSpec, module: "Web_App" } } } },
      }),
      "action.deploy_process.spec.module",
    ],
    [
      "a deploy_process without sha256",
      () => ({
        type: WorkOrderType.DEPLOY_PROCESS,
        target: { nodeId: n },
        action: { kind: { case: "deployProcess", value: { spec: { ...goodSpec, sha256: "" } } } },
      }),
      "action.deploy_process.spec.sha256",
    ],
    [
      "a control_process without operation",
      () => ({
        type: WorkOrderType.CONTROL_PROCESS,
        target: { nodeId: n },
        action: { kind: { case: "controlProcess", value: { module: "web-app" } } },
      }),
      "action.control_process.operation",
    ],
    [
      "a rollback without a tenant",
      () => ({ type: WorkOrderType.ROLLBACK, target: { nodeId: n }, action: { kind: { case: "rollback", value: {} } } }),
      "target.tenant_id",
    ],
    [
      "the same upload path twice",
      () => ({
        type: WorkOrderType.UPLOAD_FILES,
        target: { nodeId: n },
        action: {
          kind: {
            case: "uploadFiles",
            value: {
              files: [
                { path: "a.txt", sha256: sha256("") },
                { path: "a.txt", sha256: sha256("") },
              ],
            },
          },
        },
      }),
      "action.upload_files.files[1].path",
    ],
    [
      "a restart_service service name with ';'",
      () => ({
        type: WorkOrderType.RESTART_SERVICE,
        target: { nodeId: n, tenantId: tenant },
        action: { kind: { case: "restartService", value: { services: ["web;reboot"] } } },
      }),
      "action.restart_service.services[0]",
    ],
  ];

  it.each(cases)("refuses %s with INVALID_REQUEST naming the field", async (_name, req, field) => {
    const before = await footprint();
    const e = await rpcError(admin().createWorkOrder(req()));
    expect(e.code).toBe("INVALID_REQUEST");
    expect(e.connectCode).toBe(Code.InvalidArgument);
    expect(e.details.field).toBe(field);
    expect(await footprint()).toEqual(before);
  });
});

describe("CreateWorkOrder checks its node and tenant", () => {
  it("refuses an unknown node and an unknown tenant with RESOURCE_NOT_FOUND", async () => {
    const before = await footprint();
    const ghost = await rpcError(
      admin().createWorkOrder({
        type: WorkOrderType.INSPECT,
        target: { nodeId: "no-such-node" },
        action: { kind: { case: "inspect", value: {} } },
      }),
    );
    expect(ghost.code).toBe("RESOURCE_NOT_FOUND");
    expect(ghost.connectCode).toBe(Code.NotFound);
    expect(ghost.details).toMatchObject({ resource_type: "node", resource_id: "no-such-node" });
    const { id } = await node();
    const noTenant = await rpcError(
      admin().createWorkOrder({
        type: WorkOrderType.READ_STICKER,
        target: { nodeId: id, tenantId: "no-such-tenant" },
        action: { kind: { case: "readSticker", value: {} } },
      }),
    );
    expect(noTenant.code).toBe("RESOURCE_NOT_FOUND");
    expect(noTenant.connectCode).toBe(Code.NotFound);
    expect(noTenant.details).toMatchObject({ resource_type: "tenant", resource_id: "no-such-tenant" });
    expect(await footprint()).toEqual(before);
  });

  it("refuses a disabled node with CONFLICT, reason NODE_DISABLED", async () => {
    const { id } = await node("disabled-node");
    await resources().updateResource({
      resourceType: "node",
      id,
      desiredState: { kind: { case: "node", value: { displayName: id, disabled: true } } },
    });
    const before = await footprint();
    const e = await rpcError(
      admin().createWorkOrder({ type: WorkOrderType.INSPECT, target: { nodeId: id }, action: { kind: { case: "inspect", value: {} } } }),
    );
    expect(e.code).toBe("CONFLICT");
    expect(e.connectCode).toBe(Code.Aborted); // controller/boundary/interceptors.ts maps CONFLICT to Aborted
    expect(e.details.reason).toBe("NODE_DISABLED");
    expect(await footprint()).toEqual(before);
  });

  it("refuses a program not on the node's reported allow-list and accepts one that is", async () => {
    const { id, token } = await node("allow-node");
    await tc.client(NodeService, { token }).heartbeat({ nodeId: id, agentVersion: "test", capabilities: { allowedCommands: ["echo"] } });
    const before = await footprint();
    const e = await rpcError(
      admin().createWorkOrder({
        type: WorkOrderType.EXECUTE_COMMAND,
        target: { nodeId: id },
        action: { kind: { case: "executeCommand", value: { command: { argv: ["ls", "/"] } } } },
      }),
    );
    expect(e.code).toBe("CONFLICT");
    expect(e.details.reason).toBe("COMMAND_NOT_ALLOWED");
    expect(e.details.field).toBe("action.execute_command.command.argv");
    expect(await footprint()).toEqual(before);

    const action = create(WorkOrderActionSchema, {
      kind: {
        case: "executeCommand",
        value: { command: { argv: ["echo", "hello", "$(id)"], timeout: durationFromMs(5000), env: { LANG: "C" } } },
      },
    });
    const ok = (await admin().createWorkOrder({ type: WorkOrderType.EXECUTE_COMMAND, target: { nodeId: id }, action })).workOrder!;
    expect(ok.status).toBe(WorkOrderStatus.PENDING);
    expect(equals(WorkOrderActionSchema, ok.action!, action)).toBe(true);
    expect(equals(WorkOrderActionSchema, (await getOrder(ok.id)).action!, action)).toBe(true);
  });

  it("accepts any program for a node that never reported capabilities (its agent decides)", async () => {
    const { id } = await node("silent-node");
    const res = await admin().createWorkOrder({
      type: WorkOrderType.EXECUTE_COMMAND,
      target: { nodeId: id },
      action: { kind: { case: "executeCommand", value: { command: { argv: ["uptime"] } } } },
    });
    expect(res.workOrder?.status).toBe(WorkOrderStatus.PENDING);
  });

  it("refuses a node token: CreateWorkOrder is for admins", async () => {
    const { id, token } = await node();
    const before = await footprint();
    const e = await rpcError(
      tc
        .client(WorkOrderService, { token })
        .createWorkOrder({ type: WorkOrderType.INSPECT, target: { nodeId: id }, action: { kind: { case: "inspect", value: {} } } }),
    );
    expect(e.code).toBe("FORBIDDEN");
    expect(e.connectCode).toBe(Code.PermissionDenied);
    expect(await footprint()).toEqual(before);
  });
});

describe("CreateWorkOrder queues a valid order of each ad-hoc type", () => {
  let tenant = "";
  beforeAll(async () => {
    tenant = await idleTenant("adhoc-tenant");
  });
  const content = new TextEncoder().encode("listen 8080\nsecret-upload-body\n");

  interface Case {
    type: WorkOrderType;
    tenant: boolean;
    action: ActionInit;
    /** What the work_order_created event says beyond its type. */
    event: Record<string, unknown>;
  }
  const cases: Record<string, Case> = {
    restart_service: {
      type: WorkOrderType.RESTART_SERVICE,
      tenant: true,
      action: { kind: { case: "restartService", value: { services: ["web", "worker"] } } },
      event: {},
    },
    health_check: {
      type: WorkOrderType.HEALTH_CHECK,
      tenant: false,
      action: {
        kind: {
          case: "healthCheck",
          value: {
            probes: [
              { kind: { case: "http", value: { url: "http://127.0.0.1:8080/health", expectStatus: 200 } } },
              { kind: { case: "tcp", value: { host: "127.0.0.1", port: 5432 } }, timeout: durationFromMs(2000) },
            ],
          },
        },
      },
      event: {},
    },
    inspect: { type: WorkOrderType.INSPECT, tenant: false, action: { kind: { case: "inspect", value: {} } }, event: {} },
    execute_command: {
      type: WorkOrderType.EXECUTE_COMMAND,
      tenant: false,
      action: { kind: { case: "executeCommand", value: { command: { argv: ["echo", "secret-argument-xyz"] } } } },
      event: { program: "echo" },
    },
    upload_files: {
      type: WorkOrderType.UPLOAD_FILES,
      tenant: true,
      action: {
        kind: { case: "uploadFiles", value: { files: [{ path: "conf/app.conf", content, sha256: sha256(content), mode: 0o640 }] } },
      },
      event: { paths: ["conf/app.conf"] },
    },
    write_sticker: {
      type: WorkOrderType.WRITE_STICKER,
      tenant: true,
      action: {
        kind: {
          case: "writeSticker",
          value: { sticker: { releaseId: "r-1", deploymentId: "d-1", imageDigests: { web: `sha256:${"b".repeat(64)}` } } },
        },
      },
      event: {},
    },
    read_sticker: { type: WorkOrderType.READ_STICKER, tenant: true, action: { kind: { case: "readSticker", value: {} } }, event: {} },
    deploy_process: {
      type: WorkOrderType.DEPLOY_PROCESS,
      tenant: false,
      action: {
        kind: {
          case: "deployProcess",
          value: {
            spec: {
              module: "web-app",
              version: "1.2.3",
              source: { kind: { case: "path", value: "/srv/artifacts/web-app-1.2.3.tar.gz" } },
              sha256: "c".repeat(64),
              argv: ["bin/server", "--port", "8080"],
              env: { PORT: "8080" },
            },
          },
        },
      },
      event: { module: "web-app", version: "1.2.3" },
    },
    control_process: {
      type: WorkOrderType.CONTROL_PROCESS,
      tenant: false,
      action: { kind: { case: "controlProcess", value: { module: "web-app", operation: ProcessOperation.RESTART } } },
      event: { module: "web-app" },
    },
  };

  it.each(Object.entries(cases))("stores %s PENDING as sent, hands it to its node and records work_order_created", async (name, c) => {
    const { id: nodeId, token } = await node(`adhoc-${name.replace(/_/g, "-")}`);
    const action = create(WorkOrderActionSchema, c.action);
    const expiresAt = inMs(3600_000);
    const res = await admin().createWorkOrder({
      type: c.type,
      target: { nodeId, tenantId: c.tenant ? tenant : "" },
      action,
      priority: 7,
      timeout: durationFromMs(90_000),
      expiresAt,
      maxAttempts: 0,
    });
    const order = res.workOrder!;
    expect(res.meta?.schemaVersion).toBe("v1");
    const stored = await getOrder(order.id);
    for (const o of [order, stored]) {
      expect(o.status).toBe(WorkOrderStatus.PENDING);
      expect(o.type).toBe(c.type);
      expect(o.target).toMatchObject({ nodeId, tenantId: c.tenant ? tenant : "" });
      expect(equals(WorkOrderActionSchema, o.action!, action)).toBe(true);
      expect(o.priority).toBe(7);
      expect(durationMs(o.timeout!)).toBe(90_000);
      expect(timestampDate(o.expiresAt!).getTime()).toBe(timestampDate(expiresAt).getTime());
      expect(o.maxAttempts).toBe(1);
      expect(o.desiredState).toBeUndefined();
    }
    const next = await tc.client(NodeService, { token }).getNextWorkOrder({ nodeId });
    expect(next.workOrder?.id).toBe(order.id);
    expect(equals(WorkOrderActionSchema, next.workOrder!.action!, action)).toBe(true);

    const created = await events({ type: "work_order_created", workOrderId: order.id });
    expect(created).toHaveLength(1);
    expect(created[0]!.nodeId).toBe(nodeId);
    expect(created[0]!.data).toMatchObject({ type: name, ...c.event });
    const text = JSON.stringify(created[0]!.data);
    expect(text).not.toContain("secret-argument-xyz");
    expect(text).not.toContain("secret-upload-body");
    expect(text).not.toContain(Buffer.from(content).toString("base64"));
  });

  it("keeps max_attempts when one is given", async () => {
    const { id } = await node();
    const o = (
      await admin().createWorkOrder({
        type: WorkOrderType.INSPECT,
        target: { nodeId: id },
        action: { kind: { case: "inspect", value: {} } },
        maxAttempts: 3,
      })
    ).workOrder!;
    expect(o.maxAttempts).toBe(3);
    expect(o.timeout).toBeUndefined();
    expect(o.expiresAt).toBeUndefined();
  });
});

describe("x-idempotency-key", () => {
  it("a retry with the same key and body returns the first order and creates nothing more", async () => {
    const { id } = await node("idem-node");
    const req: CreateInit = { type: WorkOrderType.INSPECT, target: { nodeId: id }, action: { kind: { case: "inspect", value: {} } } };
    const h = { headers: { "x-idempotency-key": `create-${id}` } };
    const [a, b] = await Promise.all([admin().createWorkOrder(req, h), admin().createWorkOrder(req, h)]);
    const c = await admin().createWorkOrder(req, h);
    expect(b.workOrder?.id).toBe(a.workOrder?.id);
    expect(c.workOrder?.id).toBe(a.workOrder?.id);
    expect(c.workOrder?.status).toBe(WorkOrderStatus.PENDING);
    expect((await allOrders({ nodeId: id })).map((o) => o.id)).toEqual([a.workOrder!.id]);
    expect(await events({ type: "work_order_created", workOrderId: a.workOrder!.id })).toHaveLength(1);
  });

  it("the same key with another body is a CONFLICT and creates nothing", async () => {
    const { id } = await node("idem-node");
    const h = { headers: { "x-idempotency-key": `create-${id}` } };
    await admin().createWorkOrder(
      { type: WorkOrderType.INSPECT, target: { nodeId: id }, action: { kind: { case: "inspect", value: {} } } },
      h,
    );
    const before = await footprint();
    const e = await rpcError(
      admin().createWorkOrder(
        { type: WorkOrderType.INSPECT, target: { nodeId: id }, action: { kind: { case: "inspect", value: {} } }, priority: 5 },
        h,
      ),
    );
    expect(e.code).toBe("CONFLICT");
    expect(e.connectCode).toBe(Code.Aborted);
    expect(e.details.field).toBe("x-idempotency-key");
    expect(await footprint()).toEqual(before);
  });
  // Map fields (command env, process env, sticker digests) have no order on the wire: a client
  // that rebuilds its request for a retry (a Go map, a re-parsed dict) may send the entries in
  // another order, and that is still the same request.
  it("the same key with the same body whose map entries come in another order replays the first order", async () => {
    const { id } = await node("idem-node");
    const h = { headers: { "x-idempotency-key": `create-${id}` } };
    const req = (env: Record<string, string>): CreateInit => ({
      type: WorkOrderType.EXECUTE_COMMAND,
      target: { nodeId: id },
      action: { kind: { case: "executeCommand", value: { command: { argv: ["echo"], env } } } },
    });
    const a = await admin().createWorkOrder(req({ A: "1", B: "2" }), h);
    const b = await admin().createWorkOrder(req({ B: "2", A: "1" }), h);
    expect(b.workOrder?.id).toBe(a.workOrder?.id);
    expect(await allOrders({ nodeId: id })).toHaveLength(1);
  });
});

describe("expires_at", () => {
  const inspect = (nodeId: string, extra: { expiresAt?: CreateInit["expiresAt"]; priority?: number } = {}): CreateInit => ({
    type: WorkOrderType.INSPECT,
    target: { nodeId },
    action: { kind: { case: "inspect", value: {} } },
    ...extra,
  });

  /**
   * Queues an inspect order for `nodeId` that expires `windowMs` from now. expires_at must still
   * be in the future when the controller gets the order: on a machine too slow for that, the
   * window widens until it is.
   */
  async function expiring(nodeId: string, windowMs: number, extra: { priority?: number } = {}): Promise<WorkOrder> {
    for (let w = windowMs; ; w *= 2) {
      try {
        return (await admin().createWorkOrder(inspect(nodeId, { ...extra, expiresAt: inMs(w) }))).workOrder!;
      } catch (e) {
        const err = ConnectError.from(e);
        if (err.code !== Code.InvalidArgument || !err.rawMessage.includes("expires_at must be in the future") || w >= 60_000) throw e;
      }
    }
  }
  /** Waits until the clock is past the order's expires_at. */
  const pastExpiry = (o: WorkOrder) =>
    waitFor("expires_at to pass", async () => (Date.now() > timestampDate(o.expiresAt!).getTime() ? true : undefined), 60_000, 10);

  it("an order no node claimed in time fails with EXPIRED, with its event, and cannot be claimed", async () => {
    const { id, token } = await node("expiry-node");
    const order = await expiring(id, 300);
    expect(order.status).toBe(WorkOrderStatus.PENDING);
    // The lease monitor's sweep (every second with the default lease) fails it.
    const failed = await waitFor(
      "the order to expire",
      async () => {
        const o = await getOrder(order.id);
        return o.status === WorkOrderStatus.FAILED ? o : undefined;
      },
      30_000,
      50,
    );
    expect(failed.result).toMatchObject({ success: false, retriable: false, code: "EXPIRED" });
    expect(failed.finishedAt).toBeDefined();
    // The event follows the transition (recorded right after it is stored).
    const types = await waitFor(
      "the failure event",
      async () => {
        const t = (await events({ workOrderId: order.id })).map((e) => e.type);
        return t.includes("work_order_failed") ? t : undefined;
      },
      30_000,
      50,
    );
    expect(types).not.toContain("work_order_started");
    const failedEvent = (await events({ type: "work_order_failed", workOrderId: order.id }))[0]!;
    expect(failedEvent.data).toMatchObject({ code: "EXPIRED" });
    const e = await rpcError(tc.client(WorkOrderService, { token }).claimWorkOrder({ id: order.id }));
    expect(e.code).toBe("WORK_ORDER_NOT_CLAIMABLE");
    expect(e.connectCode).toBe(Code.FailedPrecondition);
    expect((await getOrder(order.id)).status).toBe(WorkOrderStatus.FAILED);
  });

  it("a claim after expires_at is refused, whether or not the sweep has failed the order yet", async () => {
    const { id, token } = await node("expiry-node");
    const order = await expiring(id, 150);
    await pastExpiry(order);
    const e = await rpcError(tc.client(WorkOrderService, { token }).claimWorkOrder({ id: order.id }));
    expect(e.code).toBe("WORK_ORDER_NOT_CLAIMABLE");
    expect(e.connectCode).toBe(Code.FailedPrecondition);
    expect((await getOrder(order.id)).status).not.toBe(WorkOrderStatus.RUNNING);
  });

  it("GetNextWorkOrder never hands out an expired order", async () => {
    // Before it expires the urgent order is first in line. When the answer came only after it
    // expired (a machine too slow to ask in time), that says nothing: the same is set up again on
    // a fresh node with a wider window.
    let scene: { token: string; id: string; soon: WorkOrder; later: WorkOrder } | undefined;
    for (let windowMs = 400; !scene; windowMs *= 2) {
      const { id, token } = await node("expiry-node");
      const soon = await expiring(id, windowMs, { priority: 100 });
      const later = (await admin().createWorkOrder(inspect(id))).workOrder!;
      const first = (await tc.client(NodeService, { token }).getNextWorkOrder({ nodeId: id })).workOrder?.id;
      if (first !== soon.id && Date.now() >= timestampDate(soon.expiresAt!).getTime() && windowMs < 60_000) continue;
      expect(first).toBe(soon.id);
      scene = { token, id, soon, later };
    }
    const { id, token, soon, later } = scene;
    await pastExpiry(soon);
    expect((await tc.client(NodeService, { token }).getNextWorkOrder({ nodeId: id })).workOrder?.id).toBe(later.id);
    const expired = await getOrder(soon.id);
    expect(expired.status).toBe(WorkOrderStatus.FAILED);
    expect(expired.result?.code).toBe("EXPIRED");
  });
});

describe("rollback orders", () => {
  const tenantStatus = async (id: string) => (await resources().getResource({ resourceType: "tenant", id })).resource!;
  // resolved_from and replaces_spec_hash are the controller's to fill: what a client sends is replaced.
  const rollback = (tenantId: string, nodeId: string, deploymentId = ""): CreateInit => ({
    type: WorkOrderType.ROLLBACK,
    target: { tenantId, nodeId },
    action: { kind: { case: "rollback", value: { deploymentId, resolvedFrom: "work_order/forged", replacesSpecHash: "forged" } } },
  });

  /** Waits for the reconciler's pending deploy_service order for the tenant other than `seen`. */
  const nextDeploy = (tenantId: string, seen: string[] = []) =>
    waitFor(
      "a deploy_service order",
      async () =>
        (await allOrders({ tenantId })).find(
          (o) => o.type === WorkOrderType.DEPLOY_SERVICE && o.status === WorkOrderStatus.PENDING && !seen.includes(o.id),
        ),
      5000,
      20,
    );

  /** A tenant on a fresh node whose first deploy the "agent" applied. */
  async function deployedTenant(prefix: string, env: Record<string, string>) {
    const n = await node(`${prefix}-node`);
    const tenantId = uid(prefix);
    await resources().createResource({ resourceType: "tenant", resource: composeTenant(tenantId, n.id, env) });
    const first = await nextDeploy(tenantId);
    expect((await claimAndFinish(n.token, first.id, { success: true, code: "APPLY_OK" })).status).toBe(WorkOrderStatus.SUCCESS);
    return { node: n, tenantId, first };
  }

  it("a pass says how long it spent issuing orders (what the queue does not pace it by): none issued, 0", async () => {
    const { tenantId } = await deployedTenant("pace", { VERSION: "1" });
    await tc.controller.reconciler.idle();
    const quiet = await tc.controller.reconciler.reconcileTenant(tenantId);
    expect(quiet.orders.filter((o) => o.created)).toEqual([]);
    expect(quiet.issuingMs).toBe(0);
    const forced = await tc.controller.reconciler.reconcileTenant(tenantId, { force: true });
    expect(forced.orders.filter((o) => o.created)).toHaveLength(1);
    expect(forced.issuingMs).toBeGreaterThan(0);
  });

  it("resolves to the previous successful spec or a named deployment, and the reconciler then leaves the target alone until Apply", async () => {
    const { node: n, tenantId, first } = await deployedTenant("rb", { VERSION: "1" });
    await resources().updateResource({
      resourceType: "tenant",
      id: tenantId,
      desiredState: composeTenant(tenantId, n.id, { VERSION: "2" }).desiredState,
    });
    const second = await nextDeploy(tenantId, [first.id]);
    await claimAndFinish(n.token, second.id, { success: true, code: "APPLY_OK" });
    const h1 = first.desiredState!.specHash;
    const h2 = second.desiredState!.specHash;
    expect(h1).not.toBe("");
    expect(h2).not.toBe(h1);

    // No deployment named: the last successful spec before the one applied now.
    const byHistory = (await admin().createWorkOrder(rollback(tenantId, n.id))).workOrder!;
    expect(byHistory.status).toBe(WorkOrderStatus.PENDING);
    expect(byHistory.type).toBe(WorkOrderType.ROLLBACK);
    expect(byHistory.desiredState?.specHash).toBe(h1);
    expect(byHistory.desiredState?.composeProject?.env).toEqual({ VERSION: "1" });
    expect(byHistory.desiredState?.deploymentId).toBe("");
    expect(byHistory.action?.kind.case).toBe("rollback");
    const a = byHistory.action!.kind.value as { resolvedFrom: string; replacesSpecHash: string; deploymentId: string };
    expect(a.resolvedFrom).toBe(`work_order/${first.id}`);
    expect(a.replacesSpecHash).toBe(h2);
    const created = (await events({ type: "work_order_created", workOrderId: byHistory.id }))[0]!;
    expect(created.data).toMatchObject({ type: "rollback", resolved_from: `work_order/${first.id}`, spec_hash: h1 });

    // A named deployment.
    const firstDeployment = first.desiredState!.deploymentId;
    expect(firstDeployment).not.toBe("");
    const byDeployment = (await admin().createWorkOrder(rollback(tenantId, n.id, firstDeployment))).workOrder!;
    expect(byDeployment.desiredState?.specHash).toBe(h1);
    const b = byDeployment.action!.kind.value as { resolvedFrom: string; replacesSpecHash: string; deploymentId: string };
    expect(b.resolvedFrom).toBe(`deployment/${firstDeployment}`);
    expect(b.deploymentId).toBe(firstDeployment);
    expect(b.replacesSpecHash).toBe(h2);

    // Only one rollback should run: the first is cancelled, the second goes to the node.
    await admin().cancelWorkOrder({ id: byHistory.id, reason: "test: one rollback is enough" });
    const ran = await claimAndFinish(n.token, byDeployment.id, { success: true, code: "ROLLBACK_OK" });
    expect(ran.status).toBe(WorkOrderStatus.SUCCESS);
    await waitFor(
      "ROLLED_BACK",
      async () => ((await tenantStatus(tenantId)).convergence?.status === ConvergenceStatus.ROLLED_BACK ? true : undefined),
      5000,
      20,
    );
    const t = await tenantStatus(tenantId);
    const target = t.currentState?.kind.case === "tenant" ? t.currentState.kind.value.targets.find((x) => x.nodeId === n.id) : undefined;
    expect(target).toMatchObject({ appliedHash: h1, rolledBackHash: h2 });

    // A reconcile pass issues nothing for the rolled-back spec.
    await tc.controller.reconciler.idle();
    const pass = await tc.controller.reconciler.reconcileTenant(tenantId);
    expect(pass.orders.filter((o) => o.created)).toEqual([]);
    const ordersBefore = await allOrders({ tenantId });
    expect(ordersBefore.filter((o) => o.status === WorkOrderStatus.PENDING || o.status === WorkOrderStatus.RUNNING)).toEqual([]);
    expect((await tenantStatus(tenantId)).convergence?.status).toBe(ConvergenceStatus.ROLLED_BACK);

    // Apply deploys the desired spec again.
    const applied = await tc.client(DeploymentService, { admin: true }).apply({ tenantId, nodeId: n.id });
    expect(applied.workOrder?.type).toBe(WorkOrderType.DEPLOY_SERVICE);
    expect(applied.workOrder?.status).toBe(WorkOrderStatus.PENDING);
    expect(applied.workOrder?.desiredState?.specHash).toBe(h2);
    expect(ordersBefore.map((o) => o.id)).not.toContain(applied.workOrder!.id);
  });

  it("without a named deployment, restores the newest earlier spec, not the oldest", async () => {
    const { node: n, tenantId, first } = await deployedTenant("rb-three", { VERSION: "1" });
    const seen = [first.id];
    for (const v of ["2", "3"]) {
      await resources().updateResource({
        resourceType: "tenant",
        id: tenantId,
        desiredState: composeTenant(tenantId, n.id, { VERSION: v }).desiredState,
      });
      const next = await nextDeploy(tenantId, seen);
      seen.push(next.id);
      expect((await claimAndFinish(n.token, next.id, { success: true, code: "APPLY_OK" })).status).toBe(WorkOrderStatus.SUCCESS);
    }
    const rb = (await admin().createWorkOrder(rollback(tenantId, n.id))).workOrder!;
    expect(rb.desiredState?.composeProject?.env).toEqual({ VERSION: "2" });
    expect((rb.action!.kind.value as { resolvedFrom: string }).resolvedFrom).toBe(`work_order/${seen[1]}`);
  });

  it("refuses a deployment of another tenant, an unknown deployment, and a node with no earlier spec", async () => {
    const one = await deployedTenant("rb-one", { VERSION: "1" });
    const other = await deployedTenant("rb-other", { VERSION: "1" });
    const before = await footprint();

    const foreign = await rpcError(admin().createWorkOrder(rollback(one.tenantId, one.node.id, other.first.desiredState!.deploymentId)));
    expect(foreign.code).toBe("INVALID_REQUEST");
    expect(foreign.connectCode).toBe(Code.InvalidArgument);
    expect(foreign.details.field).toBe("action.rollback.deployment_id");

    const unknown = await rpcError(admin().createWorkOrder(rollback(one.tenantId, one.node.id, "deploy-does-not-exist")));
    expect(unknown.code).toBe("RESOURCE_NOT_FOUND");

    // A single success: nothing earlier to go back to.
    const none = await rpcError(admin().createWorkOrder(rollback(other.tenantId, other.node.id)));
    expect(none.code).toBe("CONFLICT");
    expect(none.connectCode).toBe(Code.Aborted);
    expect(none.details.reason).toBe("NO_PREVIOUS_SPEC");
    expect(await footprint()).toEqual(before);
  });
});

describe("REST: POST /v1/work-orders", () => {
  const post = async (body: unknown, headers: Record<string, string> = { "x-admin-token": ADMIN_TOKEN }) => {
    const res = await fetch(`${tc.url}/v1/work-orders`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
    // biome-ignore lint/suspicious/noExplicitAny: a JSON body, read by path in assertions
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  };

  // The REST layer answers every Create* route with 201 (controller/boundary/rest/rest-handler.ts), as
  // POST /v1/resources/{type} does.
  it("queues an order from a proto-JSON body and answers 201 with it", async () => {
    const { id } = await node("rest-node");
    const r = await post({
      type: "WORK_ORDER_TYPE_INSPECT",
      target: { node_id: id },
      action: { inspect: {} },
      priority: 3,
      timeout: "30s",
    });
    expect(r.status).toBe(201);
    expect(r.body.error).toBeNull();
    const wo = r.body.data.work_order;
    expect(wo).toMatchObject({
      type: "WORK_ORDER_TYPE_INSPECT",
      status: "WORK_ORDER_STATUS_PENDING",
      target: { node_id: id },
      action: { inspect: {} },
      priority: 3,
      timeout: "30s",
      max_attempts: 1,
    });
    expect((await getOrder(wo.id)).status).toBe(WorkOrderStatus.PENDING);

    const content = "key = value\n";
    const up = await post({
      type: "WORK_ORDER_TYPE_UPLOAD_FILES",
      target: { node_id: id },
      action: {
        upload_files: { files: [{ path: "app.conf", content: Buffer.from(content).toString("base64"), sha256: sha256(content) }] },
      },
    });
    expect(up.status).toBe(201);
    expect(up.body.data.work_order.action.upload_files.files[0].path).toBe("app.conf");
  });

  it("honours x-idempotency-key", async () => {
    const { id } = await node("rest-node");
    const body = { type: "WORK_ORDER_TYPE_INSPECT", target: { node_id: id }, action: { inspect: {} } };
    const key = { "x-admin-token": ADMIN_TOKEN, "x-idempotency-key": `rest-${id}` };
    const a = await post(body, key);
    const b = await post(body, key);
    expect(b.body.data.work_order.id).toBe(a.body.data.work_order.id);
    expect(await allOrders({ nodeId: id })).toHaveLength(1);
    const other = await post({ ...body, priority: 9 }, key);
    expect(other.status).toBe(409);
    expect(other.body.error).toMatchObject({ code: "CONFLICT", details: { field: "x-idempotency-key" } });
  });

  it("answers a bad order with 400 and a machine-readable error, and a node token with 403", async () => {
    const { id, token } = await node("rest-node");
    const before = await footprint();
    const bad = await post({
      type: "WORK_ORDER_TYPE_EXECUTE_COMMAND",
      target: { node_id: id },
      action: { execute_command: { command: { argv: ["sh -c", "id"] } } },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.data).toBeNull();
    expect(bad.body.error).toMatchObject({ code: "INVALID_REQUEST", details: { field: "action.execute_command.command.argv" } });
    const reconciled = await post({ type: "WORK_ORDER_TYPE_DEPLOY_SERVICE", target: { node_id: id } });
    expect(reconciled.status).toBe(400);
    expect(reconciled.body.error).toMatchObject({ code: "INVALID_REQUEST", details: { field: "type" } });
    const asNode = await post(
      { type: "WORK_ORDER_TYPE_INSPECT", target: { node_id: id }, action: { inspect: {} } },
      { authorization: `Bearer ${token}` },
    );
    expect(asNode.status).toBe(403);
    expect(asNode.body.error.code).toBe("FORBIDDEN");
    expect(await footprint()).toEqual(before);
  });
});
