// Networks, volumes and resource limits get a current_state (where they run as desired) and a
// last_applied_state (once every service using them is converged), like every other resource.
// Through the API (in-memory transport, real file store), with the test playing two agents.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema, type Resource, type ResourceSpecSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { type InMemoryController, startInMemory } from "./helpers/in-memory-controller.js";

const TENANT = "deps";
const NODES = ["d1", "d2"];
let c: InMemoryController;
const tokens = new Map<string, string>();
const api = () => c.admin(ResourceService);
const idle = () => c.ctl.reconciler.idle();
const get = async (type: string, id: string) => (await api().getResource({ resourceType: type, id })).resource!;

function resource(resourceType: string, id: string, desiredState: MessageInitShape<typeof ResourceSpecSchema>["kind"]): Resource {
  return create(ResourceSchema, { id, resourceType, desiredState: { kind: desiredState } });
}

async function finish(nodeId: string): Promise<void> {
  const o = (await c.asNode(NodeService, tokens.get(nodeId)!).getNextWorkOrder({ nodeId })).workOrder;
  if (!o) throw new Error(`no order for ${nodeId}`);
  const orders = c.asNode(WorkOrderService, tokens.get(nodeId)!);
  const claimed = (await orders.claimWorkOrder({ id: o.id })).workOrder!;
  await orders.reportWorkOrderResult({
    id: o.id,
    result: { success: true, code: "APPLY_OK", message: "ok" },
    fencingToken: claimed.claim!.fencingToken,
  });
  await idle();
}

beforeEach(async () => {
  c = await startInMemory();
  for (const nodeId of NODES) {
    const reg = await c.admin(NodeService).registerNode({ nodeId, labels: { pool: "deps" } });
    tokens.set(nodeId, reg.token);
    await c.asNode(NodeService, reg.token).heartbeat({ nodeId, agentVersion: "test", heartbeatIntervalMs: 60_000n });
  }
  await api().createResource({
    resourceType: "tenant",
    resource: resource("tenant", TENANT, { case: "tenant", value: { deploymentPolicy: { nodeSelector: { pool: "deps" } } } }),
  });
  await api().createResource({
    resourceType: "network",
    resource: resource("network", "deps-net", { case: "network", value: { tenantId: TENANT, driver: "bridge" } }),
  });
  await api().createResource({
    resourceType: "volume",
    resource: resource("volume", "deps-data", { case: "volume", value: { tenantId: TENANT, mountPath: "/data" } }),
  });
  await api().createResource({
    resourceType: "resource_limits",
    resource: resource("resource_limits", "small", { case: "resourceLimits", value: { cpus: 0.5 } }),
  });
  await api().createResource({
    resourceType: "service",
    resource: resource("service", "deps-web", {
      case: "service",
      value: {
        tenantId: TENANT,
        image: "busybox:1",
        networkIds: ["deps-net"],
        volumeIds: ["deps-data"],
        resourceLimitsId: "small",
      },
    }),
  });
  await idle();
});
afterEach(async () => {
  await c?.close();
});

const nodesOf = (r: Resource) => {
  const k = r.currentState?.kind;
  return k?.case === "network" || k?.case === "volume" ? k.value.nodeIds : undefined;
};

describe("networks, volumes and resource limits", () => {
  it("show where they run as desired, and are applied once every service using them converged", async () => {
    // Orders are out, nothing has run yet: no node, nothing applied.
    expect(nodesOf(await get("network", "deps-net"))).toEqual([]);
    expect((await get("network", "deps-net")).lastAppliedState).toBeUndefined();

    await finish("d1");
    const half = await get("volume", "deps-data");
    expect(nodesOf(half)).toEqual(["d1"]);
    expect(half.lastAppliedState).toBeUndefined();

    await finish("d2");
    for (const [type, id] of [
      ["network", "deps-net"],
      ["volume", "deps-data"],
    ] as const) {
      const r = await get(type, id);
      expect(nodesOf(r), `${type} ${id}`).toEqual(NODES);
      expect(r.lastAppliedState, `${type} ${id}`).toEqual(r.desiredState);
    }
    const limits = await get("resource_limits", "small");
    expect(limits.currentState?.kind.case === "resourceLimits" && limits.currentState.kind.value.appliedToServiceIds).toEqual(["deps-web"]);
    expect(limits.lastAppliedState).toEqual(limits.desiredState);

    // A change of the network is desired, not applied, until its nodes run it.
    await api().updateResource({
      resourceType: "network",
      id: "deps-net",
      desiredState: { kind: { case: "network", value: { tenantId: TENANT, driver: "bridge", internal: true } } },
    });
    await idle();
    const changed = await get("network", "deps-net");
    expect(changed.lastAppliedState).not.toEqual(changed.desiredState);
    expect(nodesOf(changed)).toEqual([]);
    await finish("d1");
    await finish("d2");
    const after = await get("network", "deps-net");
    expect(after.lastAppliedState).toEqual(after.desiredState);
    expect(nodesOf(after)).toEqual(NODES);
  });
});
