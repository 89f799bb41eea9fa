// Resource CRUD through the contract on a real controller (HTTP/2 + TLS, file store): label
// selectors, revisions, references, partial updates, deletes with tombstones and cascade.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { FieldMaskSchema } from "@bufbuild/protobuf/wkt";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ComposeProjectSchema, ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { RolloutPolicySchema } from "../gen/skipper/v1/rollout_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { Code } from "@connectrpc/connect";

let tc: TestController;
const api = () => tc.client(ResourceService, { admin: true });

function tenant(id: string, labels: Record<string, string> = {}): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "tenant",
    desiredState: { kind: { case: "tenant", value: { displayName: id } } },
    metadata: { labels },
  });
}
function service(id: string, tenantId: string, extra: Record<string, unknown> = {}, labels: Record<string, string> = {}): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "service",
    desiredState: { kind: { case: "service", value: { tenantId, image: "busybox:stable", ...extra } } },
    metadata: { labels },
  });
}
function network(id: string, tenantId: string): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "network",
    desiredState: { kind: { case: "network", value: { tenantId, driver: "bridge" } } },
  });
}
function limits(id: string, cpus: number): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "resource_limits",
    desiredState: { kind: { case: "resourceLimits", value: { cpus, memoryBytes: 64n << 20n } } },
  });
}
const put = (r: Resource) => api().createResource({ resourceType: r.resourceType, resource: r });

beforeAll(async () => {
  tc = await startController({ tls: true });
});
afterAll(async () => {
  await tc?.stop();
});

describe("listing", () => {
  it("filters by label selector: equality, inequality and presence", async () => {
    await put(tenant("lab-a", { env: "prod", region: "eu" }));
    await put(tenant("lab-b", { env: "prod", region: "us" }));
    await put(tenant("lab-c", { env: "dev" }));
    const ids = async (label_selector: string) =>
      (await api().listResources({ resourceType: "tenant", labelSelector: label_selector })).resources
        .map((r) => r.id)
        .filter((id) => id.startsWith("lab-"));
    expect(await ids("env=prod")).toEqual(["lab-a", "lab-b"]);
    expect(await ids("env=prod,region=eu")).toEqual(["lab-a"]);
    expect(await ids("env=prod,region!=eu")).toEqual(["lab-b"]);
    expect(await ids("region")).toEqual(["lab-a", "lab-b"]);
    expect(await ids("env!=prod")).toEqual(["lab-c"]);
    const bad = await rpcError(api().listResources({ labelSelector: "env=pr od" }));
    expect(bad.code).toBe("INVALID_REQUEST");
  });

  it("exposes the store revision and lists only what changed since a revision", async () => {
    await put(tenant("rev-a"));
    await tc.controller.reconciler.idle();
    const { revision } = await api().listResources({ resourceType: "tenant" });
    expect(revision).toBeGreaterThan(0n);
    const b = (await put(tenant("rev-b"))).resource!;
    expect(BigInt(b.metadata!.resourceVersion)).toBeGreaterThan(revision);
    // A node made by RegisterNode is a resource like any other.
    const n = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "rev-node" })).node!;
    await tc.controller.reconciler.idle();
    const since = await api().listResources({ sinceRevision: revision });
    expect(since.resources.map((r) => r.id)).toEqual(["rev-node", "rev-b"]);
    expect(since.revision).toBeGreaterThanOrEqual(BigInt(n.metadata!.resourceVersion));
    const events = await tc.client(EventService, { admin: true }).listEvents({ sinceRevision: revision });
    expect(events.events.map((e) => [e.type, e.resourceId, e.revision])).toEqual([
      ["resource_created", "rev-b", BigInt(b.metadata!.resourceVersion)],
      ["resource_created", "rev-node", BigInt(n.metadata!.resourceVersion)],
    ]);
  });
});

describe("references", () => {
  it("a service naming a missing tenant, network or limits is INVALID_REQUEST with the field, and nothing is stored", async () => {
    await put(tenant("ref-t"));
    const cases: [Resource, string][] = [
      [service("ref-s1", "no-such-tenant"), "desired_state.service.tenant_id"],
      [service("ref-s1", "ref-t", { networkIds: ["no-net"] }), "desired_state.service.network_ids[0]"],
      [service("ref-s1", "ref-t", { resourceLimitsId: "no-limits" }), "desired_state.service.resource_limits_id"],
    ];
    for (const [r, field] of cases) {
      const err = await rpcError(put(r));
      expect(err.code).toBe("INVALID_REQUEST");
      expect(err.details.field).toBe(field);
    }
    expect((await rpcError(api().getResource({ resourceType: "service", id: "ref-s1" }))).code).toBe("RESOURCE_NOT_FOUND");
  });

  it("a rollout policy that cannot be followed is INVALID_REQUEST with its field, and nothing is stored", async () => {
    const withPolicy = (id: string, policy: Parameters<typeof create<typeof RolloutPolicySchema>>[1]) => {
      const t = tenant(id);
      if (t.desiredState?.kind.case === "tenant") t.desiredState.kind.value.rollout = create(RolloutPolicySchema, policy);
      return t;
    };
    const bad: Array<[Parameters<typeof create<typeof RolloutPolicySchema>>[1], string]> = [
      [{ waves: [{ size: { case: "percent", value: 0 } }] }, "desired_state.tenant.rollout.waves[0].percent"],
      [{ waves: [{ size: { case: "percent", value: 150 } }] }, "desired_state.tenant.rollout.waves[0].percent"],
      [{ waves: [{ name: "a" }, { name: "a" }] }, "desired_state.tenant.rollout.waves[1].name"],
      [{ waves: [{ name: "has space" }] }, "desired_state.tenant.rollout.waves[0].name"],
      [{ minHealthyTime: { seconds: 60n }, progressDeadline: { seconds: 30n } }, "desired_state.tenant.rollout.progress_deadline"],
      [{ failureBudget: { limit: { case: "percent", value: 101 } } }, "desired_state.tenant.rollout.failure_budget.percent"],
    ];
    for (const [policy, field] of bad) {
      const err = await rpcError(put(withPolicy("rollout-bad", policy)));
      expect(err.code, field).toBe("INVALID_REQUEST");
      expect(err.details.field).toBe(field);
      expect((await rpcError(api().getResource({ resourceType: "tenant", id: "rollout-bad" }))).code).toBe("RESOURCE_NOT_FOUND");
    }
    const good = withPolicy("rollout-good", {
      waves: [
        { name: "canary", nodeSelector: { ring: "canary" } },
        { name: "half", size: { case: "percent", value: 50 } },
      ],
      maxParallel: 2,
      minHealthyTime: { seconds: 10n },
      progressDeadline: { seconds: 300n },
      failureBudget: { limit: { case: "count", value: 1 } },
    });
    await put(good);
    const stored = (await api().getResource({ resourceType: "tenant", id: "rollout-good" })).resource!;
    expect(stored.desiredState?.kind.case === "tenant" && stored.desiredState.kind.value.rollout?.waves.map((w) => w.name)).toEqual([
      "canary",
      "half",
    ]);
  });

  it("a compose file that is not YAML, or not a mapping of services, is INVALID_REQUEST naming the line, and nothing is stored", async () => {
    const withCompose = (composeFile: string) => {
      const t = tenant("compose-bad");
      if (t.desiredState?.kind.case === "tenant") t.desiredState.kind.value.compose = create(ComposeProjectSchema, { composeFile });
      return t;
    };
    const broken = await rpcError(put(withCompose("services:\n  web:\n    image: [this is not\n")));
    expect(broken.code).toBe("INVALID_REQUEST");
    expect(broken.details.field).toBe("desired_state.tenant.compose.compose_file");
    expect(broken.message).toMatch(/is not valid YAML: .* at line \d+, column \d+/);
    const list = await rpcError(put(withCompose("services:\n  - web\n")));
    expect(list.message).toContain("must hold a mapping of services");
    const scalar = await rpcError(put(withCompose("just text\n")));
    expect(scalar.message).toContain("must be a mapping");
    const twice = await rpcError(put(withCompose("services:\n  a: {image: b}\n  a: {image: c}\n")));
    expect(twice.message).toContain("Map keys must be unique");
    expect((await rpcError(api().getResource({ resourceType: "tenant", id: "compose-bad" }))).code).toBe("RESOURCE_NOT_FOUND");
  });

  it("an image that is not an image reference is InvalidArgument naming the field, in a service or a compose file, and changes nothing", async () => {
    await put(tenant("img"));
    const bad = await rpcError(put(service("img-web", "img", { image: "Busybox::Stable!" })));
    expect([bad.code, bad.connectCode, bad.details.field]).toEqual([
      "INVALID_REQUEST",
      Code.InvalidArgument,
      "desired_state.service.image",
    ]);
    expect(bad.message).toContain('desired_state.service.image "Busybox::Stable!" has an invalid tag');
    expect((await rpcError(api().getResource({ resourceType: "service", id: "img-web" }))).code).toBe("RESOURCE_NOT_FOUND");
    // An update to a bad one leaves the stored service as it was, with no event.
    await put(service("img-web", "img", { image: "localhost:5000/team/app:v1" }));
    await tc.controller.reconciler.idle();
    const stored = (await api().getResource({ resourceType: "service", id: "img-web" })).resource!;
    const eventsBefore = (await tc.client(EventService, { admin: true }).listEvents({ resourceId: "img-web" })).events.length;
    for (const image of ["Busybox", "::", "busy box", `app:${"t".repeat(129)}`]) {
      const next = service("img-web", "img", { image });
      const err = await rpcError(
        api().updateResource({
          resourceType: "service",
          id: "img-web",
          desiredState: next.desiredState,
          resourceVersion: stored.metadata!.resourceVersion,
        }),
      );
      expect([err.code, err.details.field], image).toEqual(["INVALID_REQUEST", "desired_state.service.image"]);
    }
    await tc.controller.reconciler.idle();
    const after = (await api().getResource({ resourceType: "service", id: "img-web" })).resource!;
    expect(after.metadata!.resourceVersion).toBe(stored.metadata!.resourceVersion);
    expect(after.desiredState?.kind.case === "service" && after.desiredState.kind.value.image).toBe("localhost:5000/team/app:v1");
    expect((await tc.client(EventService, { admin: true }).listEvents({ resourceId: "img-web" })).events).toHaveLength(eventsBefore);
    // In a tenant's own compose file: the service and line are named; an interpolated image is the node's to resolve.
    const withCompose = (id: string, composeFile: string) => {
      const t = tenant(id);
      if (t.desiredState?.kind.case === "tenant") t.desiredState.kind.value.compose = create(ComposeProjectSchema, { composeFile });
      return t;
    };
    const file = await rpcError(
      put(withCompose("img-compose", "services:\n  db:\n    image: postgres:16\n  web:\n    image: Busybox::Stable!\n")),
    );
    expect([file.code, file.details.field, file.details.path, file.details.line]).toEqual([
      "INVALID_REQUEST",
      "desired_state.tenant.compose.compose_file",
      "services.web.image",
      5,
    ]);
    expect((await rpcError(api().getResource({ resourceType: "tenant", id: "img-compose" }))).code).toBe("RESOURCE_NOT_FOUND");
    await put(withCompose("img-compose", `services:\n  web:\n    image: ${"$"}{IMAGE:-busybox:stable}\n`));
  });

  it("a network of another tenant cannot be used", async () => {
    await put(tenant("ref-u"));
    await put(tenant("ref-v"));
    await put(network("ref-v-net", "ref-v"));
    const err = await rpcError(put(service("ref-u-s", "ref-u", { networkIds: ["ref-v-net"] })));
    expect(err.code).toBe("INVALID_REQUEST");
    expect(err.details.field).toBe("desired_state.service.network_ids[0]");
  });

  it("a depends_on cycle is refused with the cycle in details", async () => {
    await put(tenant("cyc"));
    await put(service("cyc-a", "cyc"));
    await put(service("cyc-b", "cyc", { dependsOn: ["cyc-a"] }));
    await tc.controller.reconciler.idle();
    const a = (await api().getResource({ resourceType: "service", id: "cyc-a" })).resource!;
    const err = await rpcError(
      api().updateResource({
        resourceType: "service",
        id: "cyc-a",
        desiredState: service("cyc-a", "cyc", { dependsOn: ["cyc-b"] }).desiredState,
      }),
    );
    expect(err.code).toBe("INVALID_REQUEST");
    expect(err.details.cycle).toEqual(["cyc-a", "cyc-b", "cyc-a"]);
    expect((await api().getResource({ resourceType: "service", id: "cyc-a" })).resource!.metadata!.resourceVersion).toBe(
      a.metadata!.resourceVersion,
    );
  });
});

describe("partial updates", () => {
  it("an update_mask changes only the named fields", async () => {
    await put(tenant("mask-t"));
    await put(service("mask-s", "mask-t", { env: { A: "1" }, command: ["sh"] }, { team: "web" }));
    const res = await api().updateResource({
      resourceType: "service",
      id: "mask-s",
      desiredState: service("mask-s", "mask-t", { image: "ignored:1", env: { A: "2", B: "3" } }).desiredState,
      updateMask: create(FieldMaskSchema, { paths: ["desired_state.service.env"] }),
    });
    const spec = res.resource!.desiredState!.kind.case === "service" ? res.resource!.desiredState!.kind.value : undefined;
    expect(spec?.env).toEqual({ A: "2", B: "3" });
    expect(spec?.image).toBe("busybox:stable");
    expect(spec?.command).toEqual(["sh"]);
    expect(res.resource!.metadata!.labels).toEqual({ team: "web" });
    const labels = await api().updateResource({
      resourceType: "service",
      id: "mask-s",
      labels: {},
      updateMask: create(FieldMaskSchema, { paths: ["labels"] }),
    });
    expect(labels.resource!.metadata!.labels).toEqual({});
    expect(labels.resource!.desiredState).toEqual(res.resource!.desiredState);
  });

  it("a mask path that does not exist, or leaves the kind, is INVALID_REQUEST", async () => {
    for (const path of [
      "desired_state.service.nope",
      "desired_state.tenant.display_name",
      "metadata.resource_version",
      "desired_state.service.env.A",
    ]) {
      const err = await rpcError(
        api().updateResource({ resourceType: "service", id: "mask-s", updateMask: create(FieldMaskSchema, { paths: [path] }) }),
      );
      expect(err.code, path).toBe("INVALID_REQUEST");
      expect(err.details.field).toBe("update_mask");
    }
  });
});

describe("deployments", () => {
  it("are records: an update or a delete through the API is INVALID_REQUEST and changes nothing", async () => {
    await put(tenant("dep-t"));
    const stored = await tc.controller.store.createResource(
      create(ResourceSchema, {
        id: "dep-t-1",
        resourceType: "deployment",
        desiredState: { kind: { case: "deployment", value: { tenantId: "dep-t" } } },
      }),
    );
    const update = await rpcError(api().updateResource({ resourceType: "deployment", id: "dep-t-1", desiredState: stored.desiredState }));
    expect(update.code).toBe("INVALID_REQUEST");
    expect(update.details.field).toBe("resource_type");
    const del = await rpcError(api().deleteResource({ resourceType: "deployment", id: "dep-t-1" }));
    expect(del.code).toBe("INVALID_REQUEST");
    const after = (await api().getResource({ resourceType: "deployment", id: "dep-t-1" })).resource!;
    expect(after.metadata?.resourceVersion).toBe(stored.metadata?.resourceVersion);
  });
});

describe("delete", () => {
  it("refuses while referenced, names the referrers, and changes nothing", async () => {
    await put(tenant("del-t"));
    await put(limits("del-l", 0.5));
    await put(service("del-s", "del-t", { resourceLimitsId: "del-l" }));
    const err = await rpcError(api().deleteResource({ resourceType: "resource_limits", id: "del-l" }));
    expect(err.code).toBe("CONFLICT");
    expect(err.details.referenced_by).toEqual(["service/del-s"]);
    expect((await api().getResource({ resourceType: "resource_limits", id: "del-l" })).resource!.deletion).toBeUndefined();
  });

  it("leaves a tombstone: hidden from gets and lists, visible with include_deleted, idempotent", async () => {
    const res = await api().deleteResource({ resourceType: "service", id: "del-s" });
    expect(res.resource!.deletion?.deletedAt).toBeDefined();
    expect((await rpcError(api().getResource({ resourceType: "service", id: "del-s" }))).code).toBe("RESOURCE_NOT_FOUND");
    expect((await api().listResources({ resourceType: "service", tenantId: "del-t" })).resources).toEqual([]);
    const all = await api().listResources({ resourceType: "service", tenantId: "del-t", includeDeleted: true });
    expect(all.resources.map((r) => r.id)).toEqual(["del-s"]);
    const again = await api().deleteResource({ resourceType: "service", id: "del-s" });
    expect(again.resource!.metadata!.resourceVersion).toBe(res.resource!.metadata!.resourceVersion);
    const tomb = (await api().getResource({ resourceType: "service", id: "del-s", includeDeleted: true })).resource!;
    expect(tomb.deletion?.requestId).not.toBe("");
    expect((await rpcError(api().updateResource({ resourceType: "service", id: "del-s", desiredState: tomb.desiredState }))).code).toBe(
      "RESOURCE_NOT_FOUND",
    );
    // Now unreferenced, the limits can go; a new resource may take a deleted id.
    await api().deleteResource({ resourceType: "resource_limits", id: "del-l" });
    await put(limits("del-l", 1));
    expect((await api().getResource({ resourceType: "resource_limits", id: "del-l" })).resource!.deletion).toBeUndefined();
  });

  it("cascade deletes the referrers first and reports them", async () => {
    await put(tenant("cas-t"));
    await put(network("cas-n", "cas-t"));
    await put(service("cas-a", "cas-t", { networkIds: ["cas-n"] }));
    await put(service("cas-b", "cas-t", { dependsOn: ["cas-a"] }));
    const res = await api().deleteResource({ resourceType: "tenant", id: "cas-t", cascade: true });
    expect(res.cascaded.sort()).toEqual(["network/cas-n", "service/cas-a", "service/cas-b"]);
    const left = await api().listResources({ tenantId: "cas-t" });
    expect(left.resources).toEqual([]);
    const tomb = await api().listResources({ tenantId: "cas-t", includeDeleted: true });
    expect(Object.fromEntries(tomb.resources.map((r) => [r.id, r.deletion?.cascadedFrom]))).toEqual({
      "cas-n": "tenant/cas-t",
      "cas-a": "tenant/cas-t",
      "cas-b": "tenant/cas-t",
      "cas-t": "",
    });
    // Referrers go before what they reference: cas-b (depends on cas-a) before cas-a, the tenant last.
    const events = await tc.client(EventService, { admin: true }).listEvents({ type: "resource_deleted", tenantId: "cas-t" });
    const deleted = events.events.map((e) => e.resourceId);
    expect(deleted.indexOf("cas-b")).toBeLessThan(deleted.indexOf("cas-a"));
    expect(deleted.at(-1)).toBe("cas-t");
    expect(events.events).toHaveLength(4);
  });
});
