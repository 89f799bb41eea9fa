// The delivery kinds (issue 34) as an operator writes them through the REST routes of a real
// controller: an artifact is its tenant's and names a repository without tag or digest; a service
// may name an artifact as `image: {artifact: web}` (stored as artifact_id); versions are written
// by the controller only; deliveries and environments are checked field by field and for what
// they name; every refusal says which field and stores nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";

let tc: TestController;
const admin = { "x-admin-token": ADMIN_TOKEN, "content-type": "application/json" };

async function call(method: string, path: string, body?: unknown) {
  const res = await fetch(tc.url + path, { method, headers: admin, body: body === undefined ? undefined : JSON.stringify(body) });
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body, read by path in assertions
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}
const post = (type: string, id: string, desired_state: unknown) => call("POST", `/v1/resources/${type}`, { id, desired_state });

// A refusal that names `field` and leaves nothing stored under `type/id`.
async function refused(type: string, id: string, desired: unknown, field: string, status = 400) {
  const r = await post(type, id, desired);
  expect(r.status, JSON.stringify(r.body)).toBe(status);
  expect(r.body.error.details.field, JSON.stringify(r.body)).toBe(field);
  expect((await call("GET", `/v1/resources/${type}/${id}`)).status).toBe(404);
  return r.body.error;
}

beforeAll(async () => {
  tc = await startController({ tls: false });
  expect((await post("tenant", "shop", { display_name: "Shop" })).status).toBe(201);
  expect((await post("tenant", "shop-prod", { display_name: "Shop prod" })).status).toBe(201);
});
afterAll(async () => {
  await tc?.stop();
});

describe("delivery kinds through the API", () => {
  it("an artifact is stored with its watch; a repository with a tag, a bad range or an id with '.' is refused", async () => {
    const web = await post("artifact", "web", {
      tenant_id: "shop",
      image: { repository: "127.0.0.1:5000/shop/web" },
      watch: { interval: "5s", semver_range: "^1.0.0" },
    });
    expect(web.status, JSON.stringify(web.body)).toBe(201);
    expect(web.body.data.desired_state.artifact.watch).toMatchObject({ interval: "5s", semver_range: "^1.0.0" });
    await refused(
      "artifact",
      "api",
      { tenant_id: "shop", image: { repository: "127.0.0.1:5000/shop/api:1.0" } },
      "desired_state.artifact.image.repository",
    );
    await refused(
      "artifact",
      "api",
      { tenant_id: "shop", image: { repository: "127.0.0.1:5000/shop/api" }, watch: { semver_range: "one point oh" } },
      "desired_state.artifact.watch.semver_range",
    );
    await refused("artifact", "api.v2", { tenant_id: "shop", image: { repository: "127.0.0.1:5000/shop/api" } }, "resource.id");
    // A process archive: a module and where each version's archive is ({version} in it); versions are posted.
    await refused(
      "artifact",
      "arc",
      { tenant_id: "shop", process_archive: { module: "m" } },
      "desired_state.artifact.process_archive.url_template",
    );
    await refused(
      "artifact",
      "arc",
      { tenant_id: "shop", process_archive: { module: "Bad_Module", url_template: "/srv/m-{version}.tar.gz" } },
      "desired_state.artifact.process_archive.module",
    );
    await refused(
      "artifact",
      "arc",
      { tenant_id: "shop", process_archive: { module: "m", url_template: "ftp://x/m-{version}.tar.gz" } },
      "desired_state.artifact.process_archive.url_template",
    );
    await refused(
      "artifact",
      "arc",
      { tenant_id: "shop", process_archive: { module: "m", url_template: "/srv/m-{version}.tar.gz" }, watch: { interval: "5s" } },
      "desired_state.artifact.watch",
    );
    const arc = await post("artifact", "arc", {
      tenant_id: "shop",
      process_archive: { module: "m", url_template: "https://files.example/m-{version}.tar.gz" },
    });
    expect(arc.status, JSON.stringify(arc.body)).toBe(201);
    await refused(
      "artifact",
      "api",
      { tenant_id: "shop", image: { repository: "r.example/api" }, watch: { tag_pattern: "^(\\d+\\.?)+$" } },
      "desired_state.artifact.watch.tag_pattern",
    );
    // An artifact stays its tenant's: its versions carry the tenant.
    const moved = await call("PUT", "/v1/resources/artifact/web", {
      desired_state: { tenant_id: "shop-prod", image: { repository: "127.0.0.1:5000/shop/web" } },
    });
    expect([moved.status, moved.body.error?.details?.field]).toEqual([400, "desired_state.artifact.tenant_id"]);
    // Its tenant must exist, as for any resource naming one.
    const missing = await refused(
      "artifact",
      "orphan",
      { tenant_id: "nobody", image: { repository: "r.example/x" } },
      "desired_state.artifact.tenant_id",
    );
    expect(missing.message).toContain("does not exist");
  });

  it("a service names an artifact as image: {artifact: web}; naming it twice, or a missing one, is refused", async () => {
    const svc = await post("service", "web", { tenant_id: "shop", image: { artifact: "web" }, compose_service: "web" });
    expect(svc.status, JSON.stringify(svc.body)).toBe(201);
    expect(svc.body.data.desired_state.service).toMatchObject({ artifact_id: "web", image: "" });
    await refused(
      "service",
      "web2",
      { tenant_id: "shop", image: { artifact: "web" }, artifact_id: "web" },
      "resource.desired_state.service.image",
    );
    await refused("service", "web3", { tenant_id: "shop", image: "nginx:1", artifact_id: "web" }, "desired_state.service.image");
    await refused("service", "web4", { tenant_id: "shop", image: { tag: "x" } }, "resource.desired_state.service.image");
    await refused("service", "web5", { tenant_id: "shop", artifact_id: "nope" }, "desired_state.service.artifact_id");
  });

  it("versions are the controller's: creating one as a resource is refused, saying how versions arrive", async () => {
    const r = await post("artifact_version", "web.1.0.0", { artifact_id: "web", tenant_id: "shop", version: "1.0.0" });
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain("/v1/artifacts/{id}/versions");
  });

  it("a delivery's groups and an environment's tenants, artifacts, dependencies and checks are checked", async () => {
    expect((await post("artifact", "worker", { tenant_id: "shop", image: { repository: "127.0.0.1:5000/shop/worker" } })).status).toBe(201);
    await refused(
      "delivery",
      "d1",
      { releases: [{ name: "app", artifact_ids: ["web"] }] },
      "desired_state.delivery.releases[0].artifact_ids",
    );
    await refused(
      "delivery",
      "d1",
      {
        releases: [
          { name: "a", artifact_ids: ["web", "worker"] },
          { name: "b", artifact_ids: ["worker", "web"] },
        ],
      },
      "desired_state.delivery.releases[1].artifact_ids[0]",
    );
    const shop = await post("delivery", "shop", {
      releases: [{ name: "app", artifact_ids: ["web", "worker"], match: "RELEASE_MATCH_VERSION" }],
    });
    expect(shop.status, JSON.stringify(shop.body)).toBe(201);
    const test = { delivery_id: "shop", tenant_ids: ["shop"], artifact_ids: ["web", "worker"] };
    expect((await post("environment", "test", test)).status).toBe(201);
    await refused("environment", "e1", { delivery_id: "shop", artifact_ids: ["web"] }, "desired_state.environment.tenant_ids");
    await refused(
      "environment",
      "prod",
      { ...test, tenant_ids: ["shop-prod"], depends_on: [{ environment_id: "prod" }] },
      "desired_state.environment.depends_on[0].environment_id",
    );
    await refused(
      "environment",
      "prod",
      { ...test, tenant_ids: ["shop-prod"], verifications: [{ name: "smoke" }] },
      "desired_state.environment.verifications[0]",
    );
    await refused(
      "environment",
      "prod",
      { ...test, tenant_ids: ["shop-prod"], verifications: [{ name: "smoke", probe: { http: { url: "http://x/" } }, tenant_id: "shop" }] },
      "desired_state.environment.verifications[0].tenant_id",
    );
    await refused(
      "environment",
      "prod",
      { ...test, tenant_ids: ["shop-prod"], allowed_times: [{ days: ["someday"], start: "09:00", end: "17:00", time_zone: "UTC" }] },
      "desired_state.environment.allowed_times[0].days[0]",
    );
    await refused(
      "environment",
      "prod",
      { ...test, tenant_ids: ["shop-prod"], depends_on: [{ environment_id: "staging" }] },
      "desired_state.environment.depends_on[0].environment_id",
    );
    const prod = await post("environment", "prod", {
      ...test,
      tenant_ids: ["shop-prod"],
      depends_on: [{ environment_id: "test", bake_time: "30s" }],
      require_approval: true,
      verifications: [{ name: "smoke", probe: { http: { url: "http://127.0.0.1:8080/" } }, required_passes: 2 }],
    });
    expect(prod.status, JSON.stringify(prod.body)).toBe(201);
    // A dependency back from test to prod is a cycle: refused, test unchanged.
    const cycle = await call("PUT", "/v1/resources/environment/test", {
      desired_state: { ...test, depends_on: [{ environment_id: "prod" }] },
    });
    expect(cycle.status, JSON.stringify(cycle.body)).toBe(400);
    expect(cycle.body.error.details.cycle).toEqual(["test", "prod", "test"]);
    expect((await call("GET", "/v1/resources/environment/test")).body.data.desired_state.environment.depends_on).toEqual([]);
    // An upstream of another delivery is refused.
    expect((await post("delivery", "other", { display_name: "Other" })).status).toBe(201);
    await refused(
      "environment",
      "elsewhere",
      { ...test, delivery_id: "other", depends_on: [{ environment_id: "test" }] },
      "desired_state.environment.depends_on[0].environment_id",
    );
    // What an environment names is held back from deletion.
    expect((await call("DELETE", "/v1/resources/environment/test")).status).toBe(409);
  });

  it("a git source's URL scheme, branch, path and interval are checked", async () => {
    await refused("git_source", "g1", { url: "-oProxyCommand=x" }, "desired_state.git_source.url");
    await refused("git_source", "g1", { url: "https://git.example/r.git", branch: "-x" }, "desired_state.git_source.branch");
    await refused("git_source", "g1", { url: "https://git.example/r.git", path: "../etc" }, "desired_state.git_source.path");
    // Each sync fetches from the server: not more often than every 10 s.
    await refused("git_source", "g1", { url: "https://git.example/r.git", interval: "9s" }, "desired_state.git_source.interval");
    // A webhook's secret is the fleet's: a tenant's secret is refused.
    expect((await post("secret", "shop-hook", { tenant_id: "shop", values: { push: "x" } })).status).toBe(201);
    await refused(
      "git_source",
      "g1",
      { url: "https://git.example/r.git", webhook_secret: { secret_id: "shop-hook", key: "push" } },
      "desired_state.git_source.webhook_secret.secret_id",
    );
    expect((await post("git_source", "g1", { url: "https://git.example/r.git", path: "deploy/prod", interval: "10s" })).status).toBe(201);
  });
});
