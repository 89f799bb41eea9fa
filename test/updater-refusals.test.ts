// skippy-updater refuses what it cannot trust, and says why in state.json: a request naming a
// version directory whose manifest.json is missing, unreadable or names another bundle, a bundle
// that does not match its manifest, and a request that does not hold together. The real Updater
// (agent/updater/updater.ts) on a temp directory, its child a real Node process of a small bundle;
// nothing is switched and the running agent is left alone.
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BUNDLE_FILE,
  MANIFEST_FILE,
  readUpdaterState,
  REQUEST_SCHEMA,
  stageBundle,
  updaterPaths,
  versionDirName,
  writeUpdateRequest,
} from "../agent/updater/update-files.js";
import { Updater } from "../agent/updater/updater.js";
import { waitFor } from "./helpers/processes.js";

// Runs until stopped, as an agent does; it never confirms, which does not matter at rest.
const bundle = (version: string) => Buffer.from(`// skippy-bundle-version: ${version}\nsetInterval(() => {}, 1000);\n`);
const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

let root: string;
let dir: string;
let updater: Updater;
const running = bundle("0.1.0");

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "skippy-updater-refusals-"));
  dir = join(root, "state", "updater");
  const installed = join(root, "skippy.mjs");
  await writeFile(installed, running);
  updater = new Updater({ dir, bundle: installed, args: [], env: process.env, log: pino({ level: "silent" }) });
  await updater.start();
});

afterAll(async () => {
  updater?.stop("SIGTERM");
  await updater?.done;
  await rm(root, { recursive: true, force: true });
});

/** Writes request.json for `version`/`sha256` and waits for state.json to say it FAILED, and why. */
async function refused(version: string, sha256: string): Promise<string> {
  const before = (await readUpdaterState(dir))?.changedAt;
  await writeUpdateRequest(dir, { version, sha256, deadlineMs: 60_000, orderId: "o1", requestedAt: new Date().toISOString() });
  const s = await waitFor(
    `state.json to refuse ${version}`,
    async () => {
      const s = await readUpdaterState(dir);
      return s?.state === "FAILED" && s.changedAt !== before ? s : undefined;
    },
    15_000,
    50,
  );
  expect(s).toMatchObject({ target: { version, sha256 }, running: { version: "0.1.0", sha256: sha(running) } });
  // Nothing was switched; the request was taken.
  expect(await readlink(updaterPaths(dir).current)).toBe(join("versions", versionDirName("0.1.0", sha(running))));
  await expect(readFile(updaterPaths(dir).request)).rejects.toThrow(/ENOENT/);
  return s.message;
}

describe("skippy-updater refuses a staged bundle it cannot trust", () => {
  it("a version directory without manifest.json", async () => {
    const b = bundle("0.2.0");
    const name = versionDirName("0.2.0", sha(b));
    await mkdir(join(updaterPaths(dir).versions, name), { recursive: true });
    await writeFile(join(updaterPaths(dir).versions, name, BUNDLE_FILE), b);
    expect(await refused("0.2.0", sha(b))).toBe(`0.2.0 is not a usable bundle: versions/${name}/manifest.json is missing`);
  });

  it("no version directory at all", async () => {
    const s = "d".repeat(64);
    expect(await refused("0.2.1", s)).toBe(`0.2.1 is not a usable bundle: versions/${versionDirName("0.2.1", s)}/manifest.json is missing`);
  });

  it("a manifest that names another bundle", async () => {
    const b = bundle("0.3.0");
    const name = await stageBundle(dir, b, { version: "0.3.0", sha256: sha(b), size: b.length, signature: "" });
    // Its manifest rewritten to name another version of the same bytes.
    const other = { version: "0.3.9", sha256: sha(b), size: b.length, signature: "" };
    await writeFile(join(updaterPaths(dir).versions, name, MANIFEST_FILE), JSON.stringify(other));
    expect(await refused("0.3.0", sha(b))).toBe(
      `0.3.0 is not a usable bundle: the manifest names 0.3.9 ${sha(b)}, not the requested bundle`,
    );
  });

  it("a manifest that is not JSON, or not a manifest", async () => {
    const b = bundle("0.4.0");
    const name = await stageBundle(dir, b, { version: "0.4.0", sha256: sha(b), size: b.length, signature: "" });
    const manifest = join(updaterPaths(dir).versions, name, MANIFEST_FILE);
    await writeFile(manifest, "{ half");
    expect(await refused("0.4.0", sha(b))).toMatch(/^0\.4\.0 is not a usable bundle: .*manifest\.json: not JSON: /);
    await writeFile(manifest, JSON.stringify({ version: "0.4.0", sha256: sha(b) }));
    expect(await refused("0.4.0", sha(b))).toBe("0.4.0 is not a usable bundle: manifest: size is not a whole number");
  });

  it("a bundle whose bytes are not what its manifest says", async () => {
    const b = bundle("0.5.0");
    const name = await stageBundle(dir, b, { version: "0.5.0", sha256: sha(b), size: b.length, signature: "" });
    const tampered = Buffer.from(b);
    tampered[tampered.length - 2] = 0x20;
    await writeFile(join(updaterPaths(dir).versions, name, BUNDLE_FILE), tampered);
    expect(await refused("0.5.0", sha(b))).toBe(
      `0.5.0 is not a usable bundle: the bundle's SHA-256 is ${sha(tampered)}, the manifest says ${sha(b)}`,
    );
  });

  it("a request whose directory is not its version's", async () => {
    const before = (await readUpdaterState(dir))?.changedAt;
    const s = "e".repeat(64);
    const req = {
      schema: REQUEST_SCHEMA,
      version: "0.6.0",
      sha256: s,
      dir: "0.1.0-elsewhere",
      deadlineMs: 60_000,
      orderId: "",
      requestedAt: new Date().toISOString(),
    };
    await writeFile(updaterPaths(dir).request, JSON.stringify(req));
    const state = await waitFor(
      "state.json to refuse the request",
      async () => {
        const st = await readUpdaterState(dir);
        return st?.state === "FAILED" && st.changedAt !== before ? st : undefined;
      },
      15_000,
      50,
    );
    expect(state.message).toBe(`refused the update request: request: dir is not ${versionDirName("0.6.0", s)}`);
    expect(await readlink(updaterPaths(dir).current)).toBe(join("versions", versionDirName("0.1.0", sha(running))));
  });
});
