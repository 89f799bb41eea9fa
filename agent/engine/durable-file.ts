// Files the agent must never leave half-written (state records, restore points, units): written
// to a temporary file beside the target, fsynced, renamed over it, and the directory fsynced, so
// a reader or the agent after a crash sees the old content or the new, never a mix.
import { randomBytes } from "node:crypto";
import { mkdir, open, readdir, rename, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/**
 * Replaces `path` with `data` so a reader (or the agent after a crash) sees the old or the new
 * content, never half of it: temp file, fsync, rename, fsync of the directory.
 */
export async function writeFileAtomic(path: string, data: string, mode = 0o600): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  const fh = await open(tmp, "wx", mode);
  try {
    await fh.writeFile(data, "utf8");
    await fh.sync();
  } catch (e) {
    await fh.close();
    await unlink(tmp).catch(() => undefined);
    throw e;
  }
  await fh.close();
  await rename(tmp, path);
  await syncDir(dir);
}

/** Makes a rename or a new entry in `dir` durable. */
export async function syncDir(dir: string): Promise<void> {
  const d = await open(dir, "r");
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

// writeFileAtomic's temp files: `.<name>.<12 hex>.tmp`.
const TEMP = /^\..+\.[0-9a-f]{12}\.tmp$/;

/** Removes temp files a crash left in `dir` (they may hold secrets, e.g. a restore point's env). */
export async function removeStaleTemps(dir: string): Promise<void> {
  const names = await readdir(dir).catch(() => [] as string[]);
  await Promise.all(names.filter((n) => TEMP.test(n)).map((n) => unlink(join(dir, n)).catch(() => undefined)));
}
