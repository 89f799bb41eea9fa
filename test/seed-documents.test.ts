// The seed's resource documents, posted as written to the REST routes of a real controller, are
// accepted and stored in the contract's canonical form (issue 18, item 11): a flat desired_state
// is wrapped under its kind, a tenant's compose.tenant_id is dropped (refused when it names
// another tenant), free-form metadata becomes annotations, and a node can be declared ahead of
// its registration. Fixtures in test/fixtures/seed/ follow the seed's example shape.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";

let tc: TestController;
const admin = { "x-admin-token": ADMIN_TOKEN, "content-type": "application/json" };
const fixture = async (name: string) => JSON.parse(await readFile(join(import.meta.dirname, "fixtures", "seed", `${name}.json`), "utf8"));

async function call(method: string, path: string, body?: unknown) {
  const res = await fetch(tc.url + path, { method, headers: admin, body: body === undefined ? undefined : JSON.stringify(body) });
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body, read by path in assertions
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

beforeAll(async () => {
  tc = await startController({ tls: false });
});
afterAll(async () => {
  await tc?.stop();
});

describe("the seed's documents on the REST routes", () => {
  it("a node declared from the seed's document is stored canonical, and registering it gives its token", async () => {
    const created = await call("POST", "/v1/resources/node", await fixture("node"));
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const node = created.body.data;
    expect(node.desired_state.node).toMatchObject({ display_name: "Host 1", disabled: false, labels: { env: "dev" } });
    expect(node.metadata.annotations).toEqual({ owner: "platform-team", rack: "7" });
    const reg = await call("POST", "/v1/nodes", { node_id: "host-1" });
    expect(reg.status, JSON.stringify(reg.body)).toBe(200);
    expect(reg.body.data.token).toMatch(/\S{20,}/);
    // Registered once, a second registration is the documented CONFLICT.
    expect((await call("POST", "/v1/nodes", { node_id: "host-1" })).status).toBe(409);
  });

  it("the seed's tenant and service documents are accepted as written and stored canonical", async () => {
    const tenant = await call("POST", "/v1/resources/tenant", await fixture("tenant"));
    expect(tenant.status, JSON.stringify(tenant.body)).toBe(201);
    const spec = tenant.body.data.desired_state.tenant;
    expect(spec.display_name).toBe("Example Tenant");
    expect(spec.deployment_policy.target_node_id).toBe("host-1");
    expect(spec.service_ids).toEqual(["service-web"]);
    expect(spec.compose).toEqual({
      project_name: "",
      compose_file: "services:\n web:\n image: nginx:alpine\n",
      env: { NGINX_PORT: "8081" },
      secret_env: {},
      secret_files: {},
      public_env: [],
      artifact_images: {},
    });
    const service = await call("POST", "/v1/resources/service", await fixture("service"));
    expect(service.status, JSON.stringify(service.body)).toBe(201);
    expect(service.body.data.desired_state.service).toMatchObject({
      tenant_id: "example-tenant",
      image: "nginx:alpine",
      compose_service: "web",
    });
    // Posting the same document again is the same resource (idempotent create): not created anew,
    // the same spec. (Its version may have moved on: the reconciler records its verdict on it.)
    const again = await call("POST", "/v1/resources/tenant", await fixture("tenant"));
    expect(again.status).toBe(201);
    expect(tenant.body.data.created_at).toMatch(/^20/);
    expect(again.body.data.created_at).toBe(tenant.body.data.created_at);
    expect(again.body.data.desired_state).toEqual(tenant.body.data.desired_state);
  });

  it("PUT takes the whole seed document; its metadata becomes labels and annotations", async () => {
    const doc = await fixture("tenant");
    doc.desired_state.display_name = "Renamed";
    doc.metadata = { labels: { env: "prod" }, ticket: "OPS-12" };
    const put = await call("PUT", "/v1/resources/tenant/example-tenant", doc);
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body.data.desired_state.tenant.display_name).toBe("Renamed");
    expect(put.body.data.metadata.labels).toEqual({ env: "prod" });
    expect(put.body.data.metadata.annotations).toEqual({ ticket: "OPS-12" });
  });

  it("refuses what cannot be mapped, naming the field, and stores nothing", async () => {
    const other = await fixture("tenant");
    other.id = "second-tenant";
    const refused = await call("POST", "/v1/resources/tenant", other);
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe("INVALID_REQUEST");
    expect(refused.body.error.details.field).toBe("resource.desired_state.tenant.compose.tenant_id");
    expect(refused.body.error.message).toContain('"example-tenant"');
    expect((await call("GET", "/v1/resources/tenant/second-tenant")).status).toBe(404);

    const reported = await fixture("service");
    reported.id = "service-two";
    reported.current_state = { state: "running" };
    const withState = await call("POST", "/v1/resources/service", reported);
    expect(withState.status).toBe(400);
    expect(withState.body.error.message).toContain("reported by agents");
    expect((await call("GET", "/v1/resources/service/service-two")).status).toBe(404);

    const clash = await fixture("node");
    clash.id = "host-2";
    clash.metadata = { annotations: { owner: "a" }, owner: "b" };
    const both = await call("POST", "/v1/resources/node", clash);
    expect(both.status).toBe(400);
    expect(both.body.error.details.field).toBe("resource.metadata.owner");
  });
});
