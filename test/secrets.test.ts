// Secret resources over the real server (HTTP/2 + TLS): values go in and never come out, are kept
// sealed (nothing under the data directory holds them in clear), and survive a key rotation.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { create, fromJson } from "@bufbuild/protobuf";
import { ActorKind } from "../gen/skipper/v1/access_pb.js";
import { ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { SecretService } from "../gen/skipper/v1/secret_service_pb.js";
import { WebhookService } from "../gen/skipper/v1/webhook_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { SecretKeyRing } from "../controller/tls/secret-key-ring.js";
import { openSecretValue } from "../controller/resources/secret-values.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { buildSnapshot } from "../controller/snapshots/build-snapshot.js";
import { redactMessage } from "../common/logging/redact-message.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { filesContaining } from "./helpers/files.js";

const SENTINEL = "sentinel-s3cr3t-value-7f2a";
let tc: TestController;

beforeAll(async () => {
  tc = await startController({ tls: true, logToFile: true });
  const json = JSON.parse(await readFile(new URL("../examples/tenant.json", import.meta.url), "utf8"));
  json.id = "vault-shop";
  json.desired_state.tenant.compose.project_name = "vault-shop";
  await tc.client(ResourceService, { admin: true }).createResource({ resourceType: "tenant", resource: fromJson(ResourceSchema, json) });
});
afterAll(async () => {
  await tc?.stop();
});

const res = () => tc.client(ResourceService, { admin: true });

function secret(id: string, values: Record<string, string>, extra: { remove?: string[] } = {}): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "secret",
    desiredState: { kind: { case: "secret", value: { tenantId: "vault-shop", values, remove: extra.remove ?? [] } } },
  });
}

function spec(r: Resource | undefined) {
  if (r?.desiredState?.kind.case !== "secret") throw new Error("not a secret");
  return r.desiredState.kind.value;
}

/** Any value as JSON text (bigints as strings). */
function text(v: unknown): string {
  return JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x));
}

/** The stored (sealed) spec, as the file store keeps it. */
async function stored(id: string) {
  return spec(fromJson(ResourceSchema, JSON.parse(await readFile(join(tc.dataDir, "resources", "secrets", `${id}.json`), "utf8"))));
}

describe("secret resources", () => {
  it("take values and show only names, versions, fingerprints and who set them; nothing under the data directory holds a value", async () => {
    const created = await res().createResource({
      resourceType: "secret",
      resource: secret("db", { DB_PASSWORD: SENTINEL, API_URL: "https://x.example" }),
    });
    const shown = spec(created.resource);
    expect(shown.values).toEqual({});
    expect(shown.sealed).toEqual({});
    expect(shown.entries.map((e) => [e.name, e.version])).toEqual([
      ["API_URL", 1n],
      ["DB_PASSWORD", 1n],
    ]);
    expect(shown.entries[1]!.fingerprint).toMatch(/^[0-9a-f]{16}$/);
    expect(shown.entries[1]!.updatedBy?.kind).toBe(ActorKind.ADMIN_TOKEN);
    const read = spec((await res().getResource({ resourceType: "secret", id: "db" })).resource);
    expect(read.sealed).toEqual({});
    expect(read.entries).toEqual(shown.entries);
    expect(text((await res().listResources({ resourceType: "secret" })).resources)).not.toContain(SENTINEL);
    const explained = await res().explainResource({ resourceType: "secret", id: "db" });
    expect(text(explained.resource)).not.toContain(SENTINEL);
    expect(spec(explained.resource).sealed).toEqual({});
    expect(await filesContaining(tc.dataDir, SENTINEL)).toEqual([]);
    // Kept sealed, and the controller's key ring opens it.
    const ring = await SecretKeyRing.load({ dataDir: tc.dataDir });
    expect(openSecretValue(ring, "db", await stored("db"), "DB_PASSWORD")).toBe(SENTINEL);
  });

  it("update sets and removes values by name; the same value again changes nothing; a retried create is the same create", async () => {
    await res().createResource({ resourceType: "secret", resource: secret("api", { TOKEN: "one", OTHER: "x" }) });
    const first = (await res().getResource({ resourceType: "secret", id: "api" })).resource!;
    const same = await res().updateResource({
      resourceType: "secret",
      id: "api",
      desiredState: secret("api", { TOKEN: "one" }).desiredState,
    });
    expect(same.resource?.metadata?.resourceVersion).toBe(first.metadata?.resourceVersion);
    const changed = await res().updateResource({
      resourceType: "secret",
      id: "api",
      desiredState: secret("api", { TOKEN: "two" }, { remove: ["OTHER"] }).desiredState,
    });
    const entries = spec(changed.resource).entries;
    expect(entries.map((e) => [e.name, e.version])).toEqual([["TOKEN", 2n]]);
    expect(entries[0]!.fingerprint).not.toBe(spec(first).entries.find((e) => e.name === "TOKEN")!.fingerprint);
    const again = await res().createResource({ resourceType: "secret", resource: secret("api", { TOKEN: "two" }) });
    expect(again.resource?.metadata?.resourceVersion).toBe(changed.resource?.metadata?.resourceVersion);
    expect((await rpcError(res().createResource({ resourceType: "secret", resource: secret("api", { TOKEN: "three" }) }))).code).toBe(
      "CONFLICT",
    );
  });

  it("a masked update (labels only, or values only) keeps what it does not name", async () => {
    await res().createResource({ resourceType: "secret", resource: secret("masked", { A: "1", B: "2" }) });
    const labelled = await res().updateResource({
      resourceType: "secret",
      id: "masked",
      labels: { team: "x" },
      updateMask: { paths: ["labels"] },
    });
    expect(spec(labelled.resource).entries.map((e) => [e.name, e.version])).toEqual([
      ["A", 1n],
      ["B", 1n],
    ]);
    const valued = await res().updateResource({
      resourceType: "secret",
      id: "masked",
      desiredState: secret("masked", { B: "3" }).desiredState,
      updateMask: { paths: ["desired_state.secret.values"] },
    });
    expect(spec(valued.resource).entries.map((e) => [e.name, e.version])).toEqual([
      ["A", 1n],
      ["B", 2n],
    ]);
    expect(valued.resource?.metadata?.labels).toEqual({ team: "x" });
  });

  it("refuses bad names, sealed forms from a client and a missing tenant, storing nothing", async () => {
    const cases: [Resource, string][] = [
      [secret("bad1", { "1x": "v" }), "desired_state.secret.values"],
      [
        create(ResourceSchema, {
          id: "bad2",
          resourceType: "secret",
          desiredState: { kind: { case: "secret", value: { tenantId: "vault-shop", sealed: { A: "v1.x" } } } },
        }),
        "desired_state.secret.sealed",
      ],
      [
        create(ResourceSchema, {
          id: "bad3",
          resourceType: "secret",
          desiredState: { kind: { case: "secret", value: { tenantId: "nope", values: { A: "v" } } } },
        }),
        "desired_state.secret.tenant_id",
      ],
    ];
    for (const [r, field] of cases) {
      const e = await rpcError(res().createResource({ resourceType: "secret", resource: r }));
      expect([e.code, e.details.field]).toEqual(["INVALID_REQUEST", field]);
      expect((await rpcError(res().getResource({ resourceType: "secret", id: r.id }))).code).toBe("RESOURCE_NOT_FOUND");
    }
  });

  it("key rotation re-seals every value with a new key, keeps versions, retires the old key, and the values still open", async () => {
    const hook = await tc
      .client(WebhookService, { admin: true })
      .createWebhook({ url: "https://hooks.example/T0k3n-abc", eventTypes: ["*"] });
    const before = await stored("db");
    const oldKey = SecretKeyRing.keyIdOf(before.sealed.DB_PASSWORD!);
    const rotated = await tc.client(SecretService, { admin: true }).rotateSecretKeys({});
    expect(rotated.keyId).not.toBe(oldKey);
    expect(rotated.resealedSecrets).toBeGreaterThanOrEqual(2);
    expect(rotated.retiredKeyIds).toEqual([oldKey]);
    expect(rotated.resealedWebhooks).toBe(1);
    // The webhook's sealed URL and secret open with the new key alone.
    const hookFile = await readFile(join(tc.dataDir, "webhooks", "subscriptions", `${hook.webhook!.id}.json`), "utf8");
    expect(hookFile).toContain(`v1.${rotated.keyId}.`);
    expect(hookFile).not.toContain(`v1.${oldKey}.`);
    expect(await filesContaining(tc.dataDir, "T0k3n-abc")).toEqual([]);
    await tc.client(WebhookService, { admin: true }).updateWebhook({ id: hook.webhook!.id, paused: true });
    const after = await stored("db");
    expect(SecretKeyRing.keyIdOf(after.sealed.DB_PASSWORD!)).toBe(rotated.keyId);
    expect(after.entries.map((e) => [e.name, e.version, e.keyId])).toEqual(before.entries.map((e) => [e.name, e.version, rotated.keyId]));
    const ring = await SecretKeyRing.load({ dataDir: tc.dataDir });
    expect(ring.ids).toEqual([rotated.keyId]);
    expect(openSecretValue(ring, "db", after, "DB_PASSWORD")).toBe(SENTINEL);
    // An update after the rotation still recognises the unchanged value.
    const same = await res().updateResource({
      resourceType: "secret",
      id: "db",
      desiredState: secret("db", { DB_PASSWORD: SENTINEL }).desiredState,
    });
    expect(spec(same.resource).entries.find((e) => e.name === "DB_PASSWORD")?.version).toBe(1n);
    const events = await tc.client(EventService, { admin: true }).listEvents({ type: "secret_keys_rotated" });
    expect(events.events).toHaveLength(1);
    expect(await filesContaining(tc.dataDir, SENTINEL)).toEqual([]);
  });

  it("a viewer reads secrets, and listings and snapshots that hold them, with names and versions kept and no value", async () => {
    await res().createResource({ resourceType: "secret", resource: secret("viewer-sees", { API_TOKEN: SENTINEL, plain: SENTINEL }) });
    const { secret: key } = await tc.client(AccessService, { admin: true }).createApiKey({ name: "secret-viewer", role: Role.VIEWER });
    const viewer = tc.client(ResourceService, { headers: { authorization: `Bearer ${key}` } });
    // Each of these answered INTERNAL when redaction turned an entry's int64 version into "[REDACTED]".
    const one = await viewer.getResource({ resourceType: "secret", id: "viewer-sees" });
    expect(spec(one.resource).entries.map((e) => [e.name, e.version])).toEqual([
      ["API_TOKEN", 1n],
      ["plain", 1n],
    ]);
    expect(spec(one.resource).entries[0]!.updatedAt).toBeDefined();
    const ofType = await viewer.listResources({ resourceType: "secret" });
    expect(ofType.resources.map((r) => r.id)).toContain("viewer-sees");
    const all = await viewer.listResources({});
    expect(all.resources.some((r) => r.resourceType === "secret")).toBe(true);
    expect(text([one, ofType, all])).not.toContain(SENTINEL);
    // A snapshot of a tenant that owns a secret is built, and decodes.
    const stored = (await res().listResources({ resourceType: "secret" })).resources;
    const snap = buildSnapshot({
      snapshotId: "s1",
      scope: "tenant",
      tenantId: "vault-shop",
      resources: stored,
      requestId: "r",
      correlationId: "c",
      now: new Date(),
    });
    const entry = snap.resources.find((r) => r.id === "viewer-sees");
    expect(spec(entry).entries.map((e) => e.version)).toEqual([1n, 1n]);
    expect(text(snap)).not.toContain(SENTINEL);
  });

  it("a viewer sees an inline env value only when the tenant marks it public, whatever its name; writers see them all", async () => {
    const env = { GREETING: "hello", INLINE_PW: "inline-pw-value", GITHUB_PAT: "ghp_inlinevalue", DB_PASSWORD: "db-pw-value" };
    await res().createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id: "env-shop",
        resourceType: "tenant",
        desiredState: {
          kind: {
            case: "tenant",
            value: { compose: { composeFile: "services:\n  web:\n    image: busybox\n", env, publicEnv: ["GREETING", "DB_PASSWORD"] } },
          },
        },
      }),
    });
    const { secret: key } = await tc.client(AccessService, { admin: true }).createApiKey({ name: "env-viewer", role: Role.VIEWER });
    const viewer = tc.client(ResourceService, { headers: { authorization: `Bearer ${key}` } });
    const seen = (await viewer.getResource({ resourceType: "tenant", id: "env-shop" })).resource!;
    const shown = seen.desiredState?.kind.case === "tenant" ? seen.desiredState.kind.value.compose?.env : undefined;
    // INLINE_PW and GITHUB_PAT are not listed: hidden, though their names do not look secret;
    // DB_PASSWORD is listed but looks secret: hidden still.
    expect(shown).toEqual({ GREETING: "hello", INLINE_PW: "[REDACTED]", GITHUB_PAT: "[REDACTED]", DB_PASSWORD: "[REDACTED]" });
    const full = (await res().getResource({ resourceType: "tenant", id: "env-shop" })).resource!;
    expect(full.desiredState?.kind.case === "tenant" && full.desiredState.kind.value.compose?.env).toEqual(env);
    const bad = await rpcError(
      res().updateResource({
        resourceType: "tenant",
        id: "env-shop",
        desiredState: create(ResourceSchema, {
          desiredState: { kind: { case: "tenant", value: { compose: { composeFile: "services: {}\n", publicEnv: ["not a name"] } } } },
        }).desiredState,
      }),
    );
    expect([bad.code, bad.details.field]).toEqual(["INVALID_REQUEST", "desired_state.tenant.compose.public_env"]);
  });

  it("redacting a message keeps every field's type: numbers, enums and times stay, text under secret names is hidden", () => {
    const r = create(ResourceSchema, {
      id: "s",
      resourceType: "secret",
      desiredState: {
        kind: {
          case: "secret",
          value: {
            tenantId: "t",
            values: { x: SENTINEL },
            entries: [{ name: "x", version: 7n, fingerprint: "f", updatedAt: { seconds: 5n } }],
          },
        },
      },
    });
    const out = redactMessage(ResourceSchema, r);
    expect(spec(out).values).toEqual({ x: "[REDACTED]" });
    expect(spec(out).entries[0]).toMatchObject({ version: 7n, updatedAt: { seconds: 5n } });
  });
});
