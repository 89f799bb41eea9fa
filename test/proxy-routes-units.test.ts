// Proxy routes and update orders on the controller's side (issue 35): the field rules name what is
// wrong; a service's update order is rendered as Compose's deploy.update_config.order; routes
// travel with every rendered project and are part of its hash (a tenant without them hashes as
// before), so a changed route is a new desired state. A host and path prefix are one tenant's: the
// controller refuses another tenant's overlapping route (a wildcard over a name, any host over
// every host) naming the owner, and a node refuses it again before writing HAProxy's file.
import { readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { ResourceSchema, ServiceSpecSchema, TenantSpecSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { ProxyRouteSchema, UpdateOrder } from "../gen/skipper/v1/proxy_pb.js";
import { desiredForTenant } from "../controller/reconcile/desired-targets.js";
import { checkServiceSpec, checkTenantSpec } from "../controller/resources/resource-rules.js";
import type { SkipperError } from "../controller/base/errors.js";
import { parseManifestDocuments } from "../common/manifest-documents.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { backendName } from "../agent/proxy/haproxy-config.js";
import { HostProxy } from "../agent/proxy/host-proxy.js";
import { ProxyRefused } from "../agent/proxy/haproxy-runtime.js";
import { hostsOverlap, routeProblem, routesClash } from "../common/route-rules.js";
import { checkSpecFields } from "../controller/resources/kinds.js";
import { startInMemory, type InMemoryController } from "./helpers/in-memory-controller.js";
import { rpcError } from "./helpers/errors.js";

const COMPOSE = "services:\n  web:\n    image: busybox\n  worker:\n    image: busybox\n";
function tenant(spec: Record<string, unknown>): Resource {
  return create(ResourceSchema, {
    id: "shop",
    resourceType: "tenant",
    desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: "n1" }, ...spec } } } as never,
  });
}
const nodes = [create(ResourceSchema, { id: "n1", resourceType: "node", desiredState: { kind: { case: "node", value: {} } } })];
const world = (t: Resource, services: Resource[] = []) => ({
  tenant: t,
  services,
  networks: new Map(),
  volumes: new Map(),
  limits: new Map(),
  nodes,
});
const refusal = (fn: () => void): string => {
  try {
    fn();
    return "accepted";
  } catch (e) {
    return String((e as SkipperError).details?.field);
  }
};
const routesRefusal = (routes: unknown[], composeFile = COMPOSE) =>
  refusal(() => checkTenantSpec(create(TenantSpecSchema, { compose: { composeFile }, routes } as never)));

describe("proxy routes", () => {
  it("the rules name the field", () => {
    expect(routesRefusal([{ host: "shop.example.com", pathPrefix: "/api", service: "web", port: 8080 }])).toBe("accepted");
    expect(routesRefusal([{ host: "*.example.com", service: "web", port: 80 }])).toBe("accepted");
    expect(routesRefusal([{ host: "Shop.Example.com", service: "web", port: 80 }])).toBe("desired_state.tenant.routes[0].host");
    expect(routesRefusal([{ pathPrefix: "api", service: "web", port: 80 }])).toBe("desired_state.tenant.routes[0].path_prefix");
    expect(routesRefusal([{ service: "db", port: 80 }])).toBe("desired_state.tenant.routes[0].service");
    expect(routesRefusal([{ service: "web", port: 0 }])).toBe("desired_state.tenant.routes[0].port");
    expect(routesRefusal([{ service: "web", port: 80, drainSeconds: 7200 }])).toBe("desired_state.tenant.routes[0].drain_seconds");
    expect(
      routesRefusal([
        { host: "a.example", pathPrefix: "/api/", service: "web", port: 80 },
        { host: "a.example", pathPrefix: "/api", service: "worker", port: 80 },
      ]),
    ).toBe("desired_state.tenant.routes[1]");
  });

  it("travel with every project and change its hash", () => {
    const plain = desiredForTenant(world(tenant({ compose: { composeFile: COMPOSE } }))).targets.get("n1")!;
    const route = { host: "shop.example.com", service: "web", port: 8080 };
    const routed = desiredForTenant(world(tenant({ compose: { composeFile: COMPOSE }, routes: [route] }))).targets.get("n1")!;
    expect(plain.routes).toEqual([]);
    expect(routed.routes.map((r) => `${r.host} ${r.service}:${r.port}`)).toEqual(["shop.example.com web:8080"]);
    expect(routed.specHash).not.toBe(plain.specHash);
    const moved = desiredForTenant(world(tenant({ compose: { composeFile: COMPOSE }, routes: [{ ...route, port: 8081 }] }))).targets.get(
      "n1",
    )!;
    expect(moved.specHash).not.toBe(routed.specHash);
  });
});

describe("a service's update order", () => {
  it("is rendered as deploy.update_config.order, and only when declared", () => {
    const svc = (id: string, updateOrder?: UpdateOrder) =>
      create(ResourceSchema, {
        id,
        resourceType: "service",
        desiredState: { kind: { case: "service", value: { tenantId: "shop", image: "busybox", updateOrder } } } as never,
      });
    const d = desiredForTenant(world(tenant({}), [svc("web", UpdateOrder.START_FIRST), svc("db", UpdateOrder.STOP_FIRST), svc("job")]));
    const file = parse(d.targets.get("n1")!.project.composeFile) as { services: Record<string, { deploy?: unknown }> };
    expect(file.services.web!.deploy).toEqual({ update_config: { order: "start-first" } });
    expect(file.services.db!.deploy).toEqual({ update_config: { order: "stop-first" } });
    expect(file.services.job!.deploy).toBeUndefined();
    expect(
      refusal(() => checkServiceSpec(create(ServiceSpecSchema, { tenantId: "shop", image: "x", updateOrder: 7 as UpdateOrder }))),
    ).toBe("desired_state.service.update_order");
  });
});

describe("what a node writes into HAProxy's file", () => {
  it("backends never meet across tenants, and a word that would break the file is refused twice", () => {
    expect(backendName("a_b", { service: "c", port: 80 })).not.toBe(backendName("a", { service: "b_c", port: 80 }));
    expect(backendName("a", { service: "b", port: 80 })).toMatch(/^skp_[0-9a-f]{20}$/);
    expect(routesRefusal([{ pathPrefix: "/it's", service: "web", port: 80 }])).toBe("desired_state.tenant.routes[0].path_prefix");
    expect(routeProblem(create(ProxyRouteSchema, { pathPrefix: "/it's", service: "web", port: 80 }))).toMatch(/no quotes/);
    expect(routeProblem(create(ProxyRouteSchema, { host: "a b", service: "web", port: 80 }))).toMatch(/not a host name/);
    expect(routeProblem(create(ProxyRouteSchema, { host: "shop.example", pathPrefix: "/api", service: "web", port: 80 }))).toBeUndefined();
  });
});

describe("the README's routed tenant", () => {
  it("parses as the CLI parses manifests and passes the tenant's field rules", () => {
    const readme = readFileSync(join(import.meta.dirname, "..", "README.md"), "utf8");
    const section = readme.slice(readme.indexOf("## Updates nobody notices"));
    const block = /```yaml\n([\s\S]*?)```/.exec(section)?.[1] ?? "";
    const docs = parseManifestDocuments([{ source: "README.md", text: block }]);
    expect(docs.map((d) => `${d.resource.resourceType}/${d.resource.id}`)).toEqual(["tenant/shop"]);
    checkSpecFields(docs[0]!.resource.desiredState!, "shop");
    const spec = docs[0]!.resource.desiredState!.kind.value as { routes: { service: string }[] };
    expect(spec.routes.map((r) => r.service)).toEqual(["web", "api"]);
  });
});

describe("a host and path prefix are one tenant's", () => {
  let c: InMemoryController;
  beforeAll(async () => {
    c = await startInMemory();
    await c.ctl.reconciler.stop();
  });
  afterAll(async () => {
    await c?.close();
  });
  const routed = (id: string, routes: { host?: string; pathPrefix?: string }[]) =>
    create(ResourceSchema, {
      id,
      resourceType: "tenant",
      desiredState: { kind: { case: "tenant", value: { routes: routes.map((r) => ({ ...r, service: "web", port: 80 })) } } },
    });
  const put = (r: Resource) => c.admin(ResourceService).createResource({ resourceType: "tenant", resource: r });

  it("which hosts overlap", () => {
    expect(hostsOverlap("a.example.com", "a.example.com")).toBe(true);
    expect(hostsOverlap("*.example.com", "a.example.com")).toBe(true);
    expect(hostsOverlap("a.b.example.com", "*.example.com")).toBe(true);
    expect(hostsOverlap("*.example.com", "*.b.example.com")).toBe(true);
    expect(hostsOverlap("", "a.example.com")).toBe(true);
    expect(hostsOverlap("*.example.com", "example.com")).toBe(false);
    expect(hostsOverlap("*.example.com", "a.example.org")).toBe(false);
    expect(hostsOverlap("*.a.example.com", "b.example.com")).toBe(false);
    expect(routesClash({ host: "a.example.com", pathPrefix: "/api/" }, { host: "*.example.com", pathPrefix: "/api" })).toBe(true);
    // Across tenants a narrower prefix under an overlapping host would take the other's requests.
    expect(routesClash({ host: "a.example.com", pathPrefix: "/api" }, { host: "*.example.com", pathPrefix: "/" })).toBe(true);
    expect(routesClash({ host: "shop.example.com", pathPrefix: "/admin" }, { host: "shop.example.com", pathPrefix: "/" })).toBe(true);
    expect(routesClash({ host: "a.example.com", pathPrefix: "/api/v2" }, { host: "a.example.com", pathPrefix: "/api" })).toBe(true);
    expect(routesClash({ host: "a.example.com", pathPrefix: "/apis" }, { host: "a.example.com", pathPrefix: "/api" })).toBe(false);
    expect(routesClash({ host: "a.example.com", pathPrefix: "/blog" }, { host: "*.example.com", pathPrefix: "/api" })).toBe(false);
  });

  it("the controller refuses another tenant's overlapping route, naming the owner; the owner may overlap itself", async () => {
    await put(routed("shop", [{ host: "shop.example.com" }, { host: "*.example.com", pathPrefix: "/api" }]));
    for (const [id, route] of [
      ["blog", { host: "shop.example.com", pathPrefix: "/" }],
      ["blog2", { host: "a.example.com", pathPrefix: "/api/" }],
      ["blog3", { host: "*.example.com" }],
      ["blog4", {}],
      ["blog5", { host: "shop.example.com", pathPrefix: "/admin" }],
    ] as const) {
      const e = await rpcError(put(routed(id, [{ host: "blog.example.org" }, route])));
      expect(e.code, id).toBe("INVALID_REQUEST");
      expect(e.details.route_owner, id).toBe("shop");
      expect(e.details.field, id).toBe("desired_state.tenant.routes[1]");
      expect(e.message, id).toMatch(/overlaps tenant shop's route/);
    }
    // A path shop does not cover under its wildcard, another host: accepted; a move onto shop's later is refused too.
    await put(routed("blog", [{ host: "b.example.com", pathPrefix: "/blog" }, { host: "blog.example.org" }]));
    const moved = await rpcError(
      c.admin(ResourceService).updateResource({
        resourceType: "tenant",
        id: "blog",
        desiredState: routed("blog", [{ host: "x.example.com", pathPrefix: "/api" }]).desiredState,
      }),
    );
    expect(moved.details.route_owner).toBe("shop");
    // The owner adds a name under its own wildcard.
    await c.admin(ResourceService).updateResource({
      resourceType: "tenant",
      id: "shop",
      desiredState: routed("shop", [
        { host: "shop.example.com" },
        { host: "*.example.com", pathPrefix: "/api" },
        { host: "a.example.com", pathPrefix: "/api" },
      ]).desiredState,
    });
  });

  it("a node refuses a route overlapping another tenant's it holds", async () => {
    const dir = await mkdtemp(join(tmpdir(), "skipper-routes-"));
    try {
      const cfg = join(dir, "skipper.cfg");
      await writeFile(
        `${cfg}.json`,
        JSON.stringify([{ tenantId: "shop", routes: [{ host: "shop.example.com", service: "web", port: 80 }], servers: {} }]),
      );
      // The refusal comes before any write or reload: nothing answers at the runtime address.
      const proxy = new HostProxy({
        runtime: { path: join(dir, "none.sock") },
        configPath: cfg,
        listen: "127.0.0.1:1",
        reload: async () => {},
      });
      const theirs = create(ProxyRouteSchema, { host: "*.example.com", service: "web", port: 80 });
      await expect(proxy.setRoutes({ tenantId: "blog", routes: [theirs], servers: new Map() })).rejects.toThrow(
        /\*\.example\.com\/ overlaps a route of tenant shop on this node/,
      );
      // A refusal for what the spec asks: PROXY_REFUSED, which is not retried (a passing trouble is PROXY_UNAVAILABLE).
      await expect(proxy.setRoutes({ tenantId: "blog", routes: [theirs], servers: new Map() })).rejects.toBeInstanceOf(ProxyRefused);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
