// Git sync end to end: the built controller as a process (--allow-git-file-urls), a bare repository
// in a temp directory and a work clone that commits manifests to it, and a git_source created
// through the API. The first sync applies every document; a commit is applied (by SyncGitSource,
// and by the loop on its own at the interval); an edit through the API is drift, listed and kept;
// a removed document stays orphaned until prune is on, then is deleted; a bad document stops the
// sync naming its file and document, with synced_commit where it was. Each step's events are read
// back from the controller. The same steps run on the file store and on PostgreSQL.
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { clone, create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ActorKind } from "../gen/skipper/v1/access_pb.js";
import { type GitSourceSpec, type GitSourceStatus, GitSourceSpecSchema } from "../gen/skipper/v1/delivery_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { GitSourceService } from "../gen/skipper/v1/git_source_service_pb.js";
import { type Resource, ResourceSchema, ResourceSpecSchema } from "../gen/skipper/v1/resource_pb.js";
import { createHmac } from "node:crypto";
import { SecretKeyRefSchema } from "../gen/skipper/v1/secret_pb.js";
import { rawRequest } from "./helpers/https.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { run } from "../cli/program.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import { type ControllerProcess, E2E_ADMIN_TOKEN, RUN_ID, startControllerProcess, waitFor } from "./helpers/processes.js";

const ENV = { GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null", HOME: tmpdir(), PATH: process.env.PATH ?? "" };
const SOURCE = "platform";
let root: string;
let origin: string;
let work: string;
let cp: ControllerProcess;

const git = async (cwd: string, ...args: string[]) =>
  (await execa("git", ["-c", "user.name=test", "-c", "user.email=test@example.com", ...args], { cwd, env: ENV, extendEnv: false })).stdout;

/** Writes (or with null, removes) files in the work clone, commits and pushes them; returns the commit. */
async function commit(files: Record<string, string | null>): Promise<string> {
  for (const [path, text] of Object.entries(files)) {
    const at = join(work, path);
    if (text === null) await rm(at);
    else {
      await mkdir(dirname(at), { recursive: true });
      await writeFile(at, text);
    }
  }
  await git(work, "add", "-A");
  await git(work, "commit", "-q", "-m", `change ${Object.keys(files).join(", ")}`);
  await git(work, "push", "-q", "origin", "HEAD:refs/heads/main");
  return (await git(work, "rev-parse", "HEAD")).trim();
}

const TENANTS = `resource_type: tenant
id: shop
desired_state: {display_name: Shop}
---
resource_type: tenant
id: shop-prod
desired_state: {display_name: Shop prod}
`;
const SHOP = `resource_type: artifact
id: web
desired_state: {tenant_id: shop, image: {repository: 127.0.0.1:5000/shop/web}}
`;
const SERVICE = `resource_type: service
id: web
desired_state: {tenant_id: shop, kind: compose_service, image: "busybox:stable", compose_service: web}
`;
const delivery = (bake: string) => `resource_type: delivery
id: shop
desired_state: {display_name: Shop}
---
resource_type: environment
id: test
desired_state: {delivery_id: shop, tenant_ids: [shop], artifact_ids: [web]}
---
resource_type: environment
id: prod
desired_state:
  delivery_id: shop
  tenant_ids: [shop-prod]
  artifact_ids: [web]
  depends_on: [{environment_id: test, bake_time: ${bake}}]
`;

const resources = () => cp.admin(ResourceService);
const sync = async (reapply = false) => {
  const res = await cp.admin(GitSourceService).syncGitSource({ id: SOURCE, reapply });
  return { source: res.gitSource!, status: statusOf(res.gitSource) };
};
function statusOf(r: Resource | undefined): GitSourceStatus {
  if (r?.currentState?.kind.case !== "gitSource") throw new Error(`no status on ${r?.id}`);
  return r.currentState.kind.value;
}
const repositoryOf = (r: Resource) =>
  r.desiredState?.kind.case === "artifact" && r.desiredState.kind.value.source.case === "image"
    ? r.desiredState.kind.value.source.value.repository
    : "";
const stored = async (type: string, id: string) => (await resources().getResource({ resourceType: type, id })).resource!;
const listed = (s: GitSourceStatus) =>
  s.resources.map((r) => `${r.resourceType}/${r.id}${r.drift ? " drift" : ""}${r.orphaned ? " orphaned" : ""}`);
async function sourceEvents(): Promise<Array<{ type: string; data: Record<string, unknown> }>> {
  const res = await cp.admin(EventService).listEvents({ resourceId: SOURCE, pageSize: 500 });
  return res.events.filter((e) => e.resourceType === "git_source").map((e) => ({ type: e.type, data: e.data as Record<string, unknown> }));
}

const PG = pgUrl();

// The source's spec with its webhook signed by value `push` of the fleet's secret git-hooks.
function withHook(spec: GitSourceSpec): GitSourceSpec {
  const out = clone(GitSourceSpecSchema, spec);
  out.webhookSecret = create(SecretKeyRefSchema, { secretId: "git-hooks", key: "push" });
  return out;
}

for (const backend of ["file", "postgres"] as const)
  describe.skipIf(backend === "postgres" && !PG)(`git sync against a real repository and controller (${backend} store)`, () => {
    beforeAll(async () => {
      root = await mkdtemp(join(tmpdir(), "skipper-git-sync-"));
      origin = join(root, "origin.git");
      work = join(root, "work");
      await git(root, "init", "-q", "--bare", "--initial-branch=main", origin);
      await git(root, "clone", "-q", origin, work);
      const store = backend === "postgres" ? ["--store", await freshDatabase(`git_sync_${RUN_ID}`)] : [];
      cp = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--allow-git-file-urls", ...store] });
    }, 60_000);

    afterAll(async () => {
      await cp?.stop();
      if (root) await rm(root, { recursive: true, force: true });
    });

    let first: string;

    it("the first sync applies every document, annotated with its source and document", async () => {
      first = await commit({
        "deploy/tenants.yaml": TENANTS,
        "deploy/shop.yaml": SHOP,
        "deploy/service.yaml": SERVICE,
        "deploy/delivery.yaml": delivery("30s"),
        "README.md": "not a manifest\n",
      });
      await resources().createResource({
        resourceType: "git_source",
        resource: {
          id: SOURCE,
          desiredState: create(ResourceSpecSchema, {
            kind: {
              case: "gitSource",
              value: create(GitSourceSpecSchema, { url: `file://${origin}`, path: "deploy", interval: { seconds: 10n } }),
            },
          }),
        },
      });
      const { status } = await sync();
      expect(status.syncError, status.syncError).toBe("");
      expect(status.syncedCommit).toBe(first);
      expect(listed(status).sort()).toEqual(
        ["artifact/web", "delivery/shop", "environment/prod", "environment/test", "service/web", "tenant/shop", "tenant/shop-prod"].sort(),
      );
      const prod = await stored("environment", "prod");
      expect(prod.metadata?.annotations).toMatchObject({
        "skipper.dev/git-source": SOURCE,
        "skipper.dev/git-path": "deploy/delivery.yaml#3",
      });
      expect((await stored("tenant", "shop-prod")).metadata?.annotations["skipper.dev/git-path"]).toBe("deploy/tenants.yaml#2");
      // Written as the controller, each with its own resource_created event.
      const created = (await cp.admin(EventService).listEvents({ resourceId: "shop-prod", type: "resource_created" })).events;
      expect(created.map((e) => [e.resourceType, ActorKind[e.actor?.kind ?? 0]])).toEqual([["tenant", "CONTROLLER"]]);
      const applied = (await sourceEvents()).filter((e) => e.type === "git_sync_applied");
      expect(applied).toHaveLength(1);
      expect(applied[0]!.data).toMatchObject({ commit: first, created: 7, updated: 0 });
    });

    it("a commit changing an environment's bake time is applied by SyncGitSource", async () => {
      const next = await commit({ "deploy/delivery.yaml": delivery("60s") });
      const { status } = await sync();
      expect(status.syncedCommit).toBe(next);
      expect(status.syncError, status.syncError).toBe("");
      const prod = await stored("environment", "prod");
      const spec = prod.desiredState?.kind.case === "environment" ? prod.desiredState.kind.value : undefined;
      expect(spec?.dependsOn[0]?.bakeTime?.seconds).toBe(60n);
      const applied = (await sourceEvents()).filter((e) => e.type === "git_sync_applied").at(-1);
      expect(applied?.data).toMatchObject({ commit: next, created: 0, updated: 1 });
    });

    it("the loop applies a commit at the interval, without a call", async () => {
      const next = await commit({ "deploy/tenants.yaml": TENANTS.replace("Shop prod", "Shop production") });
      const tenant = await waitFor(
        "the loop to sync the new commit",
        async () => {
          const source = await stored("git_source", SOURCE);
          return statusOf(source).syncedCommit === next ? stored("tenant", "shop-prod") : undefined;
        },
        40_000,
      );
      expect(tenant.desiredState?.kind.case === "tenant" && tenant.desiredState.kind.value.displayName).toBe("Shop production");
    }, 60_000);

    it("a forge's push webhook signed with the source's secret syncs at once; a wrong signature is refused and syncs nothing", async () => {
      const key = `hook-s3cret-${RUN_ID}`;
      await resources().createResource({
        resourceType: "secret",
        resource: create(ResourceSchema, {
          id: "git-hooks",
          resourceType: "secret",
          desiredState: { kind: { case: "secret", value: { values: { push: key } } } },
        }),
      });
      const source = await stored("git_source", SOURCE);
      if (source.desiredState?.kind.case !== "gitSource") throw new Error("no git source spec");
      await resources().updateResource({
        resourceType: "git_source",
        id: SOURCE,
        desiredState: create(ResourceSpecSchema, {
          kind: {
            case: "gitSource",
            value: withHook(source.desiredState.kind.value),
          },
        }),
      });
      const before = statusOf(await stored("git_source", SOURCE)).syncedCommit;
      const next = await commit({ "deploy/tenants.yaml": TENANTS.replace("Shop production", "Shop (prod)") });
      const body = JSON.stringify({ ref: "refs/heads/main", after: next });
      const hook = (signature: string, requestId: string) =>
        rawRequest(
          cp,
          "POST",
          `/v1/git-sources/${SOURCE}/webhook`,
          { "content-type": "application/json", "x-hub-signature-256": signature, "x-request-id": requestId },
          body,
        );
      const wrong = await hook(`sha256=${createHmac("sha256", "not-the-key").update(body).digest("hex")}`, `bad-hook-${RUN_ID}`);
      expect([wrong.status, JSON.parse(wrong.body).error.code]).toEqual([401, "UNAUTHORIZED"]);
      const unknown = await rawRequest(cp, "POST", "/v1/git-sources/nope/webhook", { "x-hub-signature-256": "sha256=00" }, body);
      expect(unknown.status).toBe(401);
      expect(statusOf(await stored("git_source", SOURCE)).syncedCommit).toBe(before);
      const signed = await hook(`sha256=${createHmac("sha256", key).update(body).digest("hex")}`, `hook-${RUN_ID}`);
      expect([signed.status, JSON.parse(signed.body).data]).toEqual([202, { accepted: true, git_source: SOURCE }]);
      // The sync the push started (its events carry the push's request id), not the loop's.
      const applied = await waitFor("the webhook's sync", async () => {
        const res = await cp.admin(EventService).listEvents({ resourceId: SOURCE, type: "git_sync_applied", pageSize: 500 });
        return res.events.find((e) => e.requestId === `hook-${RUN_ID}`);
      });
      expect((applied.data as Record<string, unknown>).commit).toBe(next);
      const bad = await cp.admin(EventService).listEvents({ resourceId: SOURCE, pageSize: 500 });
      expect(bad.events.filter((e) => e.requestId === `bad-hook-${RUN_ID}`)).toEqual([]);
    });

    it("an edit through the API is drift: listed, told once, kept; --reapply writes the document again", async () => {
      const shop = await stored("tenant", "shop");
      await resources().updateResource({
        resourceType: "tenant",
        id: "shop",
        desiredState: create(ResourceSpecSchema, { kind: { case: "tenant", value: { displayName: "Edited by hand" } } }),
        updateMask: { paths: ["desired_state.tenant.display_name"] },
      });
      const { status } = await sync();
      expect(listed(status)).toContain("tenant/shop drift");
      expect(status.syncError, status.syncError).toBe("");
      const kept = await stored("tenant", "shop");
      expect(kept.desiredState?.kind.case === "tenant" && kept.desiredState.kind.value.displayName).toBe("Edited by hand");
      await sync();
      const drifts = (await sourceEvents()).filter((e) => e.type === "git_sync_drift_detected");
      expect(drifts).toHaveLength(1);
      expect(drifts[0]!.data.resources).toEqual(["tenant/shop"]);
      const again = await sync(true);
      expect(listed(again.status)).not.toContain("tenant/shop drift");
      const back = await stored("tenant", "shop");
      expect(back.desiredState?.kind.case === "tenant" && back.desiredState.kind.value.displayName).toBe("Shop");
      expect(back.metadata?.resourceVersion).not.toBe(shop.metadata?.resourceVersion);
    });

    it("a removed document stays orphaned with prune off, and is deleted once prune is on", async () => {
      await commit({ "deploy/service.yaml": null });
      const { status } = await sync();
      expect(listed(status)).toContain("service/web orphaned");
      expect((await stored("service", "web")).deletion).toBeUndefined();
      expect((await sourceEvents()).filter((e) => e.type === "git_sync_pruned")).toHaveLength(0);
      await resources().updateResource({
        resourceType: "git_source",
        id: SOURCE,
        desiredState: create(ResourceSpecSchema, {
          kind: { case: "gitSource", value: create(GitSourceSpecSchema, { prune: true }) },
        }),
        updateMask: { paths: ["desired_state.git_source.prune"] },
      });
      const pruned = await sync();
      expect(pruned.status.syncError, pruned.status.syncError).toBe("");
      expect(listed(pruned.status).filter((r) => r.startsWith("service/"))).toEqual([]);
      const gone = await resources()
        .getResource({ resourceType: "service", id: "web" })
        .catch((e: unknown) => e);
      expect(gone instanceof ConnectError && gone.code).toBe(Code.NotFound);
      const events = (await sourceEvents()).filter((e) => e.type === "git_sync_pruned");
      expect(events.map((e) => e.data.resources)).toEqual([["service/web"]]);
    });

    it("a bad document stops the sync naming file#n; synced_commit stays and nothing is written", async () => {
      const before = (await sync()).status.syncedCommit;
      const bad = await commit({
        "deploy/shop.yaml": SHOP.replace("127.0.0.1:5000/shop/web", "127.0.0.1:5000/shop/web2"),
        "deploy/zz-bad.yaml":
          "resource_type: tenant\nid: extra\ndesired_state: {display_name: Extra}\n---\nresource_type: no_such_kind\nid: x\n",
      });
      const { status } = await sync();
      expect(status.syncError).toMatch(/^deploy\/zz-bad\.yaml#2: /);
      expect(status.syncedCommit).toBe(before);
      expect(status.fetchedCommit).toBe(bad);
      const web = await stored("artifact", "web");
      expect(repositoryOf(web)).toBe("127.0.0.1:5000/shop/web");
      const failed = (await sourceEvents()).filter((e) => e.type === "git_sync_failed");
      expect(failed).toHaveLength(1);
      expect(failed[0]!.data).toMatchObject({ commit: bad, synced_commit: before });
      // The same failure again is not told again.
      await sync();
      expect((await sourceEvents()).filter((e) => e.type === "git_sync_failed")).toHaveLength(1);
    });

    it("a refused write names its document; what was written before it stays", async () => {
      const fixed = await commit({
        "deploy/zz-bad.yaml": `resource_type: environment\nid: staging\ndesired_state: {delivery_id: nowhere, tenant_ids: [shop], artifact_ids: [web]}\n`,
      });
      const { status } = await sync();
      expect(status.syncError).toMatch(/^deploy\/zz-bad\.yaml: desired_state\.environment/);
      expect(status.fetchedCommit).toBe(fixed);
      expect(status.syncedCommit).not.toBe(fixed);
      // The artifact's document (written before the environment, API write order) went through.
      const web = await stored("artifact", "web");
      expect(repositoryOf(web)).toBe("127.0.0.1:5000/shop/web2");
    });

    it("skipper git sync prints the commits and exits 1 naming the document while the sync stops there", async () => {
      const out: string[] = [];
      const err: string[] = [];
      const io = {
        out: (t: string) => out.push(t),
        err: (t: string) => err.push(t),
        color: false,
        env: { SKIPPER_SERVER: cp.url, SKIPPER_CA_FILE: cp.caFile, SKIPPER_TOKEN: E2E_ADMIN_TOKEN, XDG_CONFIG_HOME: root },
        readStdin: async () => "",
      };
      expect(await run(["git", "sync", SOURCE], io)).toBe(1);
      expect(out.join("\n")).toMatch(/^git_source\/platform: synced commit [0-9a-f]{40}, fetched [0-9a-f]{40}/);
      expect(err.join("\n")).toContain("the sync stopped: deploy/zz-bad.yaml: desired_state.environment");
      // A node is not Git's to write (nodes are an admin's); the document is named.
      await commit({ "deploy/zz-bad.yaml": "resource_type: node\nid: sneaky\ndesired_state: {display_name: Sneaky}\n" });
      out.length = 0;
      err.length = 0;
      expect(await run(["git", "sync", SOURCE, "--reapply"], io)).toBe(1);
      expect(err.join("\n")).toContain("the sync stopped: deploy/zz-bad.yaml: nodes are administered with the admin permission");
      await commit({ "deploy/zz-bad.yaml": null });
      expect(await run(["git", "sync", SOURCE], io), err.join("\n")).toBe(0);
    });

    it("syncing a source that does not exist is RESOURCE_NOT_FOUND", async () => {
      const e = await cp
        .admin(GitSourceService)
        .syncGitSource({ id: "nowhere" })
        .catch((x: unknown) => x);
      expect(e instanceof ConnectError && e.code).toBe(Code.NotFound);
    });

    it("a deleted source's mirror is removed from the controller's disk; what it wrote stays", async () => {
      const mirror = join(cp.dataDir, "git", `${SOURCE}.git`);
      expect(existsSync(mirror)).toBe(true);
      await resources().deleteResource({ resourceType: "git_source", id: SOURCE });
      await waitFor("the loop to remove the mirror", async () => (existsSync(mirror) ? undefined : true), 30_000);
      expect((await stored("tenant", "shop")).metadata?.annotations["skipper.dev/git-source"]).toBe(SOURCE);
    }, 40_000);
  });
