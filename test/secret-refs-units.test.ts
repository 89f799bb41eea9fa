// Secret references in the renderer and the planner, as pure functions of resources: what the
// rendered project names (variables, compose secrets and their mounts), what goes into its spec
// hash (references and value versions, never anything else of a secret), and the verdict when a
// referenced secret or value is missing. Values never appear here: only entries with versions.
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { parse } from "yaml";
import { ConvergenceStatus, ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { SecretKeyRefSchema } from "../gen/skipper/v1/secret_pb.js";
import { projectHash, renderProject, type RenderInput } from "../controller/reconcile/render-project.js";
import { desiredForTenant, type TenantWorld } from "../controller/reconcile/desired-targets.js";
import { secretFileName, secretVariable } from "../controller/resources/secret-refs.js";

function tenant(spec: Record<string, unknown> = {}): Resource {
  return create(ResourceSchema, {
    id: "shop",
    resourceType: "tenant",
    desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { nodeSelector: { env: "prod" } }, ...spec } } } as never,
  });
}
function service(id: string, spec: Record<string, unknown> = {}): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "service",
    desiredState: { kind: { case: "service", value: { tenantId: "shop", image: "busybox:stable", ...spec } } } as never,
  });
}
function node(id: string, labels: Record<string, string>): Resource {
  return create(ResourceSchema, { id, resourceType: "node", desiredState: { kind: { case: "node", value: { labels } } } });
}

interface Entry {
  version: bigint;
  fingerprint?: string;
  keyId?: string;
}
/** A secret of tenant shop holding `entries` (name -> version and what it is sealed with). */
function secret(id: string, entries: Record<string, Entry | bigint>, registry = ""): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "secret",
    desiredState: {
      kind: {
        case: "secret",
        value: {
          tenantId: "shop",
          registry,
          entries: Object.entries(entries).map(([name, e]) => {
            const x = typeof e === "bigint" ? { version: e } : e;
            return { name, version: x.version, fingerprint: x.fingerprint ?? `fp-${name}-${x.version}`, keyId: x.keyId ?? "k1" };
          }),
        },
      },
    },
  });
}
const secretsOf = (...rs: Resource[]) => new Map(rs.map((r) => [r.id, r]));
const ref = (secretId: string, key: string) => create(SecretKeyRefSchema, { secretId, key });
const input = (services: Resource[], extra: Partial<RenderInput> = {}): RenderInput => ({
  tenant: tenant(),
  services,
  networks: new Map(),
  volumes: new Map(),
  limits: new Map(),
  ...extra,
});
/** `${NAME}`, as the rendered environment refers to a project variable. */
const interpolated = (name: string) => `$\{${name}}`;

// A tenant's own compose file, with comments the rendering must keep.
const OWN_FILE = [
  "# the shop's own file",
  "services:",
  "  app: # the web front",
  "    image: busybox:stable",
  "    environment:",
  `      DB_PASSWORD: ${interpolated("DB_PASSWORD")}`,
  "    secrets: [tls_cert]",
  "secrets:",
  "  tls_cert:",
  "    file: ./local-dev.crt # replaced by the controller",
  "  other:",
  "    file: ./other.txt",
  "",
].join("\n");
const ownTenant = (compose: Record<string, unknown> = {}) =>
  tenant({
    compose: {
      composeFile: OWN_FILE,
      secretEnv: { DB_PASSWORD: { secretId: "db", key: "password" } },
      secretFiles: { tls_cert: { secretId: "db", key: "cert" } },
      ...compose,
    },
  });

describe("the spec hash of a project without secrets", () => {
  it("is what projectHash gave before secrets existed (no third argument), services or own file, secrets held or not", () => {
    const unused = secretsOf(secret("db", { password: 1n }));
    const cases: RenderInput[] = [
      input([service("web", { env: { A: "1" } }), service("worker")]),
      input([service("web")], { secrets: unused }),
      input([service("app", { composeService: "app" })], { tenant: tenant({ compose: { composeFile: OWN_FILE, env: { X: "1" } } }) }),
      input([], { tenant: tenant({ compose: { composeFile: OWN_FILE } }), secrets: unused }),
    ];
    for (const c of cases) {
      const r = renderProject(c);
      expect(r.secretUses).toEqual([]);
      expect(r.registrySecretIds).toEqual([]);
      expect(r.specHash).toBe(projectHash(r.project, r.composeServices));
      expect(r.specHash).toBe(projectHash(r.project, r.composeServices, { secretUses: [], registrySecretIds: [] }));
    }
    // A project that uses a secret hashes differently from the same project without the uses.
    const used = renderProject(input([service("web", { secretEnv: { P: { secretId: "db", key: "password" } } })], { secrets: unused }));
    expect(used.specHash).not.toBe(projectHash(used.project, used.composeServices));
  });
});

describe("the spec hash of a project that uses secrets", () => {
  const web = service("web", {
    secretEnv: { DB_PASSWORD: { secretId: "db", key: "password" } },
    secretFiles: { "server.crt": { secretId: "db", key: "cert" } },
  });
  const hashWith = (db: Resource, services = [web], t = tenant()) =>
    renderProject(input(services, { tenant: t, secrets: secretsOf(db) })).specHash;
  const base = secret("db", { password: 1n, cert: 1n, spare: 1n });

  it("changes with a new version of a referenced value (env or file), in services and in a tenant's own file", () => {
    for (const t of [undefined, ownTenant()]) {
      const services = t ? [] : [web];
      const before = hashWith(base, services, t);
      expect(hashWith(secret("db", { password: 2n, cert: 1n, spare: 1n }), services, t)).not.toBe(before);
      expect(hashWith(secret("db", { password: 1n, cert: 2n, spare: 1n }), services, t)).not.toBe(before);
      expect(hashWith(base, services, t)).toBe(before);
    }
  });

  it("does not change with a new version of a value of the same secret that nothing references", () => {
    expect(hashWith(secret("db", { password: 1n, cert: 1n, spare: 7n }))).toBe(hashWith(base));
    expect(hashWith(secret("db", { password: 1n, cert: 1n }))).toBe(hashWith(base));
    expect(hashWith(secret("db", { password: 1n, cert: 1n, spare: 1n, added: 1n }))).toBe(hashWith(base));
  });

  it("does not change when the values are re-sealed (new key id and fingerprint, same versions)", () => {
    const resealed = secret("db", {
      password: { version: 1n, fingerprint: "rotated-1", keyId: "k2" },
      cert: { version: 1n, fingerprint: "rotated-2", keyId: "k2" },
      spare: { version: 1n, fingerprint: "rotated-3", keyId: "k2" },
    });
    expect(hashWith(resealed)).toBe(hashWith(base));
    expect(hashWith(resealed, [], ownTenant())).toBe(hashWith(base, [], ownTenant()));
  });

  it("changes when a reference moves to another value, even at the same version", () => {
    const moved = service("web", {
      secretEnv: { DB_PASSWORD: { secretId: "db", key: "spare" } },
      secretFiles: { "server.crt": { secretId: "db", key: "cert" } },
    });
    expect(hashWith(base, [moved])).not.toBe(hashWith(base));
  });
});

describe("services' references in the rendered project", () => {
  const pw = ref("db", "password");
  const cert = ref("db", "cert");
  const web = service("web", {
    env: { MODE: "prod" },
    secretEnv: { DB_PASSWORD: { secretId: "db", key: "password" } },
    secretFiles: { "server.crt": { secretId: "db", key: "cert" } },
  });
  const worker = service("worker", {
    secretEnv: { PGPASSWORD: { secretId: "db", key: "password" }, API_TOKEN: { secretId: "api", key: "token" } },
    secretFiles: { "tls.crt": { secretId: "db", key: "cert" } },
  });
  const secrets = secretsOf(secret("db", { password: 3n, cert: 1n }), secret("api", { token: 2n }));
  const r = renderProject(input([worker, web], { secrets }));
  const doc = parse(r.project.composeFile) as {
    services: Record<string, { environment?: Record<string, string>; secrets?: { source: string; target: string }[] }>;
    secrets?: Record<string, { file: string }>;
  };

  it("share one variable and one compose secret per (secret, value); distinct values never share", () => {
    expect(secretVariable(pw)).toMatch(/^SKIPPER_SECRET_[0-9A-F]{16}$/);
    expect(secretFileName(cert)).toMatch(/^skipper_[0-9a-f]{16}$/);
    expect(r.project.secretEnv).toEqual({
      [secretVariable(pw)]: pw,
      [secretVariable(ref("api", "token"))]: ref("api", "token"),
    });
    expect(secretVariable(ref("api", "token"))).not.toBe(secretVariable(pw));
    expect(r.project.secretFiles).toEqual({ [secretFileName(cert)]: cert });
    expect(r.secretUses.map((u) => [u.secretId, u.key, u.version])).toEqual([
      ["api", "token", 2n],
      ["db", "cert", 1n],
      ["db", "password", 3n],
    ]);
  });

  it("give each service an interpolation of the shared variable under the name it asked for, beside its literal env", () => {
    expect(doc.services.web!.environment).toEqual({ DB_PASSWORD: interpolated(secretVariable(pw)), MODE: "prod" });
    expect(doc.services.worker!.environment).toEqual({
      API_TOKEN: interpolated(secretVariable(ref("api", "token"))),
      PGPASSWORD: interpolated(secretVariable(pw)),
    });
    // The project's env (its .env file) holds none of them: the node passes them in Compose's environment.
    expect(r.project.env).toEqual({});
  });

  it("declare each compose secret at ./.skipper-secrets/<name> and mount it where each service asked", () => {
    const name = secretFileName(cert);
    expect(doc.secrets).toEqual({ [name]: { file: `./.skipper-secrets/${name}` } });
    expect(doc.services.web!.secrets).toEqual([{ source: name, target: "server.crt" }]);
    expect(doc.services.worker!.secrets).toEqual([{ source: name, target: "tls.crt" }]);
  });

  it("render the same bytes and hash whatever order the services come in", () => {
    const again = renderProject(input([web, worker], { secrets }));
    expect(again.project.composeFile).toBe(r.project.composeFile);
    expect(again.specHash).toBe(r.specHash);
  });
});

describe("a tenant's own compose file", () => {
  it("gets secrets.<name>.file for each of its secret_files and keeps everything else, comments too", () => {
    const r = renderProject(input([], { tenant: ownTenant(), secrets: secretsOf(secret("db", { password: 1n, cert: 1n })) }));
    const file = r.project.composeFile;
    const doc = parse(file) as { services: Record<string, unknown>; secrets: Record<string, { file: string }> };
    expect(doc.secrets).toEqual({ tls_cert: { file: "./.skipper-secrets/tls_cert" }, other: { file: "./other.txt" } });
    expect(doc.services).toEqual({
      app: { image: "busybox:stable", environment: { DB_PASSWORD: interpolated("DB_PASSWORD") }, secrets: ["tls_cert"] },
    });
    expect(file).toContain("# the shop's own file");
    expect(file).toContain("# the web front");
    expect(file).not.toContain("local-dev.crt");
    // The tenant's names are the project's: no project-wide renaming for its own file.
    expect(r.project.secretEnv).toEqual({ DB_PASSWORD: ref("db", "password") });
    expect(r.project.secretFiles).toEqual({ tls_cert: ref("db", "cert") });
    expect(r.secretUses.map((u) => `${u.secretId}/${u.key}@${u.version}`)).toEqual(["db/cert@1", "db/password@1"]);
  });

  it("without a top-level secrets key gets one; with no secret_files it is left byte for byte", () => {
    const bare = "# no secrets here\nservices:\n  app:\n    image: busybox:stable # pinned\n";
    const withFile = renderProject(
      input([], {
        tenant: ownTenant({ composeFile: bare, secretEnv: {} }),
        secrets: secretsOf(secret("db", { cert: 1n })),
      }),
    );
    expect(parse(withFile.project.composeFile)).toEqual({
      services: { app: { image: "busybox:stable" } },
      secrets: { tls_cert: { file: "./.skipper-secrets/tls_cert" } },
    });
    expect(withFile.project.composeFile).toContain("# pinned");
    const envOnly = renderProject(
      input([], { tenant: ownTenant({ composeFile: bare, secretFiles: {} }), secrets: secretsOf(secret("db", { password: 1n })) }),
    );
    expect(envOnly.project.composeFile).toBe(bare);
  });

  it("an empty top-level secrets key (or a list, which Compose refuses) becomes the declarations", () => {
    for (const tail of ["secrets:\n", "secrets: []\n"]) {
      const file = `services:\n  app:\n    image: busybox:stable\n    secrets: [tls_cert]\n${tail}`;
      const r = renderProject(
        input([], { tenant: ownTenant({ composeFile: file, secretEnv: {} }), secrets: secretsOf(secret("db", { cert: 1n })) }),
      );
      expect((parse(r.project.composeFile) as { secrets: unknown }).secrets, tail).toEqual({
        tls_cert: { file: "./.skipper-secrets/tls_cert" },
      });
    }
  });
});

describe("registry credentials", () => {
  const reg = secret("reg", { username: 1n, password: 4n }, "registry.example.com");
  const other = secret("db", { password: 1n });

  it("of the tenant are in registrySecretIds and their username and password in secretUses, used or not by a reference", () => {
    const r = renderProject(input([service("web")], { secrets: secretsOf(other, reg) }));
    expect(r.registrySecretIds).toEqual(["reg"]);
    expect(r.secretUses.map((u) => `${u.secretId}/${u.key}@${u.version}`)).toEqual(["reg/password@4", "reg/username@1"]);
    expect(r.specHash).not.toBe(projectHash(r.project, r.composeServices));
    // A new password rolls the project; a tenant without the credential hashes as before.
    const rotated = renderProject(
      input([service("web")], { secrets: secretsOf(other, secret("reg", { username: 1n, password: 5n }, "registry.example.com")) }),
    );
    expect(rotated.specHash).not.toBe(r.specHash);
    const none = renderProject(input([service("web")], { secrets: secretsOf(other) }));
    expect(none.specHash).toBe(projectHash(none.project, none.composeServices));
  });

  it("are sorted by id and listed for a tenant's own file too", () => {
    const reg2 = secret("a-reg", { username: 1n, password: 1n }, "127.0.0.1:5000");
    const r = renderProject(input([], { tenant: ownTenant(), secrets: secretsOf(reg, secret("db", { password: 1n, cert: 1n }), reg2) }));
    expect(r.registrySecretIds).toEqual(["a-reg", "reg"]);
    expect(r.secretUses.map((u) => `${u.secretId}/${u.key}`)).toEqual([
      "a-reg/password",
      "a-reg/username",
      "db/cert",
      "db/password",
      "reg/password",
      "reg/username",
    ]);
  });
});

describe("desiredForTenant with secret references", () => {
  const world = (w: Partial<TenantWorld>): TenantWorld => ({
    tenant: tenant(),
    services: [],
    networks: new Map(),
    volumes: new Map(),
    limits: new Map(),
    nodes: [node("n1", { env: "prod" })],
    ...w,
  });
  const usesDb = service("web", { secretEnv: { DB_PASSWORD: { secretId: "db", key: "password" } } });
  const plain = service("plain");

  it("places a service whose secret and value exist, with the uses in its node's project", () => {
    const d = desiredForTenant(world({ services: [usesDb], secrets: secretsOf(secret("db", { password: 2n })) }));
    expect(d.blocker).toBeUndefined();
    expect(d.services.get("web")).toEqual({ nodeIds: ["n1"] });
    expect(d.targets.get("n1")!.secretUses.map((u) => `${u.secretId}/${u.key}@${u.version}`)).toEqual(["db/password@2"]);
  });

  it("gives REFERENCE_MISSING naming the field when a service's secret is missing, and places the others", () => {
    const d = desiredForTenant(world({ services: [usesDb, plain], secrets: new Map() }));
    const web = d.services.get("web")!;
    expect(web.nodeIds).toEqual([]);
    expect(web.blocker?.status).toBe(ConvergenceStatus.REFERENCE_MISSING);
    expect(web.blocker?.message).toMatch(/desired_state\.service\.secret_env\.DB_PASSWORD names secret db/);
    expect(d.services.get("plain")).toEqual({ nodeIds: ["n1"] });
    expect(d.targets.get("n1")!.serviceIds).toEqual(["plain"]);
    expect(d.targets.get("n1")!.secretUses).toEqual([]);
  });

  it("gives REFERENCE_MISSING when the secret exists but no longer holds the value; the tenant is blocked when nothing else runs", () => {
    const d = desiredForTenant(world({ services: [usesDb], secrets: secretsOf(secret("db", { other: 1n })) }));
    expect(d.targets.size).toBe(0);
    expect(d.services.get("web")!.blocker?.status).toBe(ConvergenceStatus.REFERENCE_MISSING);
    expect(d.services.get("web")!.blocker?.message).toMatch(/value password of secret db/);
    expect(d.blocker?.status).toBe(ConvergenceStatus.REFERENCE_MISSING);
  });

  it("a service's file reference counts too", () => {
    const files = service("files", { secretFiles: { "server.crt": { secretId: "db", key: "cert" } } });
    const d = desiredForTenant(world({ services: [files], secrets: secretsOf(secret("db", { password: 1n })) }));
    expect(d.services.get("files")!.blocker?.status).toBe(ConvergenceStatus.REFERENCE_MISSING);
    expect(d.services.get("files")!.blocker?.message).toMatch(/secret_files\.server\.crt/);
  });

  it("a tenant's own file with a missing secret or value issues nothing anywhere: every service is blocked", () => {
    const app = service("app", { composeService: "app" });
    for (const secrets of [new Map<string, Resource>(), secretsOf(secret("db", { password: 1n }))]) {
      const d = desiredForTenant(world({ tenant: ownTenant(), services: [app], secrets }));
      expect(d.targets.size).toBe(0);
      expect(d.blocker?.status).toBe(ConvergenceStatus.REFERENCE_MISSING);
      expect(d.blocker?.message).toMatch(/desired_state\.tenant\.compose\.secret_(env|files)\./);
      expect(d.services.get("app")).toEqual({ nodeIds: [], blocker: d.blocker });
    }
    const ok = desiredForTenant(
      world({ tenant: ownTenant(), services: [app], secrets: secretsOf(secret("db", { password: 1n, cert: 1n })) }),
    );
    expect(ok.blocker).toBeUndefined();
    expect([...ok.targets.keys()]).toEqual(["n1"]);
  });
});
