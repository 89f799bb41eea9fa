// A module's installed versions and which one is active. A version is installed by filling a
// hidden temp directory and renaming it into place, so a half-installed version never appears
// under its name; its sha256 and launch command are written beside it first. The active version
// is the symlink <workDir>/active/<module> -> ../versions/<module>/<version>, switched by creating
// a temp symlink and renaming it over the old one (rename is atomic: a reader sees one or the
// other, never a missing link).
import type { Dirent } from "node:fs";
import { lstat, mkdir, readdir, readlink, rename, rm, symlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { VERSION_PATTERN, modulePaths, readJson, syncDir, tempSuffix, writeFileAtomic } from "./layout.js";

/** What the agent recorded about an installed version. */
export interface VersionMeta {
  sha256: string;
  /** The command of the last deploy of this version: argv[0] relative to its directory. */
  argv: string[];
  env: Record<string, string>;
  installedAt: string;
}

/** The directory of an installed version. */
export function versionDir(workDir: string, module: string, version: string): string {
  return join(modulePaths(workDir, module).versions, version);
}

function metaPath(workDir: string, module: string, version: string): string {
  return join(modulePaths(workDir, module).versions, `.${version}.json`);
}

/** The installed versions of a module, lowest first. */
export async function installedVersions(workDir: string, module: string): Promise<string[]> {
  let entries: Dirent[];
  try {
    entries = await readdir(modulePaths(workDir, module).versions, { withFileTypes: true });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw e;
  }
  return entries
    .filter((e) => e.isDirectory() && VERSION_PATTERN.test(e.name))
    .map((e) => e.name)
    .sort(compareVersions);
}

/** Whether `version` of `module` is installed. */
export async function isInstalled(workDir: string, module: string, version: string): Promise<boolean> {
  return (await installedVersions(workDir, module)).includes(version);
}

/** The recorded sha256 and command of an installed version; undefined when it has none. */
export function readVersionMeta(workDir: string, module: string, version: string): Promise<VersionMeta | undefined> {
  return readJson<VersionMeta>(metaPath(workDir, module, version));
}

/** Records a version's sha256 and command (a redeploy may change the command, not the files). */
export function writeVersionMeta(workDir: string, module: string, version: string, meta: VersionMeta): Promise<void> {
  return writeFileAtomic(metaPath(workDir, module, version), `${JSON.stringify(meta, null, 2)}\n`);
}

/**
 * A fresh hidden work directory beside the module's versions (same file system, so the tree
 * unpacked in it can be renamed into place). The caller holds the module's lock and removes the
 * directory when done.
 */
export async function makeStaging(workDir: string, module: string): Promise<string> {
  const parent = modulePaths(workDir, module).versions;
  await mkdir(parent, { recursive: true });
  // Callers hold the module's lock, so any staging directory left here is from a crashed install.
  for (const name of await readdir(parent)) if (name.startsWith(".tmp-")) await rm(join(parent, name), { recursive: true, force: true });
  const dir = join(parent, `.tmp-${tempSuffix()}`);
  await mkdir(dir, { mode: 0o700 });
  return dir;
}

/** Installs `tree` (inside a staging directory) as `version`: its metadata first, then the rename. */
export async function commitVersion(workDir: string, module: string, version: string, tree: string, meta: VersionMeta): Promise<void> {
  await writeVersionMeta(workDir, module, version, meta);
  await rename(tree, versionDir(workDir, module, version));
  await syncDir(modulePaths(workDir, module).versions);
}

/** The version the active symlink points at, or "" when the module has none. */
export async function activeVersion(workDir: string, module: string): Promise<string> {
  try {
    const v = basename(await readlink(modulePaths(workDir, module).active));
    return VERSION_PATTERN.test(v) ? v : "";
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "EINVAL") return "";
    throw e;
  }
}

/** Points the module's active symlink at `version` in one atomic step. */
export async function switchActive(workDir: string, module: string, version: string): Promise<void> {
  const link = modulePaths(workDir, module).active;
  await mkdir(dirname(link), { recursive: true });
  const tmp = join(dirname(link), `.${module}.${tempSuffix()}.tmp`);
  await symlink(join("..", "versions", module, version), tmp);
  try {
    await rename(tmp, link);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  await syncDir(dirname(link));
}

/** Whether the module has an active symlink (it has been deployed at least once). */
export async function hasActiveLink(workDir: string, module: string): Promise<boolean> {
  return lstat(modulePaths(workDir, module).active).then(
    (s) => s.isSymbolicLink(),
    () => false,
  );
}

/**
 * Orders versions the way people number them: dotted parts compare numerically when both are
 * numbers ("1.10" > "1.9"), a leading "v" is ignored, a pre-release ("2.0.0-rc1") sorts before its
 * release, and "+build" metadata only breaks ties. Anything else falls back to string order.
 */
export function compareVersions(a: string, b: string): number {
  const pa = parse(a);
  const pb = parse(b);
  const main = compareParts(pa.main, pb.main, true);
  if (main !== 0) return main;
  if (pa.pre.length === 0 || pb.pre.length === 0) {
    if (pa.pre.length !== pb.pre.length) return pa.pre.length === 0 ? 1 : -1;
  } else {
    const pre = compareParts(pa.pre, pb.pre, false);
    if (pre !== 0) return pre;
  }
  return a < b ? -1 : a > b ? 1 : 0;
}

function parse(v: string): { main: string[]; pre: string[] } {
  const s = v.replace(/^v(?=\d)/i, "").split("+")[0]!;
  const dash = s.indexOf("-");
  const main = dash < 0 ? s : s.slice(0, dash);
  const pre = dash < 0 ? "" : s.slice(dash + 1);
  return { main: main.split("."), pre: pre === "" ? [] : pre.split(".") };
}

function compareParts(a: string[], b: string[], padWithZero: boolean): number {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a[i] ?? (padWithZero ? "0" : undefined);
    const y = b[i] ?? (padWithZero ? "0" : undefined);
    if (x === undefined || y === undefined) return x === undefined ? -1 : 1;
    const c = compareIdent(x, y);
    if (c !== 0) return c;
  }
  return 0;
}

function compareIdent(x: string, y: string): number {
  const nx = /^\d+$/.test(x);
  const ny = /^\d+$/.test(y);
  if (nx && ny) {
    const d = BigInt(x) - BigInt(y);
    return d === 0n ? 0 : d < 0n ? -1 : 1;
  }
  if (nx !== ny) return nx ? -1 : 1;
  return x < y ? -1 : x > y ? 1 : 0;
}
