// Creating, updating and deleting resources (resources/resource-changes.ts), through
// ResourceService over the in-memory transport. The reconciler is stopped, so that only the
// changes under test write to the store: resource versions and events are theirs alone.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { ResourceSchema, ResourceStatusSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { ResourceType } from "../../common/ids.js";
import { startInMemory, type InMemoryController } from "../../test/helpers/in-memory-controller.js";
import { rpcError } from "../../test/helpers/errors.js";

let c: InMemoryController;
const api = () => c.admin(ResourceService);

const tenant = (id: string) =>
  create(ResourceSchema, { id, resourceType: "tenant", desiredState: { kind: { case: "tenant", value: { displayName: id } } } });
const limits = (id: string, cpus: number, labels: Record<string, string> = {}) =>
  create(ResourceSchema, {
    id,
    resourceType: "resource_limits",
    desiredState: { kind: { case: "resourceLimits", value: { cpus } } },
    metadata: { labels },
  });
const network = (id: string, tenantId: string) =>
  create(ResourceSchema, {
    id,
    resourceType: "network",
    desiredState: { kind: { case: "network", value: { tenantId, driver: "bridge" } } },
  });
const service = (id: string, tenantId: string, networkIds: string[] = []) =>
  create(ResourceSchema, {
    id,
    resourceType: "service",
    desiredState: { kind: { case: "service", value: { tenantId, image: "busybox:stable", networkIds } } },
  });
const put = async (r: Resource) => (await api().createResource({ resourceType: r.resourceType, resource: r })).resource!;
const stored = (type: ResourceType, id: string) => c.ctl.store.getResource(type, id, { includeDeleted: true });
const typesOf = async (id: string) => (await c.events({ resourceId: id })).map((e) => e.type);
/** Writes a tenant's per-node target records, as a reconcile pass would have. */
const seedTargets = (tenantId: string, targets: { nodeId: string; serviceIds: string[] }[]) =>
  c.ctl.store.updateResource("tenant", tenantId, (t) => {
    t.currentState = create(ResourceStatusSchema, { kind: { case: "tenant", value: { targets } } });
    return t;
  });
const cpusOf = (r: Resource | undefined) => (r?.desiredState?.kind.case === "resourceLimits" ? r.desiredState.kind.value.cpus : undefined);

beforeAll(async () => {
  c = await startInMemory();
  await c.ctl.reconciler.stop();
});
afterAll(async () => {
  await c.close();
});

describe("create", () => {
  it("the same resource created twice has the same resource_version and one resource_created event", async () => {
    const first = await put(limits("lim-same", 1));
    const second = await put(limits("lim-same", 1));
    expect(second.metadata?.resourceVersion).toBe(first.metadata?.resourceVersion);
    expect(await typesOf("lim-same")).toEqual(["resource_created"]);
  });

  it("a different body under the same id is CONFLICT and changes nothing", async () => {
    const first = await put(limits("lim-other", 1));
    for (const changed of [limits("lim-other", 2), limits("lim-other", 1, { tier: "gold" })]) {
      const e = await rpcError(api().createResource({ resourceType: "resource_limits", resource: changed }));
      expect(e.code).toBe("CONFLICT");
      expect(e.details.resource_version).toBe(first.metadata?.resourceVersion);
    }
    const now = await stored("resource_limits", "lim-other");
    expect(now?.metadata?.resourceVersion).toBe(first.metadata?.resourceVersion);
    expect(cpusOf(now)).toBe(1);
    expect(await typesOf("lim-other")).toEqual(["resource_created"]);
  });
});

describe("update", () => {
  it("with a stale resource_version is CONFLICT and changes nothing", async () => {
    const v1 = (await put(limits("lim-stale", 1))).metadata!.resourceVersion;
    const v2 = (
      await api().updateResource({
        resourceType: "resource_limits",
        id: "lim-stale",
        resourceVersion: v1,
        desiredState: limits("x", 2).desiredState,
      })
    ).resource!.metadata!.resourceVersion;
    expect(v2).not.toBe(v1);
    const e = await rpcError(
      api().updateResource({
        resourceType: "resource_limits",
        id: "lim-stale",
        resourceVersion: v1,
        desiredState: limits("x", 3).desiredState,
      }),
    );
    expect(e.code).toBe("CONFLICT");
    expect(e.details.current_version).toBe(v2);
    const now = await stored("resource_limits", "lim-stale");
    expect(now?.metadata?.resourceVersion).toBe(v2);
    expect(cpusOf(now)).toBe(2);
    expect(await typesOf("lim-stale")).toEqual(["resource_created", "resource_updated", "desired_state_changed"]);
  });

  it("an update that changes nothing keeps the resource_version and writes no event", async () => {
    const created = await put(limits("lim-noop", 1, { tier: "gold" }));
    const res = await api().updateResource({
      resourceType: "resource_limits",
      id: "lim-noop",
      desiredState: created.desiredState,
      labels: { tier: "gold" },
    });
    expect(res.resource?.metadata?.resourceVersion).toBe(created.metadata?.resourceVersion);
    expect((await stored("resource_limits", "lim-noop"))?.metadata?.resourceVersion).toBe(created.metadata?.resourceVersion);
    expect(await typesOf("lim-noop")).toEqual(["resource_created"]);
  });

  it("an update of labels alone records resource_updated without desired_state_changed", async () => {
    const created = await put(limits("lim-labels", 1, { tier: "gold" }));
    await api().updateResource({
      resourceType: "resource_limits",
      id: "lim-labels",
      desiredState: created.desiredState,
      labels: { tier: "silver" },
    });
    expect((await stored("resource_limits", "lim-labels"))?.metadata?.labels).toEqual({ tier: "silver" });
    expect(await typesOf("lim-labels")).toEqual(["resource_created", "resource_updated"]);
  });
});

describe("delete", () => {
  it("refuses while live resources reference the target: CONFLICT naming them, and nothing is tombstoned", async () => {
    await put(tenant("t-ref"));
    await put(network("net-ref", "t-ref"));
    await put(service("svc-ref", "t-ref", ["net-ref"]));
    const e = await rpcError(api().deleteResource({ resourceType: "tenant", id: "t-ref" }));
    expect(e.code).toBe("CONFLICT");
    expect([...(e.details.referenced_by as string[])].sort()).toEqual(["network/net-ref", "service/svc-ref"]);
    for (const [type, id] of [
      ["tenant", "t-ref"],
      ["network", "net-ref"],
      ["service", "svc-ref"],
    ] as const) {
      expect((await stored(type, id))?.deletion, `${type}/${id}`).toBeUndefined();
      expect(await typesOf(id)).not.toContain("resource_deleted");
    }
  });

  it("with cascade tombstones every dependent, each naming the resource it was cascaded from", async () => {
    await put(tenant("t-cas"));
    await put(network("net-cas", "t-cas"));
    await put(service("svc-cas", "t-cas", ["net-cas"]));
    const res = await api().deleteResource({ resourceType: "tenant", id: "t-cas", cascade: true });
    // Each comes after everything that references it: the service before its network.
    expect(res.cascaded).toEqual(["service/svc-cas", "network/net-cas"]);
    expect(res.resource?.deletion?.cascadedFrom).toBe("");
    for (const [type, id] of [
      ["network", "net-cas"],
      ["service", "svc-cas"],
    ] as const) {
      const tomb = await stored(type, id);
      expect(tomb?.deletion?.cascadedFrom, `${type}/${id}`).toBe("tenant/t-cas");
      const deleted = (await c.events({ resourceId: id })).filter((ev) => ev.type === "resource_deleted");
      expect(deleted.map((ev) => ev.data?.cascaded_from)).toEqual(["tenant/t-cas"]);
    }
    expect(await c.ctl.store.getResource("tenant", "t-cas")).toBeUndefined();
  });

  it("with delete_data, a service names the nodes its tenant's target records run it on", async () => {
    await put(tenant("t-data"));
    await put(service("svc-data", "t-data"));
    await put(service("svc-keep", "t-data"));
    // The records a reconcile pass would have written: svc-data runs on n2 and n1, not on n3.
    await seedTargets("t-data", [
      { nodeId: "n2", serviceIds: ["svc-data", "svc-keep"] },
      { nodeId: "n3", serviceIds: ["svc-keep"] },
      { nodeId: "n1", serviceIds: ["svc-data"] },
    ]);
    const res = await api().deleteResource({ resourceType: "service", id: "svc-data", deleteData: true });
    expect(res.resource?.deletion?.deleteData).toBe(true);
    expect(res.resource?.deletion?.dataPendingOnNodes).toEqual(["n1", "n2"]);
    const deleted = (await c.events({ resourceId: "svc-data" })).find((ev) => ev.type === "resource_deleted")!;
    expect(deleted.data).toMatchObject({ delete_data: true, data_pending_on_nodes: ["n1", "n2"] });
  });

  it("without delete_data, a service names no nodes where data is pending", async () => {
    await put(tenant("t-nodata"));
    await put(service("svc-nodata", "t-nodata"));
    await seedTargets("t-nodata", [{ nodeId: "n1", serviceIds: ["svc-nodata"] }]);
    const res = await api().deleteResource({ resourceType: "service", id: "svc-nodata" });
    expect(res.resource?.deletion?.deleteData).toBe(false);
    expect(res.resource?.deletion?.dataPendingOnNodes).toEqual([]);
  });
});
