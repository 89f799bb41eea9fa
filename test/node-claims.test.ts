// What a node may claim (issue 17): the labels it reports never widen what it receives, its
// heartbeat interval is bounded, and its reports of other tenants' projects change nothing of
// theirs. Through the real services and reconciler over the in-memory transport.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { FieldMaskSchema } from "@bufbuild/protobuf/wkt";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { startInMemory, type InMemoryController } from "./helpers/in-memory-controller.js";
import { rpcError } from "./helpers/errors.js";

let c: InMemoryController;
const tokens: Record<string, string> = {};

function resource(type: "tenant" | "service", id: string, value: Record<string, unknown>): Resource {
  return create(ResourceSchema, { id, resourceType: type, desiredState: { kind: { case: type, value } } as never });
}
const beat = (nodeId: string, req: Record<string, unknown> = {}) =>
  c.asNode(NodeService, tokens[nodeId]!).heartbeat({ nodeId, agentVersion: "1.0", heartbeatIntervalMs: 5000n, ...req });
/** Tenant ids of the orders a node was sent, once the reconciler is done. */
async function ordersFor(nodeId: string): Promise<string[]> {
  await c.ctl.reconciler.idle();
  return (await c.ctl.store.listWorkOrders({ nodeId })).items.map((o) => o.target?.tenantId ?? "");
}
async function targetsOf(tenantId: string): Promise<string[]> {
  const t = (await c.ctl.store.getResource("tenant", tenantId))!;
  return t.currentState?.kind.case === "tenant" ? t.currentState.kind.value.targets.map((r) => r.nodeId) : [];
}
/** Tenant `id`, placed on nodes labelled tier=gold, with a service holding a secret. */
async function goldTenant(id: string): Promise<void> {
  const rs = c.admin(ResourceService);
  await rs.createResource({
    resourceType: "tenant",
    resource: resource("tenant", id, { deploymentPolicy: { nodeSelector: { tier: "gold" } } }),
  });
  await rs.createResource({
    resourceType: "service",
    resource: resource("service", `${id}-db`, { tenantId: id, image: "busybox:stable", env: { DB_PASSWORD: "s3cret" } }),
  });
}

beforeEach(async () => {
  c = await startInMemory();
  const nodes = c.admin(NodeService);
  tokens.a = (await nodes.registerNode({ nodeId: "a", labels: { tier: "gold" } })).token;
  tokens.b = (await nodes.registerNode({ nodeId: "b" })).token;
  tokens.c = (await nodes.registerNode({ nodeId: "c", trustedLabelKeys: ["tier"] })).token;
  for (const n of ["a", "b", "c"]) await beat(n);
});
afterEach(async () => {
  await c.close();
});

describe("labels a node reports", () => {
  it("place nothing: a node reporting tier=gold gets no order of a tenant placed on tier=gold until an admin sets the label", async () => {
    await beat("b", { labels: { tier: "gold" } });
    await goldTenant("gold");
    expect(await ordersFor("a")).toEqual(["gold"]);
    expect(await ordersFor("b")).toEqual([]);
    // Shown as reported.
    const b = (await c.ctl.store.getResource("node", "b"))!;
    expect(b.currentState?.kind.case === "node" && b.currentState.kind.value.labels).toEqual({ tier: "gold" });

    // The admin promotes it: the node's own labels now say tier=gold.
    await c.admin(ResourceService).updateResource({
      resourceType: "node",
      id: "b",
      desiredState: { kind: { case: "node", value: { labels: { tier: "gold" } } } },
      updateMask: create(FieldMaskSchema, { paths: ["desired_state.node.labels"] }),
    });
    expect(await ordersFor("b")).toEqual(["gold"]);
  });

  it("place work under a key the admin trusts for that node, as reported", async () => {
    await goldTenant("gold");
    expect(await ordersFor("c")).toEqual([]);
    await beat("c", { labels: { tier: "gold" } });
    expect(await ordersFor("c")).toEqual(["gold"]);
  });

  it("a trusted key that is not a label key is refused at registration", async () => {
    const e = await rpcError(c.admin(NodeService).registerNode({ nodeId: "d", trustedLabelKeys: ["bad key"] }));
    expect(e.code).toBe("INVALID_REQUEST");
    expect(await c.ctl.store.getResource("node", "d")).toBeUndefined();
  });
});

describe("a heartbeat's interval", () => {
  it.each([[86_400_000_000n], [99n], [-1n]])("of %s ms is INVALID_REQUEST and changes nothing", async (ms) => {
    const before = (await c.ctl.store.getResource("node", "b"))!;
    const e = await rpcError(beat("b", { heartbeatIntervalMs: ms, agentVersion: "2.0" }));
    expect(e.code).toBe("INVALID_REQUEST");
    expect(e.message).toMatch(/heartbeat_interval_ms/);
    const after = (await c.ctl.store.getResource("node", "b"))!;
    expect(after.metadata?.resourceVersion).toBe(before.metadata?.resourceVersion);
  });

  it("within 100 ms .. 5 min is stored", async () => {
    await beat("b", { heartbeatIntervalMs: 300_000n });
    const b = (await c.ctl.store.getResource("node", "b"))!;
    expect(b.currentState?.kind.case === "node" && b.currentState.kind.value.heartbeatIntervalMs).toBe(300_000n);
  });
});

describe("a node reporting another tenant's project", () => {
  it("changes nothing of that tenant: no order, no target record", async () => {
    await goldTenant("gold");
    expect(await ordersFor("a")).toEqual(["gold"]);
    const records = await targetsOf("gold");
    await beat("b", { projectsReported: true, projects: [{ projectName: "gold", tenantId: "gold", specHash: "fake" }] });
    expect(await ordersFor("b")).toEqual([]);
    expect(await targetsOf("gold")).toEqual(records);
    expect(await ordersFor("a")).toEqual(["gold"]);
  });

  it("out of bounds (too many projects, a long string, a bad id) is refused whole", async () => {
    const many = Array.from({ length: 1001 }, (_, i) => ({ projectName: `p${i}` }));
    for (const req of [
      { projectsReported: true, projects: many },
      { agentVersion: "x".repeat(5000) },
      { projectsReported: true, projects: [{ projectName: "p", tenantId: "../etc" }] },
      { labels: { "bad key": "v" } },
    ]) {
      const e = await rpcError(beat("b", req));
      expect(e.code).toBe("INVALID_REQUEST");
    }
    const b = (await c.ctl.store.getResource("node", "b"))!;
    expect(b.currentState?.kind.case === "node" && b.currentState.kind.value.projects).toEqual([]);
  });
});
