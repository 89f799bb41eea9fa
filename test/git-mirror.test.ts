// A Git source's bare mirror against real git: a bare repository in a temp directory and a work
// clone that commits manifests to it. The mirror follows the branch commit by commit, lists and
// reads a commit's manifests under its path only, and refuses what could turn an argument into an
// option or reach a transport it was not allowed.
import { existsSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { GitSourceSpecSchema } from "../gen/skipper/v1/delivery_pb.js";
import { GitMirror, type GitMirrorError, gitTransport, isGitMirrorError, redactGitUrl } from "../controller/promotion/git-mirror.js";
import { parseSourceDocuments, planGitSync } from "../controller/promotion/git-sync-plan.js";

const ENV = { GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null", HOME: tmpdir(), PATH: process.env.PATH ?? "" };
let root: string;
let origin: string;
let work: string;

const git = async (cwd: string, ...args: string[]) =>
  (await execa("git", ["-c", "user.name=test", "-c", "user.email=test@example.com", ...args], { cwd, env: ENV, extendEnv: false })).stdout;

/** Writes (or with null, removes) files in the work clone, commits and pushes them; returns the commit. */
async function commit(files: Record<string, string | null>, branch = "main"): Promise<string> {
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
  await git(work, "push", "-q", "origin", `HEAD:refs/heads/${branch}`);
  return (await git(work, "rev-parse", "HEAD")).trim();
}

const mirrorAt = async (opts: { allowFileUrls?: boolean } = { allowFileUrls: true }) =>
  new GitMirror({ dir: join(await mkdtemp(join(root, "mirror-")), "source.git"), ...opts });

async function failure(p: Promise<unknown>): Promise<GitMirrorError> {
  try {
    await p;
  } catch (e) {
    if (isGitMirrorError(e)) return e;
    throw e;
  }
  throw new Error("the call succeeded");
}

const tenant = (id: string, name: string) => `resource_type: tenant\nid: ${id}\ndesired_state: {display_name: ${name}}\n`;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "skipper-git-mirror-"));
  origin = join(root, "origin.git");
  work = join(root, "work");
  await git(root, "init", "-q", "--bare", origin);
  await git(root, "init", "-q", "-b", "main", work);
  await git(work, "remote", "add", "origin", origin);
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("a Git source's mirror", () => {
  it("follows the branch commit by commit and reads each commit's manifests under its path only", async () => {
    const first = await commit({
      "apps/web.yaml": tenant("web", "Web"),
      "apps/sub/db.json": JSON.stringify({ resource_type: "tenant", id: "db", desired_state: {} }),
      "apps/README.md": "not a manifest",
      "apps-old/stale.yaml": tenant("stale", "Stale"),
      "other/x.yaml": tenant("x", "X"),
      "root.yml": tenant("root", "Root"),
    });
    await symlink("web.yaml", join(work, "apps", "link.yaml"));
    const second = await commit({ "apps/web.yaml": tenant("web", "Web 2"), "apps/sub/db.json": null });
    const mirror = await mirrorAt();

    expect(await mirror.fetch(origin, "main")).toBe(second);
    const now = await mirror.files(second, "apps");
    expect(now.map((f) => f.path)).toEqual(["apps/web.yaml"]);
    expect([...(await mirror.read(now.map((f) => f.blob))).values()]).toEqual([tenant("web", "Web 2")]);
    // The earlier commit is still readable as it was.
    const before = await mirror.files(first, "apps/");
    expect(before.map((f) => f.path)).toEqual(["apps/sub/db.json", "apps/web.yaml"]);
    const texts = await mirror.read(before.map((f) => f.blob));
    expect(texts.get(before[1]!.blob)).toBe(tenant("web", "Web"));
    expect((await mirror.files(second, "")).map((f) => f.path)).toEqual([
      "apps-old/stale.yaml",
      "apps/web.yaml",
      "other/x.yaml",
      "root.yml",
    ]);
    expect(await mirror.changedSince(first, second, "apps")).toEqual(["apps/link.yaml", "apps/sub/db.json", "apps/web.yaml"]);

    const third = await commit({ "other/x.yaml": tenant("x", "X 2") });
    expect(third).not.toBe(second);
    expect(await mirror.fetch(origin, "main")).toBe(third);
    expect(await mirror.changedSince(second, third, "apps")).toEqual([]);
    expect(await mirror.changedSince("0".repeat(40), third, "apps")).toBeUndefined();
    // A repeat fetch with nothing new answers the same commit.
    expect(await mirror.fetch(`file://${origin}`, "main")).toBe(third);
  });

  it("a path is a directory, never a pattern", async () => {
    const before = await commit({ "lit/ab/y.yaml": tenant("y", "Y") }, "literal");
    const after = await commit({ "lit/a*/x.yaml": tenant("x", "X"), "lit/ab/y.yaml": tenant("y", "Y 2") }, "literal");
    const mirror = await mirrorAt();
    expect(await mirror.fetch(origin, "literal")).toBe(after);
    expect((await mirror.files(after, "lit/a*")).map((f) => f.path)).toEqual(["lit/a*/x.yaml"]);
    expect(await mirror.changedSince(before, after, "lit/a*")).toEqual(["lit/a*/x.yaml"]);
    expect((await mirror.files(after, ":(top)lit")).map((f) => f.path)).toEqual([]);
  });

  it("follows a branch that was rewritten (a force push)", async () => {
    const kept = await commit({ "f/a.yaml": tenant("a", "A") }, "rewrite");
    const mirror = await mirrorAt();
    expect(await mirror.fetch(origin, "rewrite")).toBe(kept);
    await git(work, "commit", "-q", "--amend", "-m", "rewritten");
    await git(work, "push", "-q", "-f", "origin", "HEAD:refs/heads/rewrite");
    const rewritten = (await git(work, "rev-parse", "HEAD")).trim();
    expect(await mirror.fetch(origin, "rewrite")).toBe(rewritten);
  });

  it("refuses file URLs and local paths unless allowed, before anything is created", async () => {
    const mirror = await mirrorAt({});
    for (const url of [
      `file://${origin}`,
      origin,
      "./origin.git",
      "ext::sh -c touch% /tmp/x",
      "ext::git-upload-pack",
      "http://example.com/r.git",
    ]) {
      const e = await failure(mirror.fetch(url, "main"));
      expect(e.reason, url).toBe("refused");
    }
    expect((await failure(mirror.fetch(origin, "main"))).message).toMatch(/transport file is not allowed.*--allow-git-file-urls/);
    expect(existsSync((mirror as unknown as { dir: string }).dir)).toBe(false);
    expect(["https://h/r.git", "ssh://h/r.git", "git@github.com:o/r.git", "/srv/r.git", "ext::x"].map(gitTransport)).toEqual([
      "https",
      "ssh",
      "ssh",
      "file",
      "ext",
    ]);
  });

  it("refuses a URL or a branch that git could read as an option, and names that are not branches", async () => {
    const mirror = await mirrorAt();
    const marker = join(root, "pwned");
    for (const branch of [`--upload-pack=touch ${marker}`, "-b", "", "a..b", "a b", "x.lock", "refs/../x", "@{-1}"]) {
      expect((await failure(mirror.fetch(origin, branch))).reason, branch).toBe("refused");
    }
    expect((await failure(mirror.fetch(`--upload-pack=touch ${marker}`, "main"))).reason).toBe("refused");
    expect(existsSync(marker)).toBe(false);
    expect((await failure(mirror.files("main", ""))).reason).toBe("refused");
    expect((await failure(mirror.files("a".repeat(40), "../etc"))).reason).toBe("refused");
    expect((await failure(mirror.read(["--batch-all-objects"]))).reason).toBe("refused");
  });

  it("an absent branch fails saying so; a missing blob fails naming it", async () => {
    await commit({ "n/a.yaml": tenant("n", "N") });
    const mirror = await mirrorAt();
    const e = await failure(mirror.fetch(origin, "no-such-branch"));
    expect(e.reason).toBe("not_found");
    expect(e.message).toBe(`fetching ${origin} (branch no-such-branch) failed: no branch no-such-branch`);
    await mirror.fetch(origin, "main");
    const missing = await failure(mirror.read(["b".repeat(40)]));
    expect([missing.reason, missing.message]).toEqual([
      "not_found",
      expect.stringContaining(`blob ${"b".repeat(40)} is not in the mirror`),
    ]);
  });

  it("a failed fetch names the URL with its userinfo hidden, and git's last line", async () => {
    const mirror = await mirrorAt();
    const e = await failure(mirror.fetch("https://deploy:s3cr3t-token@127.0.0.1:1/shop/app.git", "main"));
    expect(e.reason).toBe("failed");
    expect(e.message).toMatch(/^fetching https:\/\/\[REDACTED\]@127\.0\.0\.1:1\/shop\/app\.git \(branch main\) failed: .*127\.0\.0\.1/);
    expect(e.message).not.toMatch(/s3cr3t|deploy/);
    expect(redactGitUrl("https://tok@h/r.git")).toBe("https://[REDACTED]@h/r.git");
    expect(redactGitUrl("git@github.com:o/r.git")).toBe("git@github.com:o/r.git");
  });

  it("a fetch from a server that never answers is stopped at the timeout", async () => {
    const sockets: Socket[] = [];
    const server = createServer((s) => sockets.push(s));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    try {
      const mirror = new GitMirror({ dir: join(await mkdtemp(join(root, "mirror-")), "s.git"), timeoutMs: 1500 });
      const e = await failure(mirror.fetch(`https://127.0.0.1:${port}/r.git`, "main"));
      expect([e.reason, e.message]).toEqual(["timeout", `fetching https://127.0.0.1:${port}/r.git (branch main) timed out after 1.5 s`]);
      expect(sockets.length).toBeGreaterThan(0);
    } finally {
      for (const s of sockets) s.destroy();
      server.close();
    }
  });

  it("feeds the sync plan: a first sync writes every document, the next only what a commit changed", async () => {
    const first = await commit({ "sync/shop.yaml": tenant("sync-shop", "Shop"), "sync/ops.yaml": tenant("sync-ops", "Ops") }, "sync");
    const mirror = await mirrorAt();
    const spec = create(GitSourceSpecSchema, { url: origin, branch: "sync", path: "sync" });
    const tree = async (commitId: string) => {
      const files = await mirror.files(commitId, spec.path);
      const texts = await mirror.read(files.map((f) => f.blob));
      return parseSourceDocuments(files.map((f) => ({ path: f.path, text: texts.get(f.blob)! })));
    };
    expect(await mirror.fetch(origin, "sync")).toBe(first);
    const base = { sourceId: "src", spec, status: undefined, owned: [], stored: new Map(), now: new Date() };
    const initial = planGitSync({ ...base, commit: first, documents: await tree(first), changed: "all" });
    expect(initial.writes.map((w) => `${w.action} ${w.path}`)).toEqual(["create sync/ops.yaml", "create sync/shop.yaml"]);

    const second = await commit({ "sync/shop.yaml": tenant("sync-shop", "Shop 2") }, "sync");
    expect(await mirror.fetch(origin, "sync")).toBe(second);
    const changed = new Set(await mirror.changedSince(first, second, spec.path));
    const next = planGitSync({ ...base, status: initial.status, commit: second, documents: await tree(second), changed });
    expect(next.writes.map((w) => `${w.action} ${w.path}`)).toEqual(["create sync/shop.yaml"]);
    // Nothing was stored in this fixture, so the unchanged document is drift (missing), not rewritten.
    expect(next.drift.map((d) => `${d.path} missing=${d.missing}`)).toEqual(["sync/ops.yaml missing=true"]);
  });
});
