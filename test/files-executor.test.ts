// The upload_files and sticker executors on a real file system (and, for image digests, a real
// engine when one can be had): files land atomically, checked, and never outside their base.
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { link, lstat, mkdir, mkdtemp, readdir, readFile, realpath, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { FileUploadSchema, VersionStickerSchema } from "../gen/skipper/v1/order_action_pb.js";
import { NodeCapabilitiesSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import type { AgentConfig } from "../agent/config.js";
import type { ExecContext } from "../agent/executors/executor.js";
import { readSticker, readStickerFile, writeSticker } from "../agent/executors/sticker.js";
import { uploadFiles } from "../agent/executors/upload-files.js";

type Upload = MessageInitShape<typeof FileUploadSchema>;

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost)
  console.warn("!!! files-executor.test.ts: image digests from a real engine SKIPPED: no Docker engine (see test/global-setup.ts)");
const asRoot = process.getuid?.() === 0;
if (!asRoot) console.warn("!!! files-executor.test.ts: file ownership tests SKIPPED: not running as root");

let workDir: string;
let outside: string;
beforeEach(async () => {
  workDir = await mkdtemp(join(tmpdir(), "skippy-files-"));
  outside = await mkdtemp(join(tmpdir(), "skippy-outside-"));
});
afterEach(async () => {
  await rm(workDir, { recursive: true, force: true });
  await rm(outside, { recursive: true, force: true });
});

const ctx = (): ExecContext => ({
  config: { nodeId: "n1", workDir, allowCommands: [] as string[] } as AgentConfig,
  host: { capabilities: create(NodeCapabilitiesSchema, {}) },
  log: pino({ level: "silent" }),
  signal: new AbortController().signal,
});
const sha = (s: string) => createHash("sha256").update(s).digest("hex");
const file = (path: string, text: string, extra: { mode?: number; owner?: string; group?: string; sha256?: string } = {}): Upload => ({
  path,
  content: Buffer.from(text),
  sha256: sha(text),
  ...extra,
});
const upload = (files: Upload[], tenantId = "") =>
  uploadFiles(
    create(WorkOrderSchema, {
      id: "o-up",
      type: WorkOrderType.UPLOAD_FILES,
      target: { tenantId, nodeId: "n1" },
      action: { kind: { case: "uploadFiles", value: { files } } },
    }),
    ctx(),
  );
const filesDir = () => join(workDir, "files");
const mode = async (p: string) => ((await stat(p)).mode & 0o7777).toString(8);
// Every file under a directory, relative, sorted (temp files would show up here).
const tree = async (dir: string): Promise<string[]> =>
  existsSync(dir) ? ((await readdir(dir, { recursive: true })) as string[]).sort() : [];

describe("upload_files", () => {
  it("writes each file's content with its mode and reports path, sha256, size and changed", async () => {
    const r = (
      await upload([file("conf/app.ini", "a=1\n", { mode: 0o640 }), file("run.sh", "#!/bin/sh\n", { mode: 0o755 }), file("plain.txt", "x")])
    ).result;
    expect(r).toMatchObject({ success: true, code: "UPLOAD_OK" });
    expect(await readFile(join(filesDir(), "conf/app.ini"), "utf8")).toBe("a=1\n");
    expect([
      await mode(join(filesDir(), "conf/app.ini")),
      await mode(join(filesDir(), "run.sh")),
      await mode(join(filesDir(), "plain.txt")),
    ]).toEqual(["640", "755", "644"]);
    const base = await realpath(filesDir());
    expect(r.details?.files.map((f) => [f.path, f.sha256, f.mode, f.size, f.changed])).toEqual([
      [join(base, "conf/app.ini"), sha("a=1\n"), 0o640, 4n, true],
      [join(base, "run.sh"), sha("#!/bin/sh\n"), 0o755, 10n, true],
      [join(base, "plain.txt"), sha("x"), 0o644, 1n, true],
    ]);
    expect(await tree(filesDir())).toEqual(["conf", "conf/app.ini", "plain.txt", "run.sh"]);
  });

  it("goes to the tenant's project directory when the order names a tenant", async () => {
    const r = (await upload([file("config/nginx.conf", "server {}\n", { sha256: sha("server {}\n").toUpperCase() })], "t1")).result;
    expect(r.code).toBe("UPLOAD_OK");
    expect(await readFile(join(workDir, "tenants/t1/config/nginx.conf"), "utf8")).toBe("server {}\n");
    expect((await upload([file("x", "x")], "../t1")).result.code).toBe("UPLOAD_INVALID");
  });

  it("replaces a file by rename: a hard link to the old one keeps the old content, a symlink is replaced, not followed", async () => {
    await upload([file("a.txt", "old")]);
    const oldIno = (await stat(join(filesDir(), "a.txt"))).ino;
    await link(join(filesDir(), "a.txt"), join(workDir, "hard-link"));
    const target = join(outside, "target.txt");
    await writeFile(target, "outside");
    await symlink(target, join(filesDir(), "b.txt"));
    const r = (await upload([file("a.txt", "new"), file("b.txt", "via symlink?")])).result;
    expect(r.code).toBe("UPLOAD_OK");
    expect(await readFile(join(filesDir(), "a.txt"), "utf8")).toBe("new");
    expect((await stat(join(filesDir(), "a.txt"))).ino).not.toBe(oldIno);
    expect(await readFile(join(workDir, "hard-link"), "utf8")).toBe("old");
    expect((await lstat(join(filesDir(), "b.txt"))).isFile()).toBe(true);
    expect(await readFile(target, "utf8")).toBe("outside");
    expect(await tree(filesDir())).toEqual(["a.txt", "b.txt"]);
  });

  it("a sha256 mismatch is refused and nothing is written, not even the files before it", async () => {
    const r = (await upload([file("good.txt", "good"), file("bad.txt", "bad", { sha256: sha("other") })])).result;
    expect(r).toMatchObject({ success: false, retriable: false, code: "CHECKSUM_MISMATCH" });
    expect(await tree(filesDir())).toEqual([]);
  });

  it("paths that climb out, absolute or unnormalised paths, reserved names and bad modes are refused before anything is written", async () => {
    const bad: [Upload, string][] = [
      [file("../x", "x"), ""],
      [file("a/../../x", "x"), ""],
      [file("/etc/skippy-x", "x"), ""],
      [file("./a", "x"), ""],
      [file("a//b", "x"), ""],
      [file("dir/", "x"), ""],
      [file("", "x"), ""],
      [file("a\0b", "x"), ""],
      [file(`${"a/".repeat(2100)}b`, "x"), ""],
      [file(".env", "X=1"), "t1"],
      [file("docker-compose.yml", "services: {}"), "t1"],
      [file(".skipper-state.json", "{}"), "t1"],
      [file(".skipper-sticker.json", "{}"), "t1"],
      [file(".staging-o1/docker-compose.yml", "x"), "t1"],
      [file("suid", "x", { mode: 0o4755 }), ""],
      [file("sgid", "x", { mode: 0o2755 }), ""],
      [file("type-bits", "x", { mode: 0o100644 }), ""],
      [file("bad-sha", "x", { sha256: "abc" }), ""],
      [file("who", "x", { owner: "no-such-user-xyz" }), ""],
      [file("which-group", "x", { group: "no-such-group-xyz" }), ""],
    ];
    for (const [f, tenant] of bad) {
      const r = (await upload([file("first-and-fine.txt", "ok"), f], tenant)).result;
      expect([f.path?.slice(0, 40), r.code]).toEqual([f.path?.slice(0, 40), "UPLOAD_INVALID"]);
    }
    expect(await tree(workDir)).toEqual([]);
    expect(existsSync("/etc/skippy-x")).toBe(false);
    // Outside a project directory those names are ordinary.
    expect((await upload([file(".env", "X=1"), file("docker-compose.yml", "services: {}")])).result.code).toBe("UPLOAD_OK");
  });

  it("a symlinked directory leading outside the base is refused, one leading inside is followed", async () => {
    await mkdir(join(filesDir(), "real/sub"), { recursive: true });
    await symlink(outside, join(filesDir(), "escape"));
    await symlink(outside, join(filesDir(), "real/sub/deeper"));
    await symlink(join(filesDir(), "real"), join(filesDir(), "alias"));
    for (const path of ["escape/x", "escape/new-dir/x", "real/sub/deeper/x"]) {
      const r = (await upload([file("ok.txt", "ok"), file(path, "x")])).result;
      expect([path, r.code]).toEqual([path, "UPLOAD_INVALID"]);
    }
    expect(await readdir(outside)).toEqual([]);
    expect(existsSync(join(filesDir(), "ok.txt"))).toBe(false);
    const inside = (await upload([file("alias/y", "y")])).result;
    expect(inside.code).toBe("UPLOAD_OK");
    expect(inside.details?.files[0]?.path).toBe(join(await realpath(filesDir()), "real/y"));
  });

  it("a second identical upload changes nothing; a new mode changes the file", async () => {
    const files = [file("conf/a.ini", "a"), file("b.ini", "b", { mode: 0o600 })];
    await upload(files);
    const before = await stat(join(filesDir(), "conf/a.ini"));
    const again = (await upload(files)).result;
    expect(again.code).toBe("UPLOAD_OK");
    expect(again.details?.files.map((f) => f.changed)).toEqual([false, false]);
    expect((await stat(join(filesDir(), "conf/a.ini"))).ino).toBe(before.ino);
    const chmodded = (await upload([file("conf/a.ini", "a", { mode: 0o600 })])).result;
    expect(chmodded.details?.files[0]?.changed).toBe(true);
    expect(await mode(join(filesDir(), "conf/a.ini"))).toBe("600");
  });

  it.skipIf(!asRoot)("sets the owner and group by number or by name, and an owned file uploaded again is unchanged", async () => {
    const r = (
      await upload([file("n.txt", "n", { owner: "65534", group: "65534", mode: 0o640 }), file("named.txt", "m", { owner: "nobody" })])
    ).result;
    expect(r.code).toBe("UPLOAD_OK");
    const n = await stat(join(filesDir(), "n.txt"));
    expect([n.uid, n.gid, (n.mode & 0o7777).toString(8)]).toEqual([65534, 65534, "640"]);
    expect((await stat(join(filesDir(), "named.txt"))).uid).toBe(65534);
    const again = (await upload([file("n.txt", "n", { owner: "65534", group: "65534", mode: 0o640 })])).result;
    expect(again.details?.files[0]?.changed).toBe(false);
    const back = (await upload([file("n.txt", "n", { owner: "0", mode: 0o640 })])).result;
    expect(back.details?.files[0]?.changed).toBe(true);
    expect((await stat(join(filesDir(), "n.txt"))).uid).toBe(0);
  });
});

type StickerInit = MessageInitShape<typeof VersionStickerSchema>;
const stickerOrder = (tenantId: string, sticker?: StickerInit) =>
  create(WorkOrderSchema, {
    id: "o-st",
    type: WorkOrderType.WRITE_STICKER,
    target: { tenantId, nodeId: "n1" },
    action: sticker ? { kind: { case: "writeSticker", value: { sticker } } } : undefined,
  });
const readOrder = (tenantId: string) =>
  create(WorkOrderSchema, {
    id: "o-rd",
    type: WorkOrderType.READ_STICKER,
    target: { tenantId, nodeId: "n1" },
    action: { kind: { case: "readSticker", value: {} } },
  });

describe("version stickers", () => {
  const savedHost = process.env.DOCKER_HOST;
  afterEach(() => {
    if (savedHost === undefined) delete process.env.DOCKER_HOST;
    else process.env.DOCKER_HOST = savedHost;
  });

  it("a written sticker reads back the same, stored as snake_case JSON with mode 0644", async () => {
    const at = new Date("2025-01-02T03:04:05.678Z");
    const w = (
      await writeSticker(
        stickerOrder("t1", {
          releaseId: "r-7",
          deploymentId: "d-3",
          imageDigests: { web: "sha256:aa", db: "sha256:bb" },
          writtenAt: timestampFromDate(at),
          tenantId: "ignored",
          nodeId: "ignored",
        }),
        ctx(),
      )
    ).result;
    expect(w).toMatchObject({ success: true, code: "STICKER_OK" });
    expect(w.details?.sticker).toMatchObject({ releaseId: "r-7", deploymentId: "d-3", tenantId: "t1", nodeId: "n1", schemaVersion: "v1" });
    const path = join(workDir, "tenants/t1/.skipper-sticker.json");
    expect(await mode(path)).toBe("644");
    expect(JSON.parse(await readFile(path, "utf8"))).toEqual({
      schema_version: "v1",
      release_id: "r-7",
      deployment_id: "d-3",
      image_digests: { db: "sha256:bb", web: "sha256:aa" },
      written_at: "2025-01-02T03:04:05.678Z",
      tenant_id: "t1",
      node_id: "n1",
    });
    const r = (await readSticker(readOrder("t1"), ctx())).result;
    expect(r).toMatchObject({ success: true, code: "STICKER_OK" });
    expect(r.details?.sticker).toEqual(w.details?.sticker);
    expect(await readdir(join(workDir, "tenants/t1"))).toEqual([".skipper-sticker.json"]);
  });

  it("written_at is now unless the order gives it", async () => {
    const t0 = Date.now();
    await writeSticker(stickerOrder("t1", { releaseId: "r-1", imageDigests: { web: "sha256:aa" } }), ctx());
    const s = await readStickerFile(workDir, "t1");
    const at = Number(s?.writtenAt?.seconds) * 1000;
    expect(at).toBeGreaterThanOrEqual(Math.floor(t0 / 1000) * 1000);
    expect(at).toBeLessThanOrEqual(Date.now());
  });

  it("reading a tenant without a sticker is STICKER_MISSING; a broken file or no tenant is STICKER_INVALID", async () => {
    expect((await readSticker(readOrder("t1"), ctx())).result).toMatchObject({ success: false, retriable: false, code: "STICKER_MISSING" });
    await mkdir(join(workDir, "tenants/t2"), { recursive: true });
    await writeFile(join(workDir, "tenants/t2/.skipper-sticker.json"), "{not json");
    expect((await readSticker(readOrder("t2"), ctx())).result.code).toBe("STICKER_INVALID");
    await writeFile(join(workDir, "tenants/t2/.skipper-sticker.json"), JSON.stringify({ schema_version: "v9" }));
    expect((await readSticker(readOrder("t2"), ctx())).result.code).toBe("STICKER_INVALID");
    expect((await writeSticker(stickerOrder("", { releaseId: "r" }), ctx())).result.code).toBe("STICKER_INVALID");
    expect((await writeSticker(stickerOrder("../t1", { releaseId: "r" }), ctx())).result.code).toBe("STICKER_INVALID");
    expect((await writeSticker(stickerOrder("t1"), ctx())).result.code).toBe("STICKER_INVALID");
    expect((await readSticker(readOrder(""), ctx())).result.code).toBe("STICKER_INVALID");
  });

  it("needing digests from an engine that does not answer is DOCKER_UNAVAILABLE, retriable, and writes nothing", async () => {
    process.env.DOCKER_HOST = `unix://${join(workDir, "no-such.sock")}`;
    const r = (await writeSticker(stickerOrder("t1", { releaseId: "r-1" }), ctx())).result;
    expect(r).toMatchObject({ success: false, retriable: true, code: "DOCKER_UNAVAILABLE" });
    expect(existsSync(join(workDir, "tenants/t1/.skipper-sticker.json"))).toBe(false);
  });

  describe.skipIf(!dockerHost)("image digests from a real engine", () => {
    const project = `skippy-sticker-${process.pid}`;
    const docker = (...args: string[]) => execa("docker", args, { env: { DOCKER_HOST: dockerHost! } });
    // biome-ignore lint/suspicious/noDuplicateTestHooks: the hook of the nested describe.skipIf block, not a second one of the outer block
    afterEach(async () => {
      const ids = (await docker("ps", "-aq", "--filter", `label=com.docker.compose.project=${project}`)).stdout.split("\n").filter(Boolean);
      if (ids.length > 0) await docker("rm", "-f", ...ids);
    });

    it("a tenant without containers gets an empty digest map; a running one gets its image's digest (or id)", async () => {
      process.env.DOCKER_HOST = dockerHost!;
      const empty = (await writeSticker(stickerOrder("t-empty", { releaseId: "r-0" }), ctx())).result;
      expect(empty.code).toBe("STICKER_OK");
      expect(empty.details?.sticker?.imageDigests).toEqual({});

      // The project name comes from the deploy's state record, not the tenant id.
      await mkdir(join(workDir, "tenants/t1"), { recursive: true });
      await writeFile(
        join(workDir, "tenants/t1/.skipper-state.json"),
        JSON.stringify({ schema_version: "v1", project_name: project, tenant_id: "t1" }),
      );
      await docker(
        "run",
        "-d",
        "--network",
        "none",
        "--label",
        `com.docker.compose.project=${project}`,
        "--label",
        "com.docker.compose.service=web",
        "skipper-busybox:local",
        "sleep",
        "300",
      );
      const image = JSON.parse((await docker("image", "inspect", "skipper-busybox:local")).stdout)[0] as {
        Id: string;
        RepoDigests?: string[];
      };
      const expected = image.RepoDigests?.[0]?.split("@")[1] ?? image.Id;
      const w = (await writeSticker(stickerOrder("t1", { releaseId: "r-1", deploymentId: "d-1" }), ctx())).result;
      expect(w.code).toBe("STICKER_OK");
      expect(w.details?.sticker?.imageDigests).toEqual({ web: expected });
      expect(expected).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect((await readStickerFile(workDir, "t1"))?.imageDigests).toEqual({ web: expected });
    });
  });
});
