// Roles, API keys and tenant scopes over the real server (HTTP/2 + TLS, the generated clients).
// The matrix below is the specification of who may call what, written out by hand: it must agree
// with the permission each RPC declares in the contract and with what the server does, for every
// RPC and every kind of caller; an RPC missing from it fails the first test.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile, writeFile } from "node:fs/promises";
import { X509Certificate } from "node:crypto";
import { AuditService } from "../gen/skipper/v1/audit_service_pb.js";
import { verifyAuditExport } from "../controller/audit/verify-audit-export.js";
import { join } from "node:path";
import { ConnectError, Code, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { create, fromJson, type DescMethod, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ActorKind, Permission, Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService, type CreateApiKeyRequestSchema } from "../gen/skipper/v1/access_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { SnapshotService } from "../gen/skipper/v1/snapshot_service_pb.js";
import { ApiErrorSchema } from "../gen/skipper/v1/envelope_pb.js";
import { SERVICES } from "../controller/server/build.js";
import { permissionOf } from "../controller/auth/permissions.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { filesContaining } from "./helpers/files.js";

// --- the specification ----------------------------------------------------------------------

const P = Permission;
/** What every RPC needs. */
const NEEDS: Record<string, Permission> = {
  "HealthService/Check": P.PUBLIC,
  "ResourceService/ListResources": P.READ,
  "ResourceService/GetResource": P.READ,
  "ResourceService/ExplainResource": P.READ,
  "ResourceService/CreateResource": P.WRITE_DESIRED,
  "ResourceService/UpdateResource": P.WRITE_DESIRED,
  "ResourceService/DeleteResource": P.ADMIN,
  "WorkOrderService/CreateWorkOrder": P.OPERATE,
  "WorkOrderService/ListWorkOrders": P.READ,
  "WorkOrderService/GetWorkOrder": P.READ_OR_NODE,
  "WorkOrderService/ClaimWorkOrder": P.NODE,
  "WorkOrderService/ReportWorkOrderResult": P.NODE,
  "WorkOrderService/ClaimWorkOrders": P.NODE,
  "WorkOrderService/ReportWorkOrderResults": P.NODE,
  "WorkOrderService/RenewWorkOrderLease": P.NODE,
  "WorkOrderService/GetWorkOrderSecrets": P.NODE,
  "WorkOrderService/CancelWorkOrder": P.OPERATE,
  "NodeService/RegisterNode": P.ADMIN,
  "NodeService/RotateNodeToken": P.ADMIN,
  "NodeService/Heartbeat": P.NODE,
  "NodeService/GetNextWorkOrder": P.NODE,
  "NodeService/ClaimNextWorkOrder": P.NODE,
  "NodeService/WatchWorkOrders": P.NODE,
  "NodeService/Session": P.NODE,
  "NodeService/ListRelayTargets": P.NODE,
  "NodeService/ReportResourceState": P.NODE,
  "DeploymentService/Apply": P.OPERATE,
  "SnapshotService/GetSystemSnapshot": P.READ,
  "SnapshotService/GetTenantSnapshot": P.READ,
  "EventService/ListEvents": P.READ,
  "EventService/WatchEvents": P.READ,
  "RolloutService/GetRollout": P.READ,
  "RolloutService/ListRollouts": P.READ,
  "RolloutService/PlanRollout": P.READ,
  "RolloutService/PauseRollout": P.OPERATE,
  "RolloutService/ResumeRollout": P.OPERATE,
  "RolloutService/PromoteRollout": P.OPERATE,
  "RolloutService/AbortRollout": P.OPERATE,
  "RolloutService/ApproveRollout": P.OPERATE,
  "AccessService/WhoAmI": P.PUBLIC,
  "AccessService/CreateApiKey": P.ADMIN,
  "AccessService/ListApiKeys": P.ADMIN,
  "AccessService/GetApiKey": P.ADMIN,
  "AccessService/RotateApiKey": P.ADMIN,
  "AccessService/RevokeApiKey": P.ADMIN,
  "AccessService/RotateAdminToken": P.ADMIN,
  "EnrollmentService/CreateEnrollmentToken": P.ADMIN,
  "EnrollmentService/ListEnrollmentTokens": P.ADMIN,
  "EnrollmentService/RevokeEnrollmentToken": P.ADMIN,
  "EnrollmentService/EnrollNode": P.ENROLL,
  "EnrollmentService/RenewNodeCertificate": P.NODE,
  "EnrollmentService/RevokeNodeCertificates": P.ADMIN,
  "SecretService/RotateSecretKeys": P.ADMIN,
  "AuditService/ListAuditEntries": P.ADMIN,
  "AuditService/VerifyAuditTrail": P.ADMIN,
  "AuditService/ExportAuditTrail": P.ADMIN,
  "WebhookService/CreateWebhook": P.ADMIN,
  "WebhookService/ListWebhooks": P.ADMIN,
  "WebhookService/GetWebhook": P.ADMIN,
  "WebhookService/UpdateWebhook": P.ADMIN,
  "WebhookService/DeleteWebhook": P.ADMIN,
  "WebhookService/ListWebhookDeliveries": P.ADMIN,
  "WebhookService/RedeliverWebhookDelivery": P.ADMIN,
  "DeliveryService/CreateArtifactVersion": P.WRITE_DESIRED,
  "DeliveryService/ListArtifactVersions": P.READ,
  "DeliveryService/MarkVersionBad": P.OPERATE,
  "DeliveryService/UnmarkVersionBad": P.ADMIN,
  "DeliveryService/GetDeliveryStatus": P.READ,
  "DeliveryService/ApproveRelease": P.OPERATE,
  "DeliveryService/RejectRelease": P.OPERATE,
  "DeliveryService/VetoVersion": P.OPERATE,
  "DeliveryService/PinEnvironment": P.OPERATE,
  "DeliveryService/UnpinEnvironment": P.OPERATE,
  "GitSourceService/SyncGitSource": P.OPERATE,
  "TerminalService/Attach": P.OPERATE,
  "AgentBundleService/GetAgentBundle": P.PUBLIC,
};

type Caller = "anonymous" | "viewer" | "generator" | "operator" | "admin_key" | "admin_token" | "node";
const CALLERS: Caller[] = ["anonymous", "viewer", "generator", "operator", "admin_key", "admin_token", "node"];

/** Who holds each permission (the table of access.proto). */
const HOLDERS: Record<number, Caller[]> = {
  [P.PUBLIC]: CALLERS,
  [P.READ]: ["viewer", "generator", "operator", "admin_key", "admin_token"],
  [P.WRITE_DESIRED]: ["generator", "operator", "admin_key", "admin_token"],
  [P.OPERATE]: ["operator", "admin_key", "admin_token"],
  [P.ADMIN]: ["admin_key", "admin_token"],
  [P.NODE]: ["node"],
  [P.READ_OR_NODE]: ["viewer", "generator", "operator", "admin_key", "admin_token", "node"],
  // Nobody needs a credential: the enrollment token is in the request.
  [P.ENROLL]: CALLERS,
};

// --- the server under test ------------------------------------------------------------------

let tc: TestController;
const tokens: Partial<Record<Caller, string>> = {};
let nodeBOrder = "";

/** A client that sends `token` as a bearer credential (or nothing). */
function as<S extends DescService>(service: S, token?: string): Client<S> {
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  return tc.client(service, { headers });
}

async function tenantDoc(id: string, labels: Record<string, string> = {}) {
  const json = JSON.parse(await readFile(new URL("../examples/tenant.json", import.meta.url), "utf8"));
  json.id = id;
  json.desired_state.tenant.compose.project_name = id;
  json.metadata = { labels };
  return fromJson(ResourceSchema, json);
}

beforeAll(async () => {
  // Every caller of the matrix is a client of its own on a connection of its own, all from
  // 127.0.0.1 and kept open: about 450 connections, 256 of them never vouched for (anonymous
  // callers, refused credentials). The connection caps are not what this file tests
  // (connection-limits.test.ts does): under them, on a loaded machine, the pool of unvouched
  // connections (256, each kept 2 s after its handshake) refused newcomers mid-matrix.
  tc = await startController({ tls: true, logToFile: true, limits: { maxUnvouchedConnections: 4096, maxConnectionsPerAddress: 0 } });
  const access = tc.client(AccessService, { admin: true });
  for (const [caller, role] of [
    ["viewer", Role.VIEWER],
    ["generator", Role.GENERATOR],
    ["operator", Role.OPERATOR],
    ["admin_key", Role.ADMIN],
  ] as const) {
    tokens[caller] = (await access.createApiKey({ name: `matrix-${caller}`, role })).secret;
  }
  const nodes = tc.client(NodeService, { admin: true });
  tokens.node = (await nodes.registerNode({ nodeId: "host-a" })).token;
  await nodes.registerNode({ nodeId: "host-b" });
  const order = await tc.client(WorkOrderService, { admin: true }).createWorkOrder({
    type: WorkOrderType.INSPECT,
    target: { nodeId: "host-b" },
    action: { kind: { case: "inspect", value: {} } },
  });
  nodeBOrder = order.workOrder!.id;
});

afterAll(async () => {
  await tc?.stop();
});

/** Calls `method` with an empty request as `caller`; resolves to the refusal, if the call was refused by the permission check. */
async function refusal(method: DescMethod, caller: Caller): Promise<{ code: string; permission?: unknown } | undefined> {
  const headers: Record<string, string> = {};
  if (caller === "admin_token") headers["x-admin-token"] = "test-admin-token-0123456789";
  else if (caller !== "anonymous") headers.authorization = `Bearer ${tokens[caller]}`;
  const transport = createConnectTransport({ baseUrl: `${tc.url}/v1`, httpVersion: "2", nodeOptions: { ca: tc.ca } });
  const signal = AbortSignal.timeout(10_000);
  try {
    if (method.methodKind !== "unary") {
      const res = await transport.stream(
        method as never,
        signal,
        undefined,
        headers,
        (async function* () {
          yield {} as never;
        })(),
        undefined,
      );
      for await (const _ of res.message) break;
    } else {
      await transport.unary(method as never, signal, undefined, headers, {} as never, undefined);
    }
    return undefined;
  } catch (e) {
    const err = ConnectError.from(e);
    const detail = err.findDetails(ApiErrorSchema)[0];
    const code = detail?.code ?? "";
    // A refusal by the permission check: UNAUTHORIZED for want of a credential, or FORBIDDEN
    // naming the permission (an enrollment's own token check is the handler's, not a refusal).
    const noCredential = code === "UNAUTHORIZED" && err.rawMessage.startsWith("missing or invalid credentials");
    if (noCredential || (code === "FORBIDDEN" && detail?.details?.permission !== undefined)) {
      return { code, permission: detail?.details?.permission };
    }
    return undefined;
  }
}

describe("the permission matrix", () => {
  it("every RPC of the contract is in the matrix and declares the permission the matrix gives it", () => {
    const declared = Object.fromEntries(SERVICES.flatMap((s) => s.methods.map((m) => [`${s.name}/${m.name}`, permissionOf(m)])));
    expect(declared).toEqual(NEEDS);
  });

  const rpcs = SERVICES.flatMap((s) => s.methods.map((m) => [`${s.name}/${m.name}`, m] as const));
  it.each(rpcs)("%s: exactly the holders of its permission are let through, others are refused with a clear code", async (name, method) => {
    const permission = NEEDS[name]!;
    const outcomes = Object.fromEntries(await Promise.all(CALLERS.map(async (c) => [c, await refusal(method, c)] as const)));
    const expected = Object.fromEntries(
      CALLERS.map((c) => [
        c,
        HOLDERS[permission]!.includes(c)
          ? undefined
          : c === "anonymous"
            ? { code: "UNAUTHORIZED", permission: undefined }
            : { code: "FORBIDDEN", permission: Permission[permission]!.toLowerCase() },
      ]),
    );
    expect(outcomes).toEqual(expected);
  });
});

describe("nodes", () => {
  it("node A cannot read, claim or report node B's orders, nor beat for node B", async () => {
    const a = as(WorkOrderService, tokens.node);
    for (const p of [
      a.getWorkOrder({ id: nodeBOrder }),
      a.claimWorkOrder({ id: nodeBOrder }),
      a.reportWorkOrderResult({ id: nodeBOrder, result: { code: "APPLY_OK" }, fencingToken: 1n }),
      as(NodeService, tokens.node).heartbeat({ nodeId: "host-b" }),
    ]) {
      expect((await rpcError(p)).code).toBe("FORBIDDEN");
    }
    const stored = await tc.client(WorkOrderService, { admin: true }).getWorkOrder({ id: nodeBOrder });
    expect(stored.workOrder?.claim).toBeUndefined();
  });
});

describe("API keys", () => {
  it("a key's secret is shown once: never listed, never stored or logged in clear", async () => {
    const access = tc.client(AccessService, { admin: true });
    const created = await access.createApiKey({ name: "sentinel-key", role: Role.VIEWER });
    expect(created.secret).toMatch(/^skk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$/);
    expect(created.secret.startsWith(created.apiKey!.prefix)).toBe(true);
    const who = await as(AccessService, created.secret).whoAmI({});
    expect(who.actor).toMatchObject({ kind: ActorKind.API_KEY, id: created.apiKey!.id, name: "sentinel-key", role: Role.VIEWER });
    const listed = await access.listApiKeys({});
    expect(JSON.stringify(listed.apiKeys.map((k) => k.name))).toContain("sentinel-key");
    const secretPart = created.secret.slice(created.apiKey!.prefix.length);
    expect(await filesContaining(tc.dataDir, secretPart)).toEqual([]);
  });

  it("a second active key of the same name is a CONFLICT; a bad name, role or scope is INVALID_REQUEST and creates nothing", async () => {
    const access = tc.client(AccessService, { admin: true });
    await access.createApiKey({ name: "dup", role: Role.VIEWER });
    expect((await rpcError(access.createApiKey({ name: "dup", role: Role.OPERATOR }))).code).toBe("CONFLICT");
    const before = (await access.listApiKeys({ includeInactive: true })).apiKeys.length;
    const cases: [MessageInitShape<typeof CreateApiKeyRequestSchema>, string][] = [
      [{ name: "-bad", role: Role.VIEWER }, "name"],
      [{ name: "no-role" }, "role"],
      [{ name: "node-role", role: Role.NODE }, "role"],
      [{ name: "scoped-admin", role: Role.ADMIN, scope: { tenantIds: ["t1"] } }, "scope"],
      [{ name: "bad-selector", role: Role.VIEWER, scope: { tenantSelector: "=x" } }, "scope.tenant_selector"],
      [{ name: "past", role: Role.VIEWER, expiresAt: timestampFromDate(new Date(Date.now() - 1000)) }, "expires_at"],
    ];
    for (const [req, field] of cases) {
      const e = await rpcError(access.createApiKey(req));
      expect([e.code, e.details.field]).toEqual(["INVALID_REQUEST", field]);
    }
    expect((await access.listApiKeys({ includeInactive: true })).apiKeys.length).toBe(before);
  });

  it("rotation hands out a new secret and keeps the old one for the grace period; revocation refuses every secret at once", async () => {
    const access = tc.client(AccessService, { admin: true });
    const created = await access.createApiKey({ name: "rotating", role: Role.VIEWER });
    const id = created.apiKey!.id;
    const graced = await access.rotateApiKey({ id, gracePeriod: { seconds: 3600n } });
    expect(graced.secret).not.toBe(created.secret);
    await as(ResourceService, created.secret).listResources({});
    await as(ResourceService, graced.secret).listResources({});
    const now = await access.rotateApiKey({ id, gracePeriod: { seconds: 0n } });
    expect((await rpcError(as(ResourceService, graced.secret).listResources({}))).code).toBe("UNAUTHORIZED");
    await as(ResourceService, now.secret).listResources({});
    const revoked = await access.revokeApiKey({ id, reason: "test" });
    expect(revoked.apiKey?.status).toBe("revoked");
    const e = await rpcError(as(ResourceService, now.secret).listResources({}));
    expect([e.code, e.message]).toEqual(["UNAUTHORIZED", "API key rotating was revoked"]);
    // Idempotent, and the key is gone from the default listing.
    expect((await access.revokeApiKey({ id })).apiKey?.revokedAt).toEqual(revoked.apiKey?.revokedAt);
    expect((await access.listApiKeys({})).apiKeys.map((k) => k.id)).not.toContain(id);
    expect((await access.listApiKeys({ includeInactive: true })).apiKeys.map((k) => k.id)).toContain(id);
    expect((await rpcError(access.rotateApiKey({ id }))).code).toBe("CONFLICT");
  });

  it("a viewer reads resources and orders with their secrets hidden; writers and the node see them", async () => {
    const doc = await tenantDoc("with-secret");
    if (doc.desiredState?.kind.case !== "tenant") throw new Error("the example is a tenant");
    doc.desiredState.kind.value.compose!.env.DB_PASSWORD = "sentinel-hunter2";
    await tc.client(ResourceService, { admin: true }).createResource({ resourceType: "tenant", resource: doc });
    const env = async (token: string) => {
      const r = (await as(ResourceService, token).getResource({ resourceType: "tenant", id: "with-secret" })).resource;
      return r?.desiredState?.kind.case === "tenant" ? r.desiredState.kind.value.compose?.env.DB_PASSWORD : undefined;
    };
    expect(await env(tokens.viewer!)).toBe("[REDACTED]");
    expect(await env(tokens.generator!)).toBe("sentinel-hunter2");
    const listed = await as(ResourceService, tokens.viewer).listResources({ resourceType: "tenant" });
    expect(JSON.stringify(listed.resources.map((r) => r.desiredState))).not.toContain("sentinel-hunter2");
  });

  it("events name the key that caused them", async () => {
    const t = tokens.generator!;
    const created = await as(ResourceService, t).createResource({ resourceType: "tenant", resource: await tenantDoc("by-generator") });
    const events = await tc.client(EventService, { admin: true }).listEvents({ resourceId: "by-generator", type: "resource_created" });
    expect(events.events).toHaveLength(1);
    expect(events.events[0]!.actor).toMatchObject({ kind: ActorKind.API_KEY, name: "matrix-generator", role: Role.GENERATOR });
    expect(created.resource?.id).toBe("by-generator");
  });
});

describe("tenant scopes", () => {
  let scoped = "";
  let bySelector = "";
  beforeAll(async () => {
    const admin = tc.client(ResourceService, { admin: true });
    await admin.createResource({ resourceType: "tenant", resource: await tenantDoc("team-a", { env: "staging" }) });
    await admin.createResource({ resourceType: "tenant", resource: await tenantDoc("team-b", { env: "prod" }) });
    const access = tc.client(AccessService, { admin: true });
    scoped = (await access.createApiKey({ name: "team-a-ops", role: Role.OPERATOR, scope: { tenantIds: ["team-a"] } })).secret;
    bySelector = (await access.createApiKey({ name: "prod-viewer", role: Role.VIEWER, scope: { tenantSelector: "env=prod" } })).secret;
  });

  it("a key scoped to one tenant reads, changes and deploys that tenant only", async () => {
    const res = as(ResourceService, scoped);
    expect((await res.getResource({ resourceType: "tenant", id: "team-a" })).resource?.id).toBe("team-a");
    const outside = await rpcError(res.getResource({ resourceType: "tenant", id: "team-b" }));
    expect([outside.code, outside.details.tenant_id]).toEqual(["FORBIDDEN", "team-b"]);
    const listed = await res.listResources({ resourceType: "tenant" });
    expect(listed.resources.map((r) => r.id)).toEqual(["team-a"]);
    expect((await rpcError(res.listResources({ tenantId: "team-b" }))).code).toBe("FORBIDDEN");
    await res.updateResource({
      resourceType: "tenant",
      id: "team-a",
      labels: { env: "staging", owner: "a" },
      updateMask: { paths: ["labels"] },
    });
    expect(
      (
        await rpcError(
          res.updateResource({ resourceType: "tenant", id: "team-b", labels: { owner: "a" }, updateMask: { paths: ["labels"] } }),
        )
      ).code,
    ).toBe("FORBIDDEN");
    expect((await rpcError(res.createResource({ resourceType: "tenant", resource: await tenantDoc("team-c") }))).code).toBe("FORBIDDEN");
    expect((await rpcError(as(DeploymentService, scoped).apply({ tenantId: "team-b" }))).code).toBe("FORBIDDEN");
    expect((await rpcError(as(SnapshotService, scoped).getSystemSnapshot({}))).code).toBe("FORBIDDEN");
    // Nothing was changed by the refused calls.
    const b = await tc.client(ResourceService, { admin: true }).getResource({ resourceType: "tenant", id: "team-b" });
    expect(b.resource?.metadata?.labels).toEqual({ env: "prod" });
    expect(
      (await tc.client(ResourceService, { admin: true }).listResources({ resourceType: "tenant" })).resources.map((r) => r.id),
    ).not.toContain("team-c");
  });

  it("a label-selector scope follows the tenants' labels", async () => {
    const res = as(ResourceService, bySelector);
    expect((await res.listResources({ resourceType: "tenant" })).resources.map((r) => r.id)).toEqual(["team-b"]);
    await tc
      .client(ResourceService, { admin: true })
      .updateResource({ resourceType: "tenant", id: "team-a", labels: { env: "prod" }, updateMask: { paths: ["labels"] } });
    expect((await res.listResources({ resourceType: "tenant" })).resources.map((r) => r.id)).toEqual(["team-a", "team-b"]);
    const events = await as(EventService, bySelector).listEvents({});
    expect(new Set(events.events.map((e) => e.tenantId))).toEqual(new Set(["team-a", "team-b"]));
  });

  it("node resources are administered by admins only, and ad-hoc orders need an unscoped caller", async () => {
    const op = tokens.operator!;
    const e = await rpcError(
      as(ResourceService, op).updateResource({ resourceType: "node", id: "host-a", labels: { x: "y" }, updateMask: { paths: ["labels"] } }),
    );
    expect([e.code, e.details.permission]).toEqual(["FORBIDDEN", "admin"]);
    const adhoc = await rpcError(
      as(WorkOrderService, scoped).createWorkOrder({
        type: WorkOrderType.INSPECT,
        target: { nodeId: "host-a" },
        action: { kind: { case: "inspect", value: {} } },
      }),
    );
    expect(adhoc.code).toBe("FORBIDDEN");
    expect((await rpcError(as(WorkOrderService, scoped).getWorkOrder({ id: nodeBOrder }))).code).toBe("FORBIDDEN");
    // The chain behind a node runs through every tenant's orders: not for a scoped caller.
    expect((await rpcError(as(ResourceService, scoped).explainResource({ resourceType: "node", id: "host-b" }))).code).toBe("FORBIDDEN");
  });

  it("a scoped operator freezes its own tenant, not another's nor the fleet, and sees only its own freezes", async () => {
    const freeze = (id: string, tenantId: string) =>
      create(ResourceSchema, {
        id,
        resourceType: "freeze",
        desiredState: {
          kind: { case: "freeze", value: { reason: "r", tenantId, endsAt: timestampFromDate(new Date(Date.now() + 3600_000)) } },
        },
      });
    await as(ResourceService, scoped).createResource({ resourceType: "freeze", resource: freeze("freeze-a", "team-a") });
    expect(
      (await rpcError(as(ResourceService, scoped).createResource({ resourceType: "freeze", resource: freeze("freeze-b", "team-b") }))).code,
    ).toBe("FORBIDDEN");
    expect(
      (await rpcError(as(ResourceService, scoped).createResource({ resourceType: "freeze", resource: freeze("freeze-all", "") }))).code,
    ).toBe("FORBIDDEN");
    await tc.client(ResourceService, { admin: true }).createResource({ resourceType: "freeze", resource: freeze("freeze-b2", "team-b") });
    const seen = (await as(ResourceService, scoped).listResources({ resourceType: "freeze" })).resources.map((r) => r.id);
    expect(seen).toEqual(["freeze-a"]);
  });

  it("a selector-scoped key cannot relabel its tenant into another team's scope", async () => {
    const access = tc.client(AccessService, { admin: true });
    await tc
      .client(ResourceService, { admin: true })
      .createResource({ resourceType: "tenant", resource: await tenantDoc("team-q", { team: "q" }) });
    const q = (await access.createApiKey({ name: "team-q-gen", role: Role.GENERATOR, scope: { tenantSelector: "team=q" } })).secret;
    const e = await rpcError(
      as(ResourceService, q).updateResource({
        resourceType: "tenant",
        id: "team-q",
        labels: { team: "r" },
        updateMask: { paths: ["labels"] },
      }),
    );
    expect(e.code).toBe("FORBIDDEN");
    await as(ResourceService, q).updateResource({
      resourceType: "tenant",
      id: "team-q",
      labels: { team: "q", tier: "1" },
      updateMask: { paths: ["labels"] },
    });
  });
});

describe("the admin token", () => {
  it("is rotated through the API: the old one is refused at once, the new one works, and only its hash is on disk", async () => {
    const own = await startController({ tls: true, adminToken: null });
    try {
      const first = own.controller.generatedAdminToken!;
      const client = (t: string) =>
        createClient(
          AccessService,
          createConnectTransport({
            baseUrl: `${own.url}/v1`,
            httpVersion: "2",
            nodeOptions: { ca: own.ca },
            interceptors: [(next) => (req) => (req.header.set("authorization", `Bearer ${t}`), next(req))],
          }),
        );
      const rotated = await client(first).rotateAdminToken({});
      expect(rotated.adminToken).not.toBe(first);
      expect(
        (
          await rpcError(
            client(first)
              .whoAmI({})
              .then(() => client(first).listApiKeys({})),
          )
        ).code,
      ).toBe("UNAUTHORIZED");
      expect((await client(rotated.adminToken).whoAmI({})).actor?.kind).toBe(ActorKind.ADMIN_TOKEN);
      expect(await filesContaining(own.dataDir, rotated.adminToken)).toEqual([]);
    } finally {
      await own.stop();
    }
  });

  it("set by configuration, cannot be rotated through the API", async () => {
    const e = await rpcError(tc.client(AccessService, { admin: true }).rotateAdminToken({}));
    expect([e.code, e.connectCode]).toEqual(["CONFLICT", Code.Aborted]);
  });
});

describe("the audit trail", () => {
  it("records who changed what and who was refused, not reads; the chain verifies and an exported range checks against the signer", async () => {
    const audit = tc.client(AuditService, { admin: true });
    const viewer = tokens.viewer!;
    await as(ResourceService, tokens.generator).createResource({ resourceType: "tenant", resource: await tenantDoc("audited") });
    await rpcError(as(DeploymentService, viewer).apply({ tenantId: "audited" }));
    await as(ResourceService, viewer).getResource({ resourceType: "tenant", id: "audited" });
    const entries = await allEntries();
    const created = entries.find((e) => e.rpc === "skipper.v1.ResourceService/CreateResource" && e.target === "tenant/audited");
    expect(created).toMatchObject({ outcome: "OK", actor: { kind: ActorKind.API_KEY, name: "matrix-generator" } });
    const refused = entries.find((e) => e.rpc === "skipper.v1.DeploymentService/Apply" && e.actor?.name === "matrix-viewer");
    // Refused before its body was read: what it would have touched is not known, who tried is.
    expect(refused).toMatchObject({ outcome: "FORBIDDEN", actor: { kind: ActorKind.API_KEY, role: Role.VIEWER } });
    expect(entries.some((e) => e.rpc === "skipper.v1.ResourceService/GetResource" && e.outcome === "OK")).toBe(false);
    expect(entries.map((e) => Number(e.sequence))).toEqual(entries.map((_, i) => i + 1));
    const verified = await audit.verifyAuditTrail({});
    expect([verified.intact, Number(verified.entriesChecked)]).toEqual([true, entries.length]);
    const exported = await audit.exportAuditTrail({});
    const check = verifyAuditExport(exported);
    expect(check.valid).toBe(true);
    expect(new X509Certificate(exported.signerCertificate).checkIssued(new X509Certificate(tc.ca!))).toBe(true);
  });

  it("an entry edited on disk is found and named", async () => {
    const entries = await allEntries();
    const victim = entries[2]!;
    const day = new Date(Number(victim.time!.seconds) * 1000).toISOString().slice(0, 10);
    const file = join(tc.dataDir, "audit", `${day}.jsonl`);
    const text = await readFile(file, "utf8");
    const lines = text.split("\n");
    const at = lines.findIndex((l) => l.includes(`"sequence":"${victim.sequence}"`));
    expect(at).toBeGreaterThanOrEqual(0);
    lines[at] = lines[at]!.replace(`"outcome":"${victim.outcome}"`, `"outcome":"${victim.outcome === "OK" ? "FORBIDDEN" : "OK"}"`);
    await writeFile(file, lines.join("\n"));
    try {
      const verified = await tc.client(AuditService, { admin: true }).verifyAuditTrail({});
      expect(verified.intact).toBe(false);
      expect(verified.firstBreak).toMatchObject({ sequence: victim.sequence, reason: "hash does not match its content" });
      expect(verified.firstBreak?.location).toMatch(new RegExp(`^audit/${day}\\.jsonl:\\d+$`));
    } finally {
      await writeFile(file, text);
    }
  });
});

async function allEntries() {
  const audit = tc.client(AuditService, { admin: true });
  const out = [];
  let pageToken = "";
  do {
    const page = await audit.listAuditEntries({ pageSize: 1000, pageToken });
    out.push(...page.entries);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return out;
}
