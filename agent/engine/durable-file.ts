// Files the agent must never leave half-written (state records, restore points, stickers,
// uploads, units): written to a temporary file beside the target, fsynced, renamed over it, and
// the directory fsynced, so a reader or the agent after a crash sees the old content or the new,
// never a mix.
import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { access, mkdir, open, readdir, realpath, rename, unlink } from "node:fs/promises";
import { basename, dirname, join, sep } from "node:path";

export interface AtomicWriteOptions {
  /** Permission bits of the file (default 0600). */
  mode?: number;
  uid?: number;
  gid?: number;
  /** The file's directory must still resolve inside this (real) path when the file appears. */
  within?: string;
}

/** The directory moved out of `within` while the file was being written; nothing was written. */
export class OutsideBaseError extends Error {}

/**
 * Replaces `path` with `data` (creating its directory): temp file (exclusive, never through a
 * symlink), owner, mode, fsync, rename, fsync of the directory.
 */
export async function writeFileAtomic(path: string, data: Uint8Array | string, opts: AtomicWriteOptions = {}): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  const fh = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    await fh.writeFile(data);
    // chown before chmod: changing the owner clears set-id bits.
    if (opts.uid !== undefined || opts.gid !== undefined) await fh.chown(opts.uid ?? -1, opts.gid ?? -1);
    await fh.chmod(opts.mode ?? 0o600);
    await fh.sync();
    await fh.close();
    // A process that can write under the base (a container with it bind-mounted) could have
    // swapped a parent for a symlink since the caller checked it: checked again right before the
    // rename, which is the step that makes the file appear.
    if (opts.within !== undefined && !isInside(opts.within, await realpath(dir))) {
      throw new OutsideBaseError(`${path}: a directory on the way was replaced by a link out of ${opts.within} while writing`);
    }
    await rename(tmp, path);
  } catch (e) {
    await fh.close().catch(() => undefined);
    await unlink(tmp).catch(() => undefined);
    throw e;
  }
  await syncDir(dir);
}

/** Makes a rename or a new entry in `dir` durable. */
export async function syncDir(dir: string): Promise<void> {
  const d = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

/** True when `path` is `base` or lies under it. */
export function isInside(base: string, path: string): boolean {
  return path === base || path.startsWith(base.endsWith(sep) ? base : base + sep);
}

// writeFileAtomic's temp files: `.<name>.<12 hex>.tmp`.
const TEMP = /^\..+\.[0-9a-f]{12}\.tmp$/;

/** Removes temp files a crash left in `dir` (they may hold secrets, e.g. a restore point's env). */
export async function removeStaleTemps(dir: string): Promise<void> {
  const names = await readdir(dir).catch(() => [] as string[]);
  await Promise.all(names.filter((n) => TEMP.test(n)).map((n) => unlink(join(dir, n)).catch(() => undefined)));
}

/** True when something exists at `p` (a dangling link counts as absent). */
export async function pathExists(p: string): Promise<boolean> {
  try {
    await access(p);
    return true;
  } catch {
    return false;
  }
}
