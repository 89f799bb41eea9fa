// The files between the agent and skippy-updater (agent/updater/update-files.ts), the updater's
// bundles (seeding, checking a staged one: updater-bundles.ts) and the agent's side of it
// (update-report.ts, the agent.update capability), on a real temp directory.
import { createHash } from "node:crypto";
import { mkdtemp, readdir, readFile, readlink, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { agentCapabilities } from "../agent/capabilities.js";
import { checkStaged, pruneVersions, seedFromBundle } from "../agent/updater/updater-bundles.js";
import { slotOf } from "../agent/updater/updater-machine.js";
import { UpdaterLink } from "../agent/updater/update-report.js";
import { stateDirOf } from "../agent/updater/updater.js";
import {
  bundleVersionOf,
  parseUpdateRequest,
  readConfirmed,
  readUpdateRequest,
  readVersionLink,
  stageBundle,
  switchVersionLink,
  takeUpdateRequest,
  updaterPaths,
  versionDirName,
  writeUpdateRequest,
  writeUpdaterState,
} from "../agent/updater/update-files.js";
import { AgentUpdateState } from "../gen/skipper/v1/agent_update_pb.js";
import { NodeCapabilitiesSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";

const bundle = (version: string, body = "console.log('skippy');") =>
  Buffer.from(`#!/usr/bin/env node\n// skippy-bundle-version: ${version}\n${body}\n`);
const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const manifestOf = (version: string, b: Buffer) => ({ version, sha256: sha(b), size: b.length, signature: "" });

let dir: string;
beforeEach(async () => {
  dir = join(await mkdtemp(join(tmpdir(), "skippy-updater-")), "updater");
});
afterEach(async () => {
  await rm(join(dir, ".."), { recursive: true, force: true });
});

describe("update files", () => {
  it("names a version directory by version and the first 12 hex of its sha256, and refuses bad ones", () => {
    expect(versionDirName("0.2.0-rc.1", "ab".repeat(32))).toBe("0.2.0-rc.1-abababababab");
    expect(() => versionDirName("../x", "ab".repeat(32))).toThrow(/not \[A-Za-z0-9._-\]/);
    expect(() => versionDirName("1.0.0", "AB".repeat(32))).toThrow(/lowercase hex/);
    expect(bundleVersionOf(bundle("1.2.3"))).toBe("1.2.3");
    expect(bundleVersionOf(Buffer.from("console.log(1)"))).toBeUndefined();
  });

  it("writes, reads and takes request.json; refuses one that does not hold together", async () => {
    const b = bundle("0.2.0");
    const req = await writeUpdateRequest(dir, {
      version: "0.2.0",
      sha256: sha(b),
      deadlineMs: 60_000,
      orderId: "o-1",
      requestedAt: new Date().toISOString(),
    });
    expect(req.dir).toBe(versionDirName("0.2.0", sha(b)));
    expect(await readUpdateRequest(dir)).toEqual(req);
    expect(await takeUpdateRequest(dir)).toEqual(req);
    expect(await readUpdateRequest(dir)).toBeUndefined();
    expect(await takeUpdateRequest(dir)).toBeUndefined();
    expect(JSON.parse(await readFile(updaterPaths(dir).requestTaken, "utf8"))).toEqual(req);
    expect(() => parseUpdateRequest({ ...req, dir: "other" })).toThrow(/dir is not/);
    expect(() => parseUpdateRequest({ ...req, deadlineMs: 10 })).toThrow(/deadlineMs/);
    expect(() => parseUpdateRequest({ ...req, schema: "v0" })).toThrow(/schema/);
    await writeFile(updaterPaths(dir).request, "{not json");
    await expect(readUpdateRequest(dir)).rejects.toThrow(/not JSON/);
    // Taking one that does not hold together takes it all the same, and says why.
    await expect(takeUpdateRequest(dir)).rejects.toThrow(/request\.taken\.json: not JSON/);
    expect(await readUpdateRequest(dir)).toBeUndefined();
  });

  it("takes a request before reading it: what it returns is what it renamed, and a later one waits", async () => {
    const write = (version: string) =>
      writeUpdateRequest(dir, {
        version,
        sha256: sha(bundle(version)),
        deadlineMs: 60_000,
        orderId: version,
        requestedAt: new Date().toISOString(),
      });
    const first = await write("0.2.0");
    const taking = takeUpdateRequest(dir);
    // Written while the first one is being taken: never renamed unseen.
    const second = await write("0.3.0");
    expect(await taking).toEqual(first);
    expect(await readUpdateRequest(dir)).toEqual(second);
    expect(await takeUpdateRequest(dir)).toEqual(second);
  });

  it("prunes version directories: keeps the links, the given ones, a waiting request's and the three newest", async () => {
    const names: string[] = [];
    for (const [i, v] of ["1.0.0", "1.0.1", "1.0.2", "1.0.3", "1.0.4", "1.0.5", "1.0.6", "1.0.7"].entries()) {
      const b = bundle(v);
      const name = await stageBundle(dir, b, manifestOf(v, b));
      const t = new Date(Date.now() - 3_600_000 + i * 60_000);
      await utimes(join(updaterPaths(dir).versions, name), t, t);
      names.push(name);
    }
    await switchVersionLink(dir, "current", names[0]!);
    await switchVersionLink(dir, "previous", names[1]!);
    const waiting = bundle("1.0.2");
    await writeUpdateRequest(dir, {
      version: "1.0.2",
      sha256: sha(waiting),
      deadlineMs: 60_000,
      orderId: "",
      requestedAt: new Date().toISOString(),
    });
    expect((await pruneVersions(dir, [names[3]!])).sort()).toEqual([names[4]!]);
    expect((await readdir(updaterPaths(dir).versions)).sort()).toEqual([...names.slice(0, 4), ...names.slice(5)].sort());
    expect(await pruneVersions(dir, [names[3]!])).toEqual([]);
  });

  it("switches current by renaming a new link over the old one", async () => {
    await stageBundle(dir, bundle("1.0.0"), manifestOf("1.0.0", bundle("1.0.0")));
    await switchVersionLink(dir, "current", "1.0.0-aaaaaaaaaaaa");
    await switchVersionLink(dir, "current", "1.0.1-bbbbbbbbbbbb");
    expect(await readlink(updaterPaths(dir).current)).toBe("versions/1.0.1-bbbbbbbbbbbb");
    expect(await readVersionLink(dir, "current")).toBe("1.0.1-bbbbbbbbbbbb");
    expect(await readVersionLink(dir, "previous")).toBeUndefined();
  });

  it("checks a staged bundle against its manifest: size, sha256, stated version", async () => {
    const b = bundle("0.3.0");
    const name = await stageBundle(dir, b, manifestOf("0.3.0", b));
    const target = slotOf({ version: "0.3.0", sha256: sha(b) });
    expect(name).toBe(target.dir);
    expect(await checkStaged(dir, target)).toBeUndefined();
    await writeFile(join(updaterPaths(dir).versions, name, "skippy.mjs"), bundle("0.3.0", "console.log('other');"));
    expect(await checkStaged(dir, target)).toMatch(/bytes, the manifest says/);
    await writeFile(join(updaterPaths(dir).versions, name, "skippy.mjs"), bundle("0.3.0", "console.log('skippX');"));
    expect(await checkStaged(dir, target)).toMatch(/SHA-256 is/);
    expect(await checkStaged(dir, slotOf({ version: "0.4.0", sha256: sha(b) }))).toMatch(/manifest.json is missing/);
    const liar = bundle("0.9.9");
    const liarDir = await stageBundle(dir, liar, manifestOf("0.5.0", liar));
    expect(await checkStaged(dir, { version: "0.5.0", sha256: sha(liar), dir: liarDir })).toMatch(/states version 0\.9\.9/);
  });

  it("seeds the bundle it was started from, keeps current on later starts, and takes a newly installed bundle", async () => {
    const installed = join(dir, "..", "skippy.mjs");
    const a = bundle("1.0.0");
    await writeFile(installed, a);
    const first = await seedFromBundle(dir, installed);
    expect(first).toEqual({ current: slotOf({ version: "1.0.0", sha256: sha(a) }), installed: true });
    // An update moved current on; the same installed bundle at the next start leaves it there.
    const b = bundle("1.1.0");
    const bDir = await stageBundle(dir, b, manifestOf("1.1.0", b));
    await switchVersionLink(dir, "current", bDir);
    expect((await seedFromBundle(dir, installed)).current.dir).toBe(bDir);
    // An admin installed another bundle: it becomes current, what ran becomes previous.
    const c = bundle("2.0.0");
    await writeFile(installed, c);
    const third = await seedFromBundle(dir, installed);
    expect(third).toEqual({ current: slotOf({ version: "2.0.0", sha256: sha(c) }), installed: true });
    expect(await readVersionLink(dir, "previous")).toBe(bDir);
    await writeFile(installed, "console.log('no header')");
    await expect(seedFromBundle(dir, installed)).rejects.toThrow(/states no version/);
  });
});

describe("the updater's directory", () => {
  it("is under the agent's --state-dir as its flags, then SKIPPY_STATE_DIR, give it", () => {
    expect(stateDirOf(["--node-id", "n", "--state-dir", "/srv/a"], { SKIPPY_STATE_DIR: "/srv/b" })).toBe("/srv/a");
    expect(stateDirOf(["--state-dir=/srv/c"], {})).toBe("/srv/c");
    expect(stateDirOf(["--node-id", "n"], { SKIPPY_STATE_DIR: "/srv/b" })).toBe("/srv/b");
  });
});

describe("the agent's side", () => {
  it("an agent without the updater reports itself unsupervised and writes nothing", async () => {
    const link = UpdaterLink.fromEnv({}, undefined);
    expect(link.supervised).toBe(false);
    const r = await link.refresh();
    expect(r).toMatchObject({ supervised: false, state: AgentUpdateState.UNSPECIFIED, runningSha256: "" });
    await link.accepted();
  });

  it("a supervised agent reports state.json and confirms its bundle once", async () => {
    const s = "c".repeat(64);
    const link = UpdaterLink.fromEnv({ SKIPPY_UPDATER_DIR: dir, SKIPPY_BUNDLE_SHA256: s }, undefined);
    expect(await link.refresh()).toMatchObject({ supervised: true, state: AgentUpdateState.IDLE, runningSha256: s });
    await writeUpdaterState(dir, {
      state: "ROLLED_BACK",
      target: { version: "0.2.0", sha256: "b".repeat(64) },
      previous: { version: "0.1.0", sha256: s },
      running: { version: "0.1.0", sha256: s },
      message: "back on 0.1.0: 0.2.0 did not reach the controller within 120000 ms",
      changedAt: "2026-11-29T19:00:00.000Z",
    });
    const r = await link.refresh();
    expect(r).toMatchObject({
      state: AgentUpdateState.ROLLED_BACK,
      targetVersion: "0.2.0",
      targetSha256: "b".repeat(64),
      previousVersion: "0.1.0",
      message: "back on 0.1.0: 0.2.0 did not reach the controller within 120000 ms",
      supervised: true,
      runningSha256: s,
    });
    expect(r.changedAt?.seconds).toBe(BigInt(Date.parse("2026-11-29T19:00:00.000Z") / 1000));
    await link.accepted();
    const first = await readConfirmed(dir);
    expect(first?.sha256).toBe(s);
    await rm(updaterPaths(dir).confirmed);
    await link.accepted();
    expect(await readConfirmed(dir)).toBeUndefined();
  });

  it("hashes the running file when the updater gave no sha256", async () => {
    const file = join(dir, "..", "running.mjs");
    await writeFile(file, bundle("1.0.0"));
    const link = UpdaterLink.fromEnv({ SKIPPY_UPDATER_DIR: dir }, file);
    expect((await link.refresh()).runningSha256).toBe(sha(bundle("1.0.0")));
  });

  it("claims agent.update only under the updater and with an executor for update_agent", () => {
    const caps = create(NodeCapabilitiesSchema, {});
    const all = () => true;
    const noUpdate = (t: WorkOrderType) => t !== WorkOrderType.UPDATE_AGENT;
    expect(agentCapabilities(caps, all, true)).toContain("agent.update");
    expect(agentCapabilities(caps, all, false)).not.toContain("agent.update");
    expect(agentCapabilities(caps, noUpdate, true)).not.toContain("agent.update");
  });
});
