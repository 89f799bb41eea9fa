// The registry client (controller/promotion/registry-client.ts) against real parts: Debian's
// docker-registry with an htpasswd login on loopback, an image pushed by a real engine under five
// tags (Basic auth, paging, digests, refusals); and a loopback stand-in registry with its own
// token endpoint (test/helpers/token-registry.ts) for the Bearer flow, its cache and its limits.
import { createHash } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { RegistryClient } from "../controller/promotion/registry-client.js";
import { isRegistryError, type RegistryError } from "../controller/promotion/registry-error.js";
import { RUN_ID, waitFor } from "./helpers/processes.js";
import { registryInstalled, startRegistry, type TestRegistry } from "./helpers/registry.js";
import { startTokenRegistry, type TokenRegistry } from "./helpers/token-registry.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const haveRegistry = await registryInstalled();
if (!dockerHost || !haveRegistry)
  console.warn(
    "!!! registry-client.test.ts (Debian registry part) SKIPPED: no Docker engine or no docker-registry/htpasswd (scripts/docker-engine.sh install)",
  );

const PASSWORD = `sntl-watch-pass-${RUN_ID}`;
const TAGS = ["1.0.0", "1.1.0", "1.2.0-rc.1", "v1.3.0", "latest"];

/** The RegistryError a promise rejects with (fails the test if it resolves or throws another). */
async function registryError(p: Promise<unknown>): Promise<RegistryError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!isRegistryError(e)) throw new Error(`expected a RegistryError, got ${e === undefined ? "success" : String(e)}`);
  return e;
}

describe.skipIf(!dockerHost || !haveRegistry)("registry client against Debian's docker-registry (htpasswd, Basic)", () => {
  let registry: TestRegistry;
  let configDir: string;
  let pushedDigest = "";
  const repo = `watch/web-${RUN_ID}`;
  const clients: RegistryClient[] = [];
  const client = (options: ConstructorParameters<typeof RegistryClient>[0] = {}) => {
    const c = new RegistryClient(options);
    clients.push(c);
    return c;
  };
  const login = () => ({ username: "watcher", password: PASSWORD });

  beforeAll(async () => {
    registry = await startRegistry(dockerHost!, "watcher", PASSWORD);
    configDir = await mkdtemp(join(tmpdir(), "skipper-registry-client-"));
    const env = { DOCKER_HOST: dockerHost!, DOCKER_CONFIG: configDir };
    await execa("docker", ["login", "--username", "watcher", "--password-stdin", registry.host], { env, input: PASSWORD });
    for (const tag of TAGS) {
      const ref = `${registry.host}/${repo}:${tag}`;
      await execa("docker", ["tag", "skipper-busybox:local", ref], { env });
      const out = (await execa("docker", ["push", ref], { env })).stdout;
      const digest = /digest: (sha256:[0-9a-f]{64})/.exec(out)?.[1];
      if (!digest) throw new Error(`docker push printed no digest: ${out}`);
      if (pushedDigest && digest !== pushedDigest) throw new Error(`one image pushed under two digests: ${pushedDigest}, ${digest}`);
      pushedDigest = digest;
      await execa("docker", ["rmi", ref], { env });
    }
    await execa("docker", ["logout", registry.host], { env });
  }, 180_000);

  afterAll(async () => {
    for (const c of clients) c.close();
    await registry?.stop();
    if (configDir) await rm(configDir, { recursive: true, force: true });
  });

  it("lists every tag, logging in with Basic (asked in pages of two: this registry answers all in one)", async () => {
    // distribution 2.8 (Debian's) pages only the catalog: its tag list ignores ?n= and sends no
    // Link, so paging itself is proven against the stand-in below.
    const tags = await client({ pageSize: 2 }).listTags(`${registry.host}/${repo}`, { credential: login() });
    expect([...tags].sort()).toEqual([...TAGS].sort());
  });

  it("answers each tag's digest as docker push printed it", async () => {
    const c = client();
    for (const tag of TAGS) expect(await c.digestOf(`${registry.host}/${repo}`, tag, { credential: login() })).toBe(pushedDigest);
  });

  it("a wrong password fails UNAUTHORIZED naming the registry and the repository, never the password", async () => {
    const wrong = `${PASSWORD}-wrong`;
    for (const call of [
      () => client().listTags(`${registry.host}/${repo}`, { credential: { username: "watcher", password: wrong } }),
      () => client().digestOf(`${registry.host}/${repo}`, "1.0.0", { credential: { username: "watcher", password: wrong } }),
    ]) {
      const e = await registryError(call());
      expect(e.code).toBe("UNAUTHORIZED");
      expect(e.status).toBe(401);
      expect(e.message).toContain(`registry ${registry.host}`);
      expect(e.message).toContain(`repository ${repo}`);
      expect(e.message).toContain("refused the login given");
      const everything = `${e.message} ${e.stack} ${JSON.stringify(e)} ${String(e.cause ?? "")}`;
      expect(everything).not.toContain(wrong);
      expect(everything).not.toContain(Buffer.from(`watcher:${wrong}`).toString("base64"));
    }
  });

  it("without a login it fails UNAUTHORIZED: the registry needs one", async () => {
    const e = await registryError(client().listTags(`${registry.host}/${repo}`));
    expect(e.code).toBe("UNAUTHORIZED");
    expect(e.message).toContain("needs a login and none is given");
  });

  it("an absent repository or tag is NOT_FOUND", async () => {
    const c = client();
    const repoGone = await registryError(c.listTags(`${registry.host}/watch/absent-${RUN_ID}`, { credential: login() }));
    expect(repoGone.code).toBe("NOT_FOUND");
    expect(repoGone.status).toBe(404);
    expect(repoGone.message).toContain(`repository watch/absent-${RUN_ID}: listing its tags: not found: NAME_UNKNOWN`);
    const tagGone = await registryError(c.digestOf(`${registry.host}/${repo}`, "9.9.9", { credential: login() }));
    expect(tagGone.code).toBe("NOT_FOUND");
    expect(tagGone.message).toContain("reading tag 9.9.9");
  });
});

describe("registry client against a loopback registry with a token endpoint (Bearer)", () => {
  const USER = "robot";
  const SECRET = `sntl-token-pass-${RUN_ID}`;
  let reg: TokenRegistry;
  let clock = Date.now();
  const clients: RegistryClient[] = [];
  const client = (options: ConstructorParameters<typeof RegistryClient>[0] = {}) => {
    const c = new RegistryClient({ now: () => clock, ...options });
    clients.push(c);
    return c;
  };
  const repo = () => `${reg.host}/${reg.path}`;
  const login = { credential: { username: USER, password: SECRET } };
  const manifest = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json", run: RUN_ID }));
  const manifestDigest = `sha256:${createHash("sha256").update(manifest).digest("hex")}`;

  beforeAll(async () => {
    reg = await startTokenRegistry(USER, SECRET);
  });
  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
    reg.tags = [];
    reg.manifests.clear();
    reg.withDigestHeader = true;
    reg.linkStyle = "relative";
    reg.expiresIn = 60;
  });
  afterAll(async () => {
    await reg?.close();
  });

  it("asks the realm for a token once, with the login, and sends it at once on later calls", async () => {
    reg.tags = ["a", "b", "c", "d", "e"];
    reg.manifests.set("a", manifest);
    const before = { tokens: reg.tokenRequests, challenges: reg.challenges, pages: reg.tagPages };
    const c = client({ pageSize: 2 });
    expect(await c.listTags(repo(), login)).toEqual(["a", "b", "c", "d", "e"]);
    expect(reg.tagPages - before.pages).toBe(3);
    expect(await c.digestOf(repo(), "a", login)).toBe(manifestDigest);
    expect(await c.listTags(repo(), login)).toHaveLength(5);
    // One anonymous request was challenged; everything after it carried the one cached token.
    expect(reg.tokenRequests - before.tokens).toBe(1);
    expect(reg.challenges - before.challenges).toBe(1);
  });

  it("asks again once the token's expires_in has passed", async () => {
    reg.tags = ["a"];
    reg.expiresIn = 30;
    const c = client();
    const before = reg.tokenRequests;
    await c.listTags(repo(), login);
    clock += 29_000;
    await c.listTags(repo(), login);
    expect(reg.tokenRequests - before).toBe(1);
    clock += 2_000;
    await c.listTags(repo(), login);
    expect(reg.tokenRequests - before).toBe(2);
  });

  it("a cached token the registry refuses is replaced once by a new one", async () => {
    reg.tags = ["a"];
    const c = client();
    await c.listTags(repo(), login);
    const before = reg.tokenRequests;
    reg.revokeTokens();
    expect(await c.listTags(repo(), login)).toEqual(["a"]);
    expect(reg.tokenRequests - before).toBe(1);
  });

  it("another login never gets the first one's cached token", async () => {
    reg.tags = ["a"];
    const c = client();
    await c.listTags(repo(), login);
    const e = await registryError(c.listTags(repo(), { credential: { username: USER, password: "other" } }));
    expect(e.code).toBe("UNAUTHORIZED");
    const anonymous = await registryError(c.listTags(repo()));
    expect(anonymous.code).toBe("UNAUTHORIZED");
    expect(anonymous.message).toContain("refused an anonymous token");
  });

  it("a wrong password at the token endpoint fails UNAUTHORIZED without the password or any token", async () => {
    reg.tags = ["a"];
    const wrong = `${SECRET}-wrong`;
    const e = await registryError(client().listTags(repo(), { credential: { username: USER, password: wrong } }));
    expect(e.code).toBe("UNAUTHORIZED");
    expect(e.message).toBe(`registry ${reg.host}, repository x/y: its token endpoint ${reg.host} refused the login given (HTTP 401)`);
    const everything = `${e.message} ${e.stack} ${JSON.stringify(e)}`;
    expect(everything).not.toContain(wrong);
    for (const token of reg.issued) expect(everything).not.toContain(token);
  });

  it("without Docker-Content-Digest the digest is the sha256 of the manifest a GET answers", async () => {
    reg.manifests.set("nohdr", manifest);
    reg.withDigestHeader = false;
    expect(await client().digestOf(repo(), "nohdr", login)).toBe(manifestDigest);
  });

  it("follows absolute next links on the same origin, refuses one on another", async () => {
    reg.tags = ["a", "b", "c"];
    reg.linkStyle = "absolute";
    expect(await client({ pageSize: 1 }).listTags(repo(), login)).toEqual(["a", "b", "c"]);
    reg.linkStyle = "foreign";
    const e = await registryError(client({ pageSize: 1 }).listTags(repo(), login));
    expect(e.code).toBe("BAD_RESPONSE");
    expect(e.message).toContain("another origin (http://127.0.0.2:");
  });

  it("more pages than allowed fail TOO_LARGE, saying so", async () => {
    reg.tags = ["a", "b", "c", "d", "e"];
    const e = await registryError(client({ pageSize: 2, maxPages: 2 }).listTags(repo(), login));
    expect(e.code).toBe("TOO_LARGE");
    expect(e.message).toContain("more than 2 pages of 2");
  });

  it("more tags than allowed, or a body beyond the limit, fail TOO_LARGE", async () => {
    reg.tags = Array.from({ length: 30 }, (_, i) => `t${String(i).padStart(2, "0")}`);
    const many = await registryError(client({ pageSize: 10, maxTags: 25 }).listTags(repo(), login));
    expect(many.code).toBe("TOO_LARGE");
    expect(many.message).toContain("more than 25 tags");
    const big = await registryError(client({ maxBodyBytes: 100 }).listTags(repo(), login));
    expect(big.code).toBe("TOO_LARGE");
    expect(big.message).toContain("beyond the limit of 100 bytes");
  });

  it("a request without an answer ends at its deadline: TIMEOUT", async () => {
    const e = await registryError(client({ timeoutMs: 300 }).digestOf(repo(), "hang", login));
    expect(e.code).toBe("TIMEOUT");
    expect(e.message).toContain("no answer within 300 ms");
  });

  it("an absent tag is NOT_FOUND", async () => {
    const e = await registryError(client().digestOf(repo(), "nope", login));
    expect(e.code).toBe("NOT_FOUND");
    expect(e.message).toBe(`registry ${reg.host}, repository x/y: reading tag nope: not found (HTTP 404)`);
  });

  it("a token realm on https is trusted through the extra CA given, and refused without it", async () => {
    const tls = await startTokenRegistry(USER, SECRET, { tlsRealm: true });
    try {
      tls.tags = ["a"];
      const repository = `${tls.host}/${tls.path}`;
      const untrusted = await registryError(client().listTags(repository, login));
      expect(untrusted.code).toBe("UNREACHABLE");
      expect(untrusted.message).toContain(`registry ${tls.host}`);
      expect(tls.tokenRequests).toBe(0);
      expect(await client({ caPem: tls.caPem }).listTags(repository, login)).toEqual(["a"]);
      expect(tls.tokenRequests).toBe(1);
    } finally {
      for (const c of clients.splice(0)) c.close();
      await tls.close();
    }
  });

  it("a caller's abort ends a request at once with the caller's reason", async () => {
    const abort = new AbortController();
    const pending = client().digestOf(repo(), "hang", { ...login, signal: abort.signal });
    await waitFor("the request to reach the registry", async () => (reg.hangs > 0 ? true : undefined), 10_000, 20);
    abort.abort(new Error("the controller stops"));
    await expect(pending).rejects.toThrow("the controller stops");
  });

  it("nothing listening is UNREACHABLE; a repository with a tag is INVALID_REPOSITORY", async () => {
    const closed = await startTokenRegistry(USER, SECRET);
    await closed.close();
    const e = await registryError(client().listTags(`${closed.host}/x/y`));
    expect(e.code).toBe("UNREACHABLE");
    expect(e.message).toContain(`registry ${closed.host}`);
    const bad = await registryError(client().listTags(`${reg.host}/x/y:1.0`));
    expect(bad.code).toBe("INVALID_REPOSITORY");
  });
});
