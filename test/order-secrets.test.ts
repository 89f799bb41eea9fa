// A work order's secrets over the real server (HTTP/2 + TLS, file store): the reconciler issues a
// deploy_service order that carries references and versions, never values; the node holding the
// order's claim gets the values with its fencing token, and nobody else does (another node, the
// admin, an API key, a stale token, an order not yet claimed); a value removed since the order
// was issued is CONFLICT (SECRET_UNAVAILABLE); every call is on the audit trail without a value.
// Writes that would make a reference dangle or cross tenants are refused.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { fromJson, toJsonString } from "@bufbuild/protobuf";
import { ActorKind, Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { AuditService } from "../gen/skipper/v1/audit_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import type { Resource } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { filesContaining } from "./helpers/files.js";
import { waitFor } from "./helpers/processes.js";
import { res } from "./helpers/resources.js";

const TENANT = "vault";
const OTHER = "elsewhere";
const NODE = "vault-node";
const STRANGER = "other-node";
// The values planted; none may show anywhere but in GetWorkOrderSecrets' answer to the holder.
const V = {
  password: "sntl-order-pw-4b1d",
  password2: "sntl-order-pw-next-93ce",
  cert: "sntl-order-cert-77aa",
  regPassword: "sntl-order-regpw-c0de",
  otherTenant: "sntl-order-other-5e5e",
};
const RPC = "skipper.v1.WorkOrderService/GetWorkOrderSecrets";

let tc: TestController;
const tokens: Record<string, string> = {};
const api = () => tc.client(ResourceService, { admin: true });
const asNode = (nodeId: string) => tc.client(WorkOrderService, { token: tokens[nodeId] });

const secret = (id: string, tenantId: string, values: Record<string, string>, registry = "") =>
  res("secret", id, { case: "secret", value: { tenantId, values, registry } });
const service = (id: string, value: Record<string, unknown>) =>
  res("service", id, { case: "service", value: { tenantId: TENANT, image: "busybox:stable", ...value } });

// The tenant's own compose file, using a variable and a compose secret from secret resources.
function vaultTenant(withCert: boolean): Resource {
  const file = [
    "services:",
    "  app:",
    "    image: busybox:stable",
    "    environment:",
    `      DB_PASSWORD: $\{DB_PASSWORD}`,
    ...(withCert ? ["    secrets: [tls_cert]"] : []),
    "",
  ].join("\n");
  return res("tenant", TENANT, {
    case: "tenant",
    value: {
      deploymentPolicy: { targetNodeId: NODE },
      compose: {
        composeFile: file,
        secretEnv: { DB_PASSWORD: { secretId: "db", key: "password" } },
        secretFiles: withCert ? { tls_cert: { secretId: "db", key: "cert" } } : {},
      },
    },
  });
}

/** Any value as JSON text (bigints as strings). */
const text = (v: unknown) => JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x));
const planted = (s: string) => Object.values(V).filter((v) => s.includes(v));

/** The tenant's deploy_service orders, oldest first. */
async function deployOrders(): Promise<WorkOrder[]> {
  const page = await tc.client(WorkOrderService, { admin: true }).listWorkOrders({ tenantId: TENANT, pageSize: 100 });
  return page.workOrders.filter((o) => o.type === WorkOrderType.DEPLOY_SERVICE);
}

beforeAll(async () => {
  tc = await startController({ tls: true, logToFile: true });
  for (const n of [NODE, STRANGER]) tokens[n] = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: n })).token;
  // The tenant first, without a project: the secrets need it, and nothing is issued before they exist.
  await api().createResource({ resourceType: "tenant", resource: res("tenant", TENANT, { case: "tenant", value: {} }) });
  await api().createResource({ resourceType: "tenant", resource: res("tenant", OTHER, { case: "tenant", value: {} }) });
  await api().createResource({
    resourceType: "secret",
    resource: secret("db", TENANT, { password: V.password, cert: V.cert, spare: "x" }),
  });
  await api().createResource({
    resourceType: "secret",
    resource: secret("reg", TENANT, { username: "puller", password: V.regPassword }, "registry.example.com"),
  });
  await api().createResource({ resourceType: "secret", resource: secret("foreign", OTHER, { token: V.otherTenant }) });
});
afterAll(async () => {
  await tc?.stop();
});

describe("a work order's secrets", () => {
  let order: WorkOrder;
  let fencingToken = 0n;

  it("the reconciler issues a deploy_service order carrying references and versions, and no value anywhere", async () => {
    await api().updateResource({ resourceType: "tenant", id: TENANT, desiredState: vaultTenant(true).desiredState });
    order = await waitFor("the deploy order", async () => (await deployOrders())[0], 20_000, 20);
    const ds = order.desiredState!;
    expect(order.target?.nodeId).toBe(NODE);
    expect(order.status).toBe(WorkOrderStatus.PENDING);
    expect(ds.composeProject?.secretEnv).toEqual({ DB_PASSWORD: expect.objectContaining({ secretId: "db", key: "password" }) });
    expect(ds.composeProject?.secretFiles).toEqual({ tls_cert: expect.objectContaining({ secretId: "db", key: "cert" }) });
    expect(ds.composeProject?.composeFile).toContain("./.skipper-secrets/tls_cert");
    expect(ds.composeProject?.env).toEqual({});
    expect(ds.secretUses.map((u) => `${u.secretId}/${u.key}@${u.version}`)).toEqual([
      "db/cert@1",
      "db/password@1",
      "reg/password@1",
      "reg/username@1",
    ]);
    expect(ds.registrySecretIds).toEqual(["reg"]);
    // Not in the API's answers (admin's list and get, the node's get), nor in the stored order.
    expect(planted(toJsonString(WorkOrderSchema, order))).toEqual([]);
    const got = await tc.client(WorkOrderService, { admin: true }).getWorkOrder({ id: order.id });
    expect(planted(toJsonString(WorkOrderSchema, got.workOrder!))).toEqual([]);
    const nodeView = await asNode(NODE).getWorkOrder({ id: order.id });
    expect(planted(toJsonString(WorkOrderSchema, nodeView.workOrder!))).toEqual([]);
    const stored = await readFile(join(tc.dataDir, "work-orders", "pending", `${order.id}.json`), "utf8");
    expect(fromJson(WorkOrderSchema, JSON.parse(stored)).desiredState?.secretUses).toHaveLength(4);
    expect(planted(stored)).toEqual([]);
    for (const v of Object.values(V)) expect(await filesContaining(tc.dataDir, v)).toEqual([]);
  });

  it("are refused for an order not yet claimed, even to its node", async () => {
    const e = await rpcError(asNode(NODE).getWorkOrderSecrets({ id: order.id, fencingToken: 1n }));
    expect([e.code, e.connectCode]).toEqual(["WORK_ORDER_NOT_CLAIMABLE", Code.FailedPrecondition]);
  });

  it("go to the node holding the claim, under its fencing token: env, files and registry credentials", async () => {
    const claimed = (await asNode(NODE).claimWorkOrder({ id: order.id })).workOrder!;
    expect(claimed.status).toBe(WorkOrderStatus.RUNNING);
    fencingToken = claimed.claim!.fencingToken;
    const got = await asNode(NODE).getWorkOrderSecrets({ id: order.id, fencingToken });
    expect(got.env).toEqual({ DB_PASSWORD: V.password });
    expect(got.files).toEqual({ tls_cert: V.cert });
    expect(got.registries.map((r) => [r.registry, r.username, r.password, r.secretId])).toEqual([
      ["registry.example.com", "puller", V.regPassword, "reg"],
    ]);
    // The claim put nothing of them into the order either.
    expect(planted(toJsonString(WorkOrderSchema, claimed))).toEqual([]);
  });

  it("are refused to a stale fencing token, another node, the admin token and API keys of any role", async () => {
    const stale = await rpcError(asNode(NODE).getWorkOrderSecrets({ id: order.id, fencingToken: fencingToken + 1n }));
    expect([stale.code, stale.connectCode]).toEqual(["WORK_ORDER_NOT_CLAIMABLE", Code.FailedPrecondition]);
    const zero = await rpcError(asNode(NODE).getWorkOrderSecrets({ id: order.id, fencingToken: 0n }));
    expect(zero.code).toBe("WORK_ORDER_NOT_CLAIMABLE");
    const stranger = await rpcError(asNode(STRANGER).getWorkOrderSecrets({ id: order.id, fencingToken }));
    expect([stranger.code, stranger.connectCode]).toEqual(["FORBIDDEN", Code.PermissionDenied]);
    const admin = await rpcError(tc.client(WorkOrderService, { admin: true }).getWorkOrderSecrets({ id: order.id, fencingToken }));
    expect(admin.code).toBe("FORBIDDEN");
    const access = tc.client(AccessService, { admin: true });
    for (const role of [Role.ADMIN, Role.OPERATOR, Role.VIEWER]) {
      const key = (await access.createApiKey({ name: `secrets-${Role[role].toLowerCase()}`, role })).secret;
      const e = await rpcError(tc.client(WorkOrderService, { token: key }).getWorkOrderSecrets({ id: order.id, fencingToken }));
      expect([Role[role], e.code]).toEqual([Role[role], "FORBIDDEN"]);
    }
    for (const e of [stale, zero, stranger, admin]) expect(planted(text(e.details) + e.message)).toEqual([]);
  });

  it("come as they are now: a new value of a referenced key reaches the running order", async () => {
    await api().updateResource({
      resourceType: "secret",
      id: "db",
      desiredState: secret("db", TENANT, { password: V.password2 }).desiredState,
    });
    const got = await asNode(NODE).getWorkOrderSecrets({ id: order.id, fencingToken });
    expect(got.env).toEqual({ DB_PASSWORD: V.password2 });
    expect(got.files).toEqual({ tls_cert: V.cert });
  });

  it("removing a value in use is refused; once no longer referenced it goes, and the running order's call is CONFLICT (SECRET_UNAVAILABLE)", async () => {
    const inUse = await rpcError(api().updateResource({ resourceType: "secret", id: "db", desiredState: removal("cert") }));
    expect([inUse.code, inUse.details.reason]).toEqual(["CONFLICT", "SECRET_IN_USE"]);
    expect(inUse.details.dependents).toEqual([`tenant/${TENANT}`]);
    // The tenant stops referencing the file, then the value can go.
    await api().updateResource({ resourceType: "tenant", id: TENANT, desiredState: vaultTenant(false).desiredState });
    await api().updateResource({ resourceType: "secret", id: "db", desiredState: removal("cert") });
    const stored = (await api().getResource({ resourceType: "secret", id: "db" })).resource!;
    expect(stored.desiredState?.kind.case === "secret" && stored.desiredState.kind.value.entries.map((e) => e.name)).toEqual([
      "password",
      "spare",
    ]);
    // The order issued before still names it: it must fail rather than run without the file.
    const e = await rpcError(asNode(NODE).getWorkOrderSecrets({ id: order.id, fencingToken }));
    expect([e.code, e.connectCode, e.details.reason, e.details.secret_id]).toEqual(["CONFLICT", Code.Aborted, "SECRET_UNAVAILABLE", "db"]);
    expect(planted(text(e.details) + e.message)).toEqual([]);
  });

  it("every call is on the audit trail, naming the order, with its outcome and caller, and no value", async () => {
    const entries = (await tc.client(AuditService, { admin: true }).listAuditEntries({ pageSize: 1000 })).entries.filter(
      (a) => a.rpc === RPC,
    );
    // Callers without the node permission are refused at the front door, before the request (and
    // so the order's id) is read: their entries name the caller and the refusal only.
    const named = entries.filter((a) => a.actor?.kind === ActorKind.NODE);
    expect(named.map((a) => a.target)).toEqual(named.map(() => `work_order/${order.id}`));
    expect(entries.map((a) => [ActorKind[a.actor!.kind], a.actor!.kind === ActorKind.NODE ? a.actor!.id : "", a.outcome])).toEqual([
      ["NODE", NODE, "WORK_ORDER_NOT_CLAIMABLE"],
      ["NODE", NODE, "OK"],
      ["NODE", NODE, "WORK_ORDER_NOT_CLAIMABLE"],
      ["NODE", NODE, "WORK_ORDER_NOT_CLAIMABLE"],
      ["NODE", STRANGER, "FORBIDDEN"],
      ["ADMIN_TOKEN", "", "FORBIDDEN"],
      ["API_KEY", "", "FORBIDDEN"],
      ["API_KEY", "", "FORBIDDEN"],
      ["API_KEY", "", "FORBIDDEN"],
      ["NODE", NODE, "OK"],
      ["NODE", NODE, "CONFLICT"],
    ]);
    expect(entries.filter((a) => a.actor?.kind === ActorKind.NODE && a.actor.id === NODE).every((a) => a.tenantId === TENANT)).toBe(true);
    expect(planted(text(entries))).toEqual([]);
    for (const v of Object.values(V)) expect(await filesContaining(tc.dataDir, v)).toEqual([]);
  });

  it("a value the order was handed, echoed back in the node's result, is blanked before anything keeps it", async () => {
    // The db secret's password is the one the running order was handed (as it is now).
    const echoed = `login failed for password ${V.password2} (and again: ${V.password2})`;
    await asNode(NODE).reportWorkOrderResult({
      id: order.id,
      fencingToken,
      result: {
        success: false,
        code: "COMPOSE_FAILED",
        message: echoed,
        details: { command: { program: "docker", exitCode: 1, stdout: `PW=${V.password2}`, stderr: echoed } },
      },
    });
    const finished = (await tc.client(WorkOrderService, { admin: true }).getWorkOrder({ id: order.id })).workOrder!;
    expect(finished.result?.message).toBe("login failed for password [REDACTED] (and again: [REDACTED])");
    expect(finished.result?.details?.command?.stdout).toBe("PW=[REDACTED]");
    expect(planted(toJsonString(WorkOrderSchema, finished))).toEqual([]);
    const events = await tc.client(EventService, { admin: true }).listEvents({ workOrderId: order.id });
    expect(events.events.length).toBeGreaterThan(0);
    expect(planted(text(events.events))).toEqual([]);
    for (const v of Object.values(V)) expect(await filesContaining(tc.dataDir, v)).toEqual([]);
  });
});

/** A secret update that removes `name` and sets nothing. */
function removal(name: string) {
  return res("secret", "db", { case: "secret", value: { tenantId: TENANT, remove: [name] } }).desiredState;
}

describe("writes that reference secrets", () => {
  it("a service naming a secret of another tenant is INVALID_REQUEST, naming the field", async () => {
    const e = await rpcError(
      api().createResource({
        resourceType: "service",
        resource: service("thief", { secretEnv: { TOKEN: { secretId: "foreign", key: "token" } } }),
      }),
    );
    expect([e.code, e.details.field]).toEqual(["INVALID_REQUEST", "desired_state.service.secret_env.TOKEN.secret_id"]);
    const f = await rpcError(
      api().createResource({
        resourceType: "service",
        resource: service("thief", { secretFiles: { "t.txt": { secretId: "foreign", key: "token" } } }),
      }),
    );
    expect([f.code, f.details.field]).toEqual(["INVALID_REQUEST", "desired_state.service.secret_files.t.txt.secret_id"]);
    expect((await rpcError(api().getResource({ resourceType: "service", id: "thief" }))).code).toBe("RESOURCE_NOT_FOUND");
  });

  it("a name in both env and secret_env is INVALID_REQUEST", async () => {
    const e = await rpcError(
      api().createResource({
        resourceType: "service",
        resource: service("both", { env: { DB_PASSWORD: "plain" }, secretEnv: { DB_PASSWORD: { secretId: "db", key: "password" } } }),
      }),
    );
    expect([e.code, e.details.field]).toEqual(["INVALID_REQUEST", "desired_state.service.secret_env.DB_PASSWORD"]);
    const steer = await rpcError(
      api().createResource({
        resourceType: "service",
        resource: service("steer", { secretEnv: { DOCKER_HOST: { secretId: "db", key: "password" } } }),
      }),
    );
    expect([steer.code, steer.details.field]).toEqual(["INVALID_REQUEST", "desired_state.service.secret_env.DOCKER_HOST"]);
    const t = await rpcError(
      api().updateResource({
        resourceType: "tenant",
        id: TENANT,
        desiredState: res("tenant", TENANT, {
          case: "tenant",
          value: {
            compose: {
              composeFile: "services: {}\n",
              env: { DB_PASSWORD: "plain" },
              secretEnv: { DB_PASSWORD: { secretId: "db", key: "password" } },
            },
          },
        }).desiredState,
      }),
    );
    expect([t.code, t.details.field]).toEqual(["INVALID_REQUEST", "desired_state.tenant.compose.secret_env.DB_PASSWORD"]);
  });

  it("a secret cannot move to another tenant (its users are of its own)", async () => {
    await api().createResource({ resourceType: "secret", resource: secret("stay", TENANT, { password: "not-planted" }) });
    const moved = secret("stay", OTHER, {});
    const e = await rpcError(api().updateResource({ resourceType: "secret", id: "stay", desiredState: moved.desiredState }));
    expect([e.code, e.details.field]).toEqual(["INVALID_REQUEST", "desired_state.secret.tenant_id"]);
    const still = (await api().getResource({ resourceType: "secret", id: "stay" })).resource!;
    expect(still.desiredState?.kind.case === "secret" && still.desiredState.kind.value.tenantId).toBe(TENANT);
  });

  it("deleting a secret a service uses is CONFLICT, and the secret stays", async () => {
    await api().createResource({ resourceType: "secret", resource: secret("svc-db", TENANT, { password: "not-planted" }) });
    await api().createResource({
      resourceType: "service",
      resource: service("user", { secretEnv: { PW: { secretId: "svc-db", key: "password" } } }),
    });
    const e = await rpcError(api().deleteResource({ resourceType: "secret", id: "svc-db" }));
    expect(e.code).toBe("CONFLICT");
    expect(e.message).toContain("service/user");
    const still = (await api().getResource({ resourceType: "secret", id: "svc-db" })).resource!;
    expect(still.deletion).toBeUndefined();
  });
});
