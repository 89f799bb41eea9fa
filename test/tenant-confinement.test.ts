// A key scoped to a tenant is confined to that tenant's nodes and to what its compose policy
// allows (controller/resources/tenant-confinement.ts), over the real server (HTTP/2 + TLS): the
// hostile case of the hardening round (a t1-scoped operator placing t1 on t2's node, privileged,
// with the host's pid namespace and / mounted) is refused naming the field, changes nothing, and
// the reconciler places a tenant only inside its pool whatever its deployment policy says.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import {
  ComposePolicyLevel,
  ResourceSchema,
  type Resource,
  type TenantSpec,
  type TenantSpecSchema,
} from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { waitFor } from "./helpers/processes.js";

let tc: TestController;
let scopedKey = "";
const admin = () => tc.client(ResourceService, { admin: true });
const scoped = () => tc.client(ResourceService, { headers: { authorization: `Bearer ${scopedKey}` } });

const HOSTILE = [
  "services:",
  "  web:",
  "    image: busybox",
  "    privileged: true",
  "    pid: host",
  "    volumes:",
  "      - /:/host",
  "",
].join("\n");
const PLAIN = "services:\n  web:\n    image: busybox\n    ports: ['127.0.0.1:8080:80']\n";

function tenant(id: string, spec: MessageInitShape<typeof TenantSpecSchema>): Resource {
  return create(ResourceSchema, { id, resourceType: "tenant", desiredState: { kind: { case: "tenant", value: spec } } });
}

async function tenantSpec(id: string): Promise<TenantSpec> {
  const r = (await admin().getResource({ resourceType: "tenant", id })).resource!;
  if (r.desiredState?.kind.case !== "tenant") throw new Error("not a tenant");
  return r.desiredState.kind.value;
}

beforeAll(async () => {
  tc = await startController({ tls: true });
  for (const [id, labels] of [
    ["pool-a-1", { pool: "a", role: "web" }],
    ["pool-b-1", { pool: "b", role: "web" }],
  ] as const) {
    await admin().createResource({
      resourceType: "node",
      resource: { id, resourceType: "node", metadata: { labels }, desiredState: { kind: { case: "node", value: {} } } },
    });
  }
  await admin().createResource({ resourceType: "tenant", resource: tenant("t1", { compose: { composeFile: PLAIN } }) });
  await admin().createResource({
    resourceType: "tenant",
    resource: tenant("t2", { compose: { composeFile: PLAIN }, deploymentPolicy: { targetNodeId: "pool-b-1" } }),
  });
  scopedKey = (
    await tc.client(AccessService, { admin: true }).createApiKey({ name: "t1-ops", role: Role.OPERATOR, scope: { tenantIds: ["t1"] } })
  ).secret;
});
afterAll(async () => {
  await tc?.stop();
});

describe("tenants confined to their nodes and their privileges", () => {
  it("a scoped key cannot place its tenant on another tenant's node, nor run it privileged, while an admin has set nothing", async () => {
    const before = await admin().getResource({ resourceType: "tenant", id: "t1" });
    const place = await rpcError(
      scoped().updateResource({
        resourceType: "tenant",
        id: "t1",
        desiredState: tenant("t1", { compose: { composeFile: PLAIN }, deploymentPolicy: { targetNodeId: "pool-b-1" } }).desiredState,
      }),
    );
    expect(place).toMatchObject({ code: "FORBIDDEN", details: { field: "desired_state.tenant.deployment_policy", tenant_id: "t1" } });
    expect(place.message).toContain("has no node pool");
    const hostile = await rpcError(
      scoped().updateResource({
        resourceType: "tenant",
        id: "t1",
        desiredState: tenant("t1", { compose: { composeFile: HOSTILE } }).desiredState,
      }),
    );
    expect(hostile).toMatchObject({
      code: "FORBIDDEN",
      details: {
        field: "desired_state.tenant.compose.compose_file",
        path: "services.web.privileged",
        rule: "privileged",
        level: "restricted",
        violations: ["services.web.privileged: privileged", "services.web.pid: host-namespace", "services.web.volumes[0]: docker-socket"],
      },
    });
    const grab = await rpcError(
      scoped().updateResource({
        resourceType: "tenant",
        id: "t1",
        desiredState: tenant("t1", { compose: { composeFile: PLAIN }, policy: { compose: { level: ComposePolicyLevel.PRIVILEGED } } })
          .desiredState,
      }),
    );
    expect(grab).toMatchObject({ code: "FORBIDDEN", details: { field: "desired_state.tenant.policy" } });
    // Nothing changed.
    const after = await admin().getResource({ resourceType: "tenant", id: "t1" });
    expect(after.resource?.metadata?.resourceVersion).toBe(before.resource?.metadata?.resourceVersion);
    // A compose file that stays in its container is the scoped key's to write.
    await scoped().updateResource({
      resourceType: "tenant",
      id: "t1",
      desiredState: tenant("t1", { compose: { composeFile: `${PLAIN}    cap_add: [NET_BIND_SERVICE]\n` } }).desiredState,
    });
  });

  it("inside the pool an admin gives the tenant, a scoped key places it; outside it is refused; a write that leaves the policy out keeps it", async () => {
    const policy = { nodeSelector: { pool: "a" }, compose: { level: ComposePolicyLevel.RESTRICTED, allowedHostPaths: ["/srv/t1"] } };
    // An admin cannot set a policy the tenant's compose file already breaks.
    const clash = await rpcError(
      admin().updateResource({
        resourceType: "tenant",
        id: "t2",
        desiredState: tenant("t2", { compose: { composeFile: HOSTILE }, policy }).desiredState,
      }),
    );
    expect(clash).toMatchObject({ code: "FORBIDDEN", details: { field: "desired_state.tenant.compose.compose_file", rule: "privileged" } });
    await admin().updateResource({
      resourceType: "tenant",
      id: "t1",
      desiredState: tenant("t1", { compose: { composeFile: PLAIN }, policy }).desiredState,
    });
    const outside = await rpcError(
      scoped().updateResource({
        resourceType: "tenant",
        id: "t1",
        desiredState: tenant("t1", { compose: { composeFile: PLAIN }, deploymentPolicy: { targetNodeId: "pool-b-1" } }).desiredState,
      }),
    );
    expect(outside).toMatchObject({
      code: "FORBIDDEN",
      details: { field: "desired_state.tenant.deployment_policy.target_node_id", node_id: "pool-b-1" },
    });
    const bind = `${PLAIN}    volumes: ['/srv/t1/static:/static', '/srv/other:/other']\n`;
    const outsidePaths = await rpcError(
      scoped().updateResource({
        resourceType: "tenant",
        id: "t1",
        desiredState: tenant("t1", { compose: { composeFile: bind } }).desiredState,
      }),
    );
    expect(outsidePaths).toMatchObject({ code: "FORBIDDEN", details: { path: "services.web.volumes[1]", rule: "host-path" } });
    // Placed by selector across both pools: the policy is left out of the write, and kept.
    await scoped().updateResource({
      resourceType: "tenant",
      id: "t1",
      desiredState: tenant("t1", { compose: { composeFile: PLAIN }, deploymentPolicy: { nodeSelector: { role: "web" } } }).desiredState,
    });
    expect((await tenantSpec("t1")).policy?.nodeSelector).toEqual({ pool: "a" });
    const volume = await rpcError(
      scoped().createResource({
        resourceType: "volume",
        resource: {
          id: "t1-data",
          resourceType: "volume",
          desiredState: { kind: { case: "volume", value: { tenantId: "t1", driver: "rexray" } } },
        },
      }),
    );
    expect(volume).toMatchObject({ code: "FORBIDDEN", details: { field: "desired_state.volume.driver", rule: "driver" } });
  });

  it("the reconciler places the tenant only inside its pool, and the deploy order carries the compose policy", async () => {
    // t1 selects role=web (both pools); its pool is pool=a.
    const orders = await waitFor("t1's deploy orders", async () => {
      const { workOrders } = await tc.client(WorkOrderService, { admin: true }).listWorkOrders({ tenantId: "t1", pageSize: 100 });
      const deploys = workOrders.filter((o) => o.desiredState?.composeProject?.composeFile === PLAIN);
      return deploys.length > 0 ? deploys : undefined;
    });
    expect([...new Set(orders.map((o) => o.target?.nodeId))]).toEqual(["pool-a-1"]);
    expect(orders[0]!.desiredState?.composePolicy).toMatchObject({ level: ComposePolicyLevel.RESTRICTED, allowedHostPaths: ["/srv/t1"] });
  });

  it("an ad-hoc order naming the tenant goes only to a node of its pool, whoever sends it", async () => {
    const orders = (token: string | undefined) =>
      tc.client(WorkOrderService, token ? { headers: { authorization: `Bearer ${token}` } } : { admin: true });
    const order = (nodeId: string) => ({
      type: WorkOrderType.INSPECT,
      target: { nodeId, tenantId: "t1" },
      action: { kind: { case: "inspect" as const, value: {} } },
    });
    const outside = await rpcError(orders(scopedKey).createWorkOrder(order("pool-b-1")));
    expect(outside).toMatchObject({ code: "FORBIDDEN", details: { field: "target.node_id", node_id: "pool-b-1" } });
    expect((await rpcError(orders(undefined).createWorkOrder(order("pool-b-1")))).code).toBe("FORBIDDEN");
    const inside = await orders(scopedKey).createWorkOrder(order("pool-a-1"));
    expect(inside.workOrder?.target?.nodeId).toBe("pool-a-1");
  });
});
