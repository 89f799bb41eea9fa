// DeliveryService over the real server (HTTP/2 + TLS, the generated clients): artifact versions are
// immutable and idempotent to post, scoped to their artifact's tenant, listed newest first by
// semver; mark-bad is recorded with who and why and hides the version from the default listing;
// operators' commands on an environment refuse what does not fit and change nothing when repeated.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { DeliveryService } from "../gen/skipper/v1/delivery_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";

let tc: TestController;
const digest = (n: number) => `sha256:${n.toString(16).padStart(64, "0")}`;

async function createResource(resourceType: string, id: string, desired: JsonObject) {
  const resource = fromJson(ResourceSchema, { id, resource_type: resourceType, desired_state: { [resourceType]: desired } });
  await tc.client(ResourceService, { admin: true }).createResource({ resourceType, resource });
}

beforeAll(async () => {
  tc = await startController({ tls: true });
  await createResource("tenant", "shop", { display_name: "Shop" });
  await createResource("tenant", "other", { display_name: "Other" });
  await createResource("artifact", "web", { tenant_id: "shop", image: { repository: "127.0.0.1:5000/shop/web" } });
  await createResource("artifact", "edge-agent", {
    tenant_id: "shop",
    process_archive: { module: "edge-agent", url_template: "https://files.example/edge-agent/{version}/edge-agent.tar.gz" },
  });
  await createResource("delivery", "shop", {});
  await createResource("environment", "test", { delivery_id: "shop", tenant_ids: ["shop"], artifact_ids: ["web"] });
  await createResource("environment", "prod", {
    delivery_id: "shop",
    tenant_ids: ["other"],
    artifact_ids: ["web"],
    depends_on: [{ environment_id: "test" }],
  });
});
afterAll(async () => {
  await tc?.stop();
});

describe("artifact versions", () => {
  it("a process archive's version refers to its archive, and must be a name a node can install", async () => {
    const d = tc.client(DeliveryService, { admin: true });
    const v = await d.createArtifactVersion({ artifactId: "edge-agent", version: "2.1.0", digest: digest(7) });
    const spec = v.version?.desiredState?.kind.case === "artifactVersion" ? v.version.desiredState.kind.value : undefined;
    expect(spec).toMatchObject({ reference: "https://files.example/edge-agent/2.1.0/edge-agent.tar.gz", digest: digest(7) });
    // A registry tag may start with '_'; a process module's version may not (the node refuses it).
    const bad = await rpcError(d.createArtifactVersion({ artifactId: "edge-agent", version: "_nightly", digest: digest(8) }));
    expect([bad.code, bad.details.field]).toEqual(["INVALID_REQUEST", "version"]);
  });

  it("a posted version is recorded once with its reference; the same again is not new; another digest is a CONFLICT", async () => {
    const d = tc.client(DeliveryService, { admin: true });
    const first = await d.createArtifactVersion({
      artifactId: "web",
      version: "1.0.0",
      digest: digest(1),
      metadata: { commit: "3f2a9c1" },
    });
    expect(first.created).toBe(true);
    expect(first.version?.id).toBe("web.1.0.0");
    const spec = first.version?.desiredState?.kind.case === "artifactVersion" ? first.version.desiredState.kind.value : undefined;
    expect(spec).toMatchObject({ tenantId: "shop", reference: `127.0.0.1:5000/shop/web@${digest(1)}`, metadata: { commit: "3f2a9c1" } });
    const again = await d.createArtifactVersion({ artifactId: "web", version: "1.0.0", digest: digest(1) });
    expect(again.created).toBe(false);
    expect(again.version?.metadata?.resourceVersion).toBe(first.version?.metadata?.resourceVersion);
    const clash = await rpcError(d.createArtifactVersion({ artifactId: "web", version: "1.0.0", digest: digest(2) }));
    expect([clash.code, clash.details.existing_digest]).toEqual(["CONFLICT", digest(1)]);
    const events = await tc.client(EventService, { admin: true }).listEvents({ resourceId: "web.1.0.0" });
    expect(events.events.map((e) => e.type)).toEqual(["delivery_version_discovered"]);
  });

  it("bad input names its field and records nothing; a missing artifact is RESOURCE_NOT_FOUND", async () => {
    const d = tc.client(DeliveryService, { admin: true });
    for (const [req, field] of [
      [{ artifactId: "web", version: "-1", digest: digest(3) }, "version"],
      [{ artifactId: "web", version: "1..2", digest: digest(3) }, "version"],
      [{ artifactId: "web", version: "1.3.0", digest: "sha256:abc" }, "digest"],
      [{ artifactId: "web", version: "1.3.0", digest: digest(3), metadata: { "bad key": "x" } }, "metadata"],
      [{ artifactId: "Web", version: "1.3.0", digest: digest(3) }, "artifact_id"],
    ] as const) {
      const e = await rpcError(d.createArtifactVersion(req));
      expect([e.code, e.details.field]).toEqual(["INVALID_REQUEST", field]);
    }
    expect((await rpcError(d.createArtifactVersion({ artifactId: "api", version: "1.0.0", digest: digest(3) }))).code).toBe(
      "RESOURCE_NOT_FOUND",
    );
    const listed = await d.listArtifactVersions({ artifactId: "web" });
    expect(listed.versions.map((v) => v.id)).not.toContain("web.1.3.0");
  });

  it("a generator key scoped to another tenant cannot post to this tenant's artifact; one scoped to it can", async () => {
    const access = tc.client(AccessService, { admin: true });
    const outsider = (await access.createApiKey({ name: "ci-other", role: Role.GENERATOR, scope: { tenantIds: ["other"] } })).secret;
    const ci = (await access.createApiKey({ name: "ci-shop", role: Role.GENERATOR, scope: { tenantIds: ["shop"] } })).secret;
    const as = (token: string) => tc.client(DeliveryService, { headers: { authorization: `Bearer ${token}` } });
    expect((await rpcError(as(outsider).createArtifactVersion({ artifactId: "web", version: "1.1.0", digest: digest(4) }))).code).toBe(
      "FORBIDDEN",
    );
    expect((await as(ci).createArtifactVersion({ artifactId: "web", version: "1.1.0", digest: digest(4) })).created).toBe(true);
    // Environments are the fleet's: a scoped key may not decide for one.
    const e = await rpcError(as(ci).unpinEnvironment({ id: "test", reason: "x" }));
    expect(e.code).toBe("FORBIDDEN");
  });

  it("versions list newest first by semver (1.10.0 above 1.2.0, a pre-release below its release), paged", async () => {
    const d = tc.client(DeliveryService, { admin: true });
    for (const [v, n] of [
      ["1.2.0", 5],
      ["1.10.0", 6],
      ["1.10.0-rc.1", 7],
      ["v2.0.0", 8],
    ] as const)
      await d.createArtifactVersion({ artifactId: "web", version: v, digest: digest(n) });
    const page1 = await d.listArtifactVersions({ artifactId: "web", pageSize: 4 });
    const page2 = await d.listArtifactVersions({ artifactId: "web", pageSize: 4, pageToken: page1.nextPageToken });
    expect([...page1.versions, ...page2.versions].map((v) => v.id)).toEqual([
      "web.v2.0.0",
      "web.1.10.0",
      "web.1.10.0-rc.1",
      "web.1.2.0",
      "web.1.1.0",
      "web.1.0.0",
    ]);
    expect(page2.nextPageToken).toBe("");
  });

  it("mark-bad records who and why once, hides the version from the default listing, and an admin can take it back", async () => {
    const d = tc.client(DeliveryService, { admin: true });
    expect((await rpcError(d.markVersionBad({ artifactId: "web", version: "1.1.0", reason: "" }))).details.field).toBe("reason");
    const marked = await d.markVersionBad({ artifactId: "web", version: "1.1.0", reason: "memory leak" });
    const st = marked.version?.currentState?.kind.case === "artifactVersion" ? marked.version.currentState.kind.value : undefined;
    expect(st?.markedBad).toMatchObject({ actor: "admin", reason: "memory leak" });
    const repeat = await d.markVersionBad({ artifactId: "web", version: "1.1.0", reason: "again" });
    expect(repeat.version?.metadata?.resourceVersion).toBe(marked.version?.metadata?.resourceVersion);
    expect((await d.listArtifactVersions({ artifactId: "web" })).versions.map((v) => v.id)).not.toContain("web.1.1.0");
    expect((await d.listArtifactVersions({ artifactId: "web", includeBad: true })).versions.map((v) => v.id)).toContain("web.1.1.0");
    const events = await tc
      .client(EventService, { admin: true })
      .listEvents({ resourceId: "web.1.1.0", type: "delivery_version_marked_bad" });
    expect(events.events).toHaveLength(1);
    expect((await rpcError(d.markVersionBad({ artifactId: "web", version: "9.9.9", reason: "x" }))).code).toBe("RESOURCE_NOT_FOUND");
    await d.unmarkVersionBad({ artifactId: "web", version: "1.1.0", reason: "false alarm" });
    expect((await d.listArtifactVersions({ artifactId: "web" })).versions.map((v) => v.id)).toContain("web.1.1.0");
  });
});

describe("environment commands and the matrix", () => {
  it("approving or pinning a release the environment does not know is a CONFLICT that changes nothing; unpin of nothing writes nothing", async () => {
    const d = tc.client(DeliveryService, { admin: true });
    const get = async () =>
      (await tc.client(ResourceService, { admin: true }).getResource({ resourceType: "environment", id: "prod" })).resource;
    const before = await get();
    const approve = await rpcError(d.approveRelease({ id: "prod", releaseId: "rel-0123456789abcdef0123", reason: "ok" }));
    expect([approve.code, approve.details.candidates]).toEqual(["CONFLICT", []]);
    expect((await rpcError(d.pinEnvironment({ id: "prod", releaseId: "rel-0123456789abcdef0123", reason: "x" }))).code).toBe("CONFLICT");
    expect((await rpcError(d.approveRelease({ id: "prod", releaseId: "1.0.0", reason: "ok" }))).details.field).toBe("release_id");
    expect((await rpcError(d.rejectRelease({ id: "prod", releaseId: "rel-0123456789abcdef0123", reason: "" }))).details.field).toBe(
      "reason",
    );
    const unpinned = await d.unpinEnvironment({ id: "prod", reason: "nothing pinned" });
    expect(unpinned.environment?.metadata?.resourceVersion).toBe(before?.metadata?.resourceVersion);
    expect((await rpcError(d.unpinEnvironment({ id: "staging", reason: "x" }))).code).toBe("RESOURCE_NOT_FOUND");
  });

  it("a veto is recorded once with who and why", async () => {
    const d = tc.client(DeliveryService, { admin: true });
    const vetoed = await d.vetoVersion({ id: "prod", artifactId: "web", version: "1.2.0", reason: "breaks EU" });
    const st = vetoed.environment?.currentState?.kind.case === "environment" ? vetoed.environment.currentState.kind.value : undefined;
    expect(st?.decisions.map((x) => [x.versionId, x.by?.reason])).toEqual([["web.1.2.0", "breaks EU"]]);
    const again = await d.vetoVersion({ id: "prod", artifactId: "web", version: "1.2.0", reason: "breaks EU" });
    expect(again.environment?.metadata?.resourceVersion).toBe(vetoed.environment?.metadata?.resourceVersion);
    expect((await rpcError(d.vetoVersion({ id: "prod", artifactId: "web", version: "7.0.0", reason: "x" }))).code).toBe(
      "RESOURCE_NOT_FOUND",
    );
  });

  it("the delivery's matrix lists its environments upstream first", async () => {
    const m = (await tc.client(DeliveryService, { admin: true }).getDeliveryStatus({ id: "shop" })).matrix;
    expect(m?.environmentIds).toEqual(["test", "prod"]);
    expect((await rpcError(tc.client(DeliveryService, { admin: true }).getDeliveryStatus({ id: "nope" }))).code).toBe("RESOURCE_NOT_FOUND");
  });
});
