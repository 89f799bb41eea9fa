// The bundles skippy-updater keeps under versions/: seeding the one it was started from, reading
// what `current` points at, checking a staged one before switching to it, and removing old ones.
import { readdir, readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Slot } from "./updater-machine.js";
import {
  type BundleManifest,
  bundlePathOf,
  bundleVersionOf,
  readManifest,
  readUpdateRequest,
  readVersionLink,
  sha256File,
  stageBundle,
  switchVersionLink,
  updaterPaths,
  versionDirName,
  writeJsonWhole,
} from "./update-files.js";

/** installed.json: the bundle the service was last started from (seeded into versions/). */
interface InstalledFile {
  sha256: string;
}

/** What seeding did: the version `current` points at, and whether it is the started-from bundle, new. */
export interface Seeded {
  current: Slot;
  /** A bundle the updater had not seen before became current (first start, or an admin installed a new one). */
  installed: boolean;
}

/**
 * Makes sure versions/ holds the bundle at `bundle` (the file the updater was started from) and
 * `current` points somewhere. On the first start, and whenever the started-from bundle changed
 * since the last start (`skippy install` wrote a new one), that bundle is staged and made current
 * (the one before it becomes previous). Otherwise `current` stays where the updates left it.
 */
export async function seedFromBundle(dir: string, bundle: string): Promise<Seeded> {
  const bytes = await readFile(bundle);
  const version = bundleVersionOf(bytes);
  if (!version) {
    throw new Error(
      `${bundle} states no version (no "// skippy-bundle-version:" line): skippy updater runs from a bundle (npm run bundle:agent)`,
    );
  }
  const sha256 = await sha256File(bundle);
  const manifest: BundleManifest = { version, sha256, size: bytes.length, signature: "" };
  const installedPath = join(dir, "installed.json");
  const installed = await readFile(installedPath, "utf8")
    .then((t) => (JSON.parse(t) as InstalledFile).sha256)
    .catch(() => undefined);
  const current = await currentSlot(dir);
  if (current && installed === sha256) return { current, installed: false };
  const name = (await readManifest(dir, versionDirName(version, sha256)))
    ? versionDirName(version, sha256)
    : await stageBundle(dir, bytes, manifest);
  if (current && current.dir !== name) await switchVersionLink(dir, "previous", current.dir);
  if (current?.dir !== name) await switchVersionLink(dir, "current", name);
  await writeJsonWhole(installedPath, { sha256 } satisfies InstalledFile);
  return { current: { version, sha256, dir: name }, installed: current?.dir !== name };
}

/** The version `current` points at, from its manifest; undefined when there is none or it is unreadable. */
export async function currentSlot(dir: string): Promise<Slot | undefined> {
  const name = await readVersionLink(dir, "current");
  if (!name) return undefined;
  const m = await readManifest(dir, name).catch(() => undefined);
  if (!m || versionDirName(m.version, m.sha256) !== name) return undefined;
  return { version: m.version, sha256: m.sha256, dir: name };
}

/**
 * Checks a staged bundle before the switch: its manifest names it, and the file has the size,
 * SHA-256 and stated version the manifest says. Returns why not, or undefined when it is fine.
 * (The signature was checked by the agent that staged it, with the controller's key.)
 */
export async function checkStaged(dir: string, target: Slot): Promise<string | undefined> {
  const m = await readManifest(dir, target.dir).catch((e: Error) => e);
  if (m === undefined) return `versions/${target.dir}/manifest.json is missing`;
  if (m instanceof Error) return m.message;
  if (m.version !== target.version || m.sha256 !== target.sha256)
    return `the manifest names ${m.version} ${m.sha256}, not the requested bundle`;
  const file = bundlePathOf(dir, target.dir);
  const info = await stat(file).catch(() => undefined);
  if (!info?.isFile()) return `versions/${target.dir}/skippy.mjs is missing`;
  if (info.size !== m.size) return `the bundle has ${info.size} bytes, the manifest says ${m.size}`;
  const sha = await sha256File(file);
  if (sha !== m.sha256) return `the bundle's SHA-256 is ${sha}, the manifest says ${m.sha256}`;
  const head = await readFile(file).then((b) => b.subarray(0, 1024));
  const stated = bundleVersionOf(head);
  if (stated !== m.version) return `the bundle states version ${stated ?? "none"}, the manifest says ${m.version}`;
  return undefined;
}

/** How many of the newest version directories pruning keeps, besides the ones in use. */
export const KEEP_NEWEST = 3;

/**
 * Removes the version directories nothing needs: keeps `keep` (the machine's running, previous and
 * target), what the `current` and `previous` links and a waiting request.json name, and the
 * `newest` most recently changed (a bundle being staged right now is among them). Returns the removed.
 */
export async function pruneVersions(dir: string, keep: Iterable<string>, newest = KEEP_NEWEST): Promise<string[]> {
  const kept = new Set(keep);
  for (const link of ["current", "previous"] as const) {
    const name = await readVersionLink(dir, link).catch(() => undefined);
    if (name) kept.add(name);
  }
  const pending = await readUpdateRequest(dir).catch(() => undefined);
  if (pending) kept.add(pending.dir);
  const versions = updaterPaths(dir).versions;
  const entries = (await readdir(versions, { withFileTypes: true })).filter((e) => e.isDirectory() && !e.name.startsWith("."));
  const dirs = await Promise.all(
    entries.map(async (e) => ({ name: e.name, mtime: (await stat(join(versions, e.name)).catch(() => undefined))?.mtimeMs ?? Infinity })),
  );
  dirs.sort((a, b) => b.mtime - a.mtime);
  const removed: string[] = [];
  for (const [i, d] of dirs.entries()) {
    if (i < newest || kept.has(d.name)) continue;
    await rm(join(versions, d.name), { recursive: true, force: true });
    removed.push(d.name);
  }
  return removed;
}
