// The Git sync's plan as fixtures: the tree at a commit, what changed since the last commit
// applied whole and what the store holds in; the exact writes, drift, orphans, prunes and next
// status out.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { type GitSourceStatus, GitSourceSpecSchema, GitSourceStatusSchema } from "../../gen/skipper/v1/delivery_pb.js";
import { type Resource, ResourceSchema } from "../../gen/skipper/v1/resource_pb.js";
import {
  changedFiles,
  GIT_PATH_ANNOTATION,
  GIT_SOURCE_ANNOTATION,
  type GitSyncInput,
  parseSourceDocuments,
  planGitSync,
  type SourceFile,
  statusAfterFailure,
} from "./git-sync-plan.js";

const NOW = new Date("2026-11-29T06:00:00Z");
const OLD = "a".repeat(40);
const NEW = "b".repeat(40);

const TENANT = "resource_type: tenant\nid: shop\ndesired_state: {display_name: Shop}\n";
const SERVICE = "resource_type: service\nid: web\ndesired_state: {tenant_id: shop, image: 'nginx:1'}\n";
const NET = "resource_type: network\nid: back\ndesired_state: {tenant_id: shop}\n";
const FILES: SourceFile[] = [
  { path: "apps/shop.yaml", text: `${SERVICE}---\n${TENANT}` },
  { path: "apps/net.yaml", text: NET },
];

/** What the store holds after `text` was applied by source `source` (annotations as a sync writes them). */
function storedOf(text: string, path: string, source = "src", extra: Record<string, string> = {}): Resource {
  const [m] = parseSourceDocuments([{ path: "x.yaml", text }]).documents;
  return create(ResourceSchema, {
    id: m!.id,
    resourceType: m!.type,
    desiredState: m!.resource.desiredState,
    metadata: { resourceVersion: "3", annotations: { ...extra, [GIT_SOURCE_ANNOTATION]: source, [GIT_PATH_ANNOTATION]: path } },
  });
}

function input(over: Partial<GitSyncInput> & { files?: SourceFile[]; held?: Resource[] } = {}): GitSyncInput {
  const held = over.held ?? [];
  return {
    sourceId: "src",
    spec: create(GitSourceSpecSchema, { url: "https://git.example/shop.git", branch: "main", path: "apps", interval: { seconds: 30n } }),
    status: undefined,
    commit: NEW,
    documents: parseSourceDocuments(over.files ?? FILES),
    changed: "all",
    owned: held.filter((r) => r.metadata?.annotations[GIT_SOURCE_ANNOTATION] === "src"),
    stored: new Map(held.map((r) => [`${r.resourceType}/${r.id}`, r])),
    now: NOW,
    ...over,
  };
}

const STATUS_BEFORE: GitSourceStatus = create(GitSourceStatusSchema, {
  syncedCommit: OLD,
  syncedAt: timestampFromDate(new Date("2026-11-29T05:00:00Z")),
  resources: [{ resourceType: "tenant", id: "shop", path: "apps/shop.yaml#2" }],
});

const HELD = [storedOf(TENANT, "apps/shop.yaml#2"), storedOf(SERVICE, "apps/shop.yaml#1"), storedOf(NET, "apps/net.yaml")];

describe("a Git sync's plan", () => {
  it("a first sync creates every document in API write order, each carrying its source and document", () => {
    const plan = planGitSync(input());
    expect(plan.writes.map((w) => `${w.action} ${w.type}/${w.id} ${w.path}`)).toEqual([
      "create tenant/shop apps/shop.yaml#2",
      "create network/back apps/net.yaml",
      "create service/web apps/shop.yaml#1",
    ]);
    expect(plan.writes[0]!.resource.metadata?.annotations).toEqual({
      [GIT_SOURCE_ANNOTATION]: "src",
      [GIT_PATH_ANNOTATION]: "apps/shop.yaml#2",
    });
    expect([plan.drift, plan.orphans, plan.prunes, plan.error]).toEqual([[], [], [], undefined]);
    expect(plan.status).toMatchObject({
      syncedCommit: NEW,
      fetchedCommit: NEW,
      syncError: "",
      syncedAt: timestampFromDate(NOW),
      nextSyncAt: timestampFromDate(new Date(NOW.getTime() + 30_000)),
    });
    expect(plan.status.resources.map((r) => [r.path, r.resourceType, r.id, r.drift, r.orphaned])).toEqual([
      ["apps/net.yaml", "network", "back", false, false],
      ["apps/shop.yaml#1", "service", "web", false, false],
      ["apps/shop.yaml#2", "tenant", "shop", false, false],
    ]);
  });

  it("writes a changed document that differs, lists drift of an unchanged one, and leaves the rest", () => {
    const edited = storedOf(NET.replace("{tenant_id: shop}", "{tenant_id: shop, internal: true}"), "apps/net.yaml");
    const files = [{ path: "apps/shop.yaml", text: `${SERVICE.replace("nginx:1", "nginx:2")}---\n${TENANT}` }, FILES[1]!];
    const plan = planGitSync(
      input({ files, status: STATUS_BEFORE, changed: new Set(["apps/shop.yaml"]), held: [HELD[0]!, HELD[1]!, edited] }),
    );
    expect(plan.writes.map((w) => [w.action, w.id, w.updatePaths])).toEqual([["update", "web", ["desired_state", "annotations"]]]);
    expect(plan.writes[0]!.changes).toEqual([{ op: "~", path: "desired_state.service.image", before: "nginx:1", after: "nginx:2" }]);
    expect(plan.drift).toEqual([
      {
        type: "network",
        id: "back",
        path: "apps/net.yaml",
        missing: false,
        changes: [{ op: "-", path: "desired_state.network.internal", before: true }],
      },
    ]);
    expect(plan.status.resources.filter((r) => r.drift).map((r) => r.id)).toEqual(["back"]);
    expect(plan.status.syncedCommit).toBe(NEW);
  });

  it("a changed document already as stored is not written again (a retry after a partial sync)", () => {
    const plan = planGitSync(input({ status: STATUS_BEFORE, changed: new Set(["apps/shop.yaml", "apps/net.yaml"]), held: HELD }));
    expect([plan.writes, plan.drift]).toEqual([[], []]);
  });

  it("an unchanged document whose resource was deleted through the API is drift, not recreated", () => {
    const plan = planGitSync(input({ status: STATUS_BEFORE, changed: new Set(), held: [HELD[0]!, HELD[1]!] }));
    expect(plan.writes).toEqual([]);
    expect(plan.drift).toEqual([{ type: "network", id: "back", path: "apps/net.yaml", missing: true, changes: [] }]);
  });

  it("keeps annotations set through the API when the document gives none; the document's own replace them", () => {
    const tagged = storedOf(TENANT, "apps/old.yaml", "src", { owner: "ops" });
    const plan = planGitSync(input({ files: [{ path: "apps/shop.yaml", text: TENANT }], held: [tagged] }));
    expect(plan.writes[0]!.resource.metadata?.annotations).toEqual({
      owner: "ops",
      [GIT_SOURCE_ANNOTATION]: "src",
      [GIT_PATH_ANNOTATION]: "apps/shop.yaml",
    });
    expect(plan.writes[0]!.changes.map((c) => c.path)).toEqual([`annotations.${GIT_PATH_ANNOTATION}`]);
    const own = `${TENANT}metadata: {annotations: {team: web}}\n`;
    const replaced = planGitSync(input({ files: [{ path: "apps/shop.yaml", text: own }], held: [tagged] }));
    expect(replaced.writes[0]!.resource.metadata?.annotations).toEqual({
      team: "web",
      [GIT_SOURCE_ANNOTATION]: "src",
      [GIT_PATH_ANNOTATION]: "apps/shop.yaml",
    });
  });

  it("a resource whose document is gone is orphaned with prune off, pruned (dependents first) with prune on", () => {
    const files = [{ path: "apps/other.yaml", text: "resource_type: tenant\nid: other\ndesired_state: {}\n" }];
    const held = [...HELD, storedOf("resource_type: tenant\nid: manual\ndesired_state: {}\n", "", "another")];
    const off = planGitSync(input({ files, status: STATUS_BEFORE, held }));
    expect(off.orphans.map((o) => `${o.type}/${o.id} ${o.path}`)).toEqual([
      "service/web apps/shop.yaml#1",
      "network/back apps/net.yaml",
      "tenant/shop apps/shop.yaml#2",
    ]);
    expect(off.prunes).toEqual([]);
    expect(off.status.resources.filter((r) => r.orphaned).map((r) => r.id)).toEqual(["web", "back", "shop"]);
    const spec = create(GitSourceSpecSchema, { ...input().spec, prune: true });
    const on = planGitSync(input({ files, status: STATUS_BEFORE, held, spec }));
    expect(on.prunes.map((o) => `${o.type}/${o.id}`)).toEqual(["service/web", "network/back", "tenant/shop"]);
    expect([on.orphans, on.status.resources.map((r) => r.id)]).toEqual([[], ["other"]]);
    expect(on.writes.map((w) => w.id)).toEqual(["other"]);
  });

  it("a tree that cannot be applied whole writes and prunes nothing and says why; synced_commit stays", () => {
    const spec = create(GitSourceSpecSchema, { ...input().spec, prune: true });
    const bad = (text: string) =>
      planGitSync(input({ files: [FILES[1]!, { path: "apps/z.yaml", text }], status: STATUS_BEFORE, held: HELD, spec }));
    const typo = bad(`${TENANT}---\nresource_type: service\nid: api\ndesired_state: {tenant_id: shop, imag: x}\n`);
    expect(typo.error).toMatch(/^apps\/z\.yaml#2: desired_state: not a valid service: .*"imag"/);
    expect([typo.writes, typo.prunes, typo.drift]).toEqual([[], [], []]);
    expect(typo.status).toMatchObject({ syncedCommit: OLD, syncedAt: STATUS_BEFORE.syncedAt, fetchedCommit: NEW, syncError: typo.error });
    expect(typo.status.resources).toEqual(STATUS_BEFORE.resources);
    expect(bad("resource_type: deployment\nid: d\ndesired_state: {}\n").error).toBe(
      "apps/z.yaml: resource_type: a deployment is written by the controller and cannot be applied",
    );
    expect(bad("resource_type: git_source\nid: g\ndesired_state: {url: 'https://h/r.git'}\n").error).toBe(
      "apps/z.yaml: resource_type: a git_source cannot be synced from Git (a source would rewrite sources)",
    );
    expect(bad("resource_type: tenant\nid: [x\n").error).toMatch(/^apps\/z\.yaml: not valid YAML: /);
    const theirs = planGitSync(input({ held: [storedOf(TENANT, "t.yaml", "other-src"), HELD[1]!], spec }));
    expect(theirs.error).toBe(
      `apps/shop.yaml#2: id: tenant/shop is synced from git source other-src (remove it there, or its ${GIT_SOURCE_ANNOTATION} annotation, first)`,
    );
    expect([theirs.writes, theirs.prunes]).toEqual([[], []]);
  });

  it("a new tenant naming a secret created in the same sync is created bare first and given its spec last", () => {
    const tenant =
      "resource_type: tenant\nid: shop\ndesired_state: {display_name: Shop, compose: {compose_file: 'services: {}', secret_env: {DB: {secret_id: db, key: pw}}}}\n";
    const secret = "resource_type: secret\nid: db\ndesired_state: {tenant_id: shop, values: {pw: x}}\n";
    const plan = planGitSync(input({ files: [{ path: "a.yaml", text: `${tenant}---\n${secret}` }] }));
    expect(plan.writes.map((w) => `${w.action} ${w.type}/${w.id}`)).toEqual([
      "create tenant/shop",
      "create secret/db",
      "update tenant/shop",
    ]);
    const first = plan.writes[0]!.resource.desiredState;
    expect(first?.kind.case === "tenant" && first.kind.value.compose).toBeUndefined();
    const last = plan.writes[2]!.resource.desiredState;
    expect(last?.kind.case === "tenant" && last.kind.value.compose?.secretEnv.DB?.secretId).toBe("db");
  });

  it("a secret whose document carries values is sent when its file changed (values cannot be compared)", () => {
    const secret = "resource_type: secret\nid: db\ndesired_state: {tenant_id: shop, values: {pw: x}}\n";
    const held = [storedOf("resource_type: secret\nid: db\ndesired_state: {tenant_id: shop}\n", "s.yaml")];
    const files = [{ path: "s.yaml", text: secret }];
    expect(planGitSync(input({ files, held })).writes.map((w) => w.action)).toEqual(["update"]);
    expect(planGitSync(input({ files, held, changed: new Set() })).writes).toEqual([]);
  });

  it("a write refused by the executor leaves synced_commit and records where and why", () => {
    const plan = planGitSync(input({ status: STATUS_BEFORE }));
    const failed = statusAfterFailure(plan, STATUS_BEFORE, "apps/shop.yaml#1", "desired_state.service.tenant_id: tenant shop not found");
    expect(failed).toMatchObject({
      syncedCommit: OLD,
      syncedAt: STATUS_BEFORE.syncedAt,
      fetchedCommit: NEW,
      syncError: "apps/shop.yaml#1: desired_state.service.tenant_id: tenant shop not found",
    });
    expect(failed.resources).toEqual(plan.status.resources);
  });

  it("every file counts as changed at the first sync, on a reapply or when the synced commit is gone", () => {
    expect(changedFiles(undefined, false, ["a.yaml"])).toBe("all");
    expect(changedFiles(STATUS_BEFORE, true, ["a.yaml"])).toBe("all");
    expect(changedFiles(STATUS_BEFORE, false, undefined)).toBe("all");
    expect(changedFiles(STATUS_BEFORE, false, ["a.yaml"])).toEqual(new Set(["a.yaml"]));
  });
});
