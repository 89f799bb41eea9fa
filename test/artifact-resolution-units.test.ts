// Resolution of desired state (issue 34): a service or compose service that names an artifact
// runs the version its tenant's environment has promoted, pinned by digest; until there is one
// it is PROMOTION_PENDING with the reason, never deployed with a guess. Pure: desiredForTenant
// and the resolvers, no store.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { EnvironmentSpecSchema, EnvironmentStatusSchema, type Release } from "../gen/skipper/v1/delivery_pb.js";
import { ConvergenceStatus, ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { desiredForTenant } from "../controller/reconcile/desired-targets.js";
import type { EnvironmentView } from "../controller/delivery/resolve/tenant-environment.js";
import { tenantImages } from "../controller/delivery/resolve/tenant-images.js";

const REPO = "127.0.0.1:5000/shop/web";
const digest = (n: number) => `sha256:${String(n).repeat(64).slice(0, 64)}`;
const release = (id: string, ...versions: [string, string, number][]): Release =>
  ({
    id,
    versions: versions.map(([artifactId, version, n]) => ({ artifactId, version, digest: digest(n), reference: `${REPO}@${digest(n)}` })),
  }) as Release;

function env(id: string, spec: Record<string, unknown>, current?: Release, message = ""): EnvironmentView {
  return {
    id,
    spec: create(EnvironmentSpecSchema, { deliveryId: "shop", artifactIds: ["web"], ...spec }),
    status: create(EnvironmentStatusSchema, { current, message }),
  };
}
function tenant(spec: Record<string, unknown> = {}, labels: Record<string, string> = {}): Resource {
  return create(ResourceSchema, {
    id: "shop",
    resourceType: "tenant",
    metadata: { labels },
    desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: "n1" }, ...spec } } } as never,
  });
}
function service(id: string, spec: Record<string, unknown>): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "service",
    desiredState: { kind: { case: "service", value: { tenantId: "shop", ...spec } } } as never,
  });
}
const nodes = [create(ResourceSchema, { id: "n1", resourceType: "node", desiredState: { kind: { case: "node", value: {} } } })];
const world = (t: Resource, services: Resource[], environments: EnvironmentView[]) => ({
  tenant: t,
  services,
  networks: new Map(),
  volumes: new Map(),
  limits: new Map(),
  nodes,
  environments,
});

describe("tenantImages", () => {
  it("resolves an artifact to its environment's current release by digest, found by id or by label", () => {
    const r1 = release("rel-1", ["web", "1.0.0", 1]);
    const byId = tenantImages("shop", {}, new Set(["web"]), [env("test", { tenantIds: ["shop"] }, r1)]);
    expect(byId.images.get("web")).toBe(`${REPO}@${digest(1)}`);
    expect(byId.release).toEqual({ environmentId: "test", releaseId: "rel-1" });
    const byLabel = tenantImages("shop", { stage: "test" }, new Set(["web"]), [env("test", { tenantSelector: "stage=test" }, r1)]);
    expect(byLabel.images.get("web")).toBe(`${REPO}@${digest(1)}`);
  });

  it("says why an artifact does not resolve: no environment, two environments, nothing promoted, not promoted there", () => {
    const r1 = release("rel-1", ["web", "1.0.0", 1]);
    const none = tenantImages("shop", {}, new Set(["web"]), [env("test", { tenantIds: ["other"] }, r1)]);
    expect(none.pending.get("web")).toMatch(/no environment holds tenant shop/);
    const two = tenantImages("shop", {}, new Set(["web"]), [env("a", { tenantIds: ["shop"] }, r1), env("b", { tenantIds: ["shop"] }, r1)]);
    expect(two.pending.get("web")).toMatch(/environments a and b/);
    const nothing = tenantImages("shop", {}, new Set(["web"]), [
      env("test", { tenantIds: ["shop"] }, undefined, "waits for approval of rel-9"),
    ]);
    expect(nothing.pending.get("web")).toBe(
      "artifact web: environment test has promoted no release of it yet (waits for approval of rel-9)",
    );
    expect(nothing.release).toBeUndefined();
    const other = tenantImages("shop", {}, new Set(["web", "api"]), [env("test", { tenantIds: ["shop"] }, r1)]);
    expect(other.pending.get("api")).toMatch(/does not promote it/);
    expect(other.images.get("web")).toBeDefined();
  });
});

describe("desiredForTenant with artifacts", () => {
  it("a service naming an artifact renders its promoted image; a new release changes the spec hash", () => {
    const svc = service("web", { artifactId: "web" });
    const one = desiredForTenant(world(tenant(), [svc], [env("test", { tenantIds: ["shop"] }, release("rel-1", ["web", "1.0.0", 1]))]));
    const file = parse(one.targets.get("n1")!.project.composeFile);
    expect(file.services.web.image).toBe(`${REPO}@${digest(1)}`);
    expect(one.release).toEqual({ environmentId: "test", releaseId: "rel-1" });
    const two = desiredForTenant(world(tenant(), [svc], [env("test", { tenantIds: ["shop"] }, release("rel-2", ["web", "1.1.0", 2]))]));
    expect(two.targets.get("n1")!.specHash).not.toBe(one.targets.get("n1")!.specHash);
  });

  it("until a release is promoted the service is PROMOTION_PENDING and nothing is rendered; others still deploy", () => {
    const d = desiredForTenant(
      world(
        tenant(),
        [service("web", { artifactId: "web" }), service("cache", { image: "redis:7" })],
        [env("test", { tenantIds: ["shop"] })],
      ),
    );
    expect(d.services.get("web")?.blocker?.status).toBe(ConvergenceStatus.PROMOTION_PENDING);
    expect(d.services.get("web")?.blocker?.message).toMatch(/environment test has promoted no release/);
    expect(d.targets.get("n1")?.serviceIds).toEqual(["cache"]);
  });

  it("a tenant's own compose file gets the artifact's image on the services it maps; unresolved or absent names block the tenant", () => {
    const compose = "services:\n  web:\n    image: placeholder\n    ports: ['8080:8080']\n  db:\n    image: postgres:16\n";
    const t = tenant({ compose: { composeFile: compose, artifactImages: { web: "web" } } });
    const ok = desiredForTenant(world(t, [], [env("test", { tenantIds: ["shop"] }, release("rel-1", ["web", "1.0.0", 1]))]));
    const file = parse(ok.targets.get("n1")!.project.composeFile);
    expect(file.services.web).toEqual({ image: `${REPO}@${digest(1)}`, ports: ["8080:8080"] });
    expect(file.services.db.image).toBe("postgres:16");
    const pending = desiredForTenant(world(t, [], [env("test", { tenantIds: ["shop"] })]));
    expect([pending.blocker?.status, pending.targets.size]).toEqual([ConvergenceStatus.PROMOTION_PENDING, 0]);
    const absent = tenant({ compose: { composeFile: compose, artifactImages: { worker: "web" } } });
    const missing = desiredForTenant(world(absent, [], [env("test", { tenantIds: ["shop"] }, release("rel-1", ["web", "1.0.0", 1]))]));
    expect(missing.blocker?.status).toBe(ConvergenceStatus.REFERENCE_MISSING);
    expect(missing.blocker?.message).toMatch(/worker, which the compose file does not define/);
  });

  it("a tenant without artifacts renders as before and carries no release", () => {
    const d = desiredForTenant(world(tenant(), [service("cache", { image: "redis:7" })], [env("test", { tenantIds: ["shop"] })]));
    expect(d.release).toBeUndefined();
    expect(parse(d.targets.get("n1")!.project.composeFile).services.cache.image).toBe("redis:7");
  });
});
