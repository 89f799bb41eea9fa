// Files under <dataDir>/tls/. Every write is temp file + fsync + rename + directory fsync, so a
// crash leaves either the old file or the new one, never a torn key. Keys are created 0600 from
// the first byte (the temp file already has the final mode) inside a 0700 directory. The store's
// start-up repair leaves tls/ alone, so leftover temp files are removed here.
import { randomBytes } from "node:crypto";
import { chmod, mkdir, open, readdir, readFile, rename, stat, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { fsyncDir } from "../store/file/dir-fsync.js";

const TEMP_FILE = /^\..+\.[0-9a-f]{12}\.tmp$/;

/** Creates `dir` (and parents) and makes it 0700; the new entry is fsynced into its parent. */
export async function ensurePrivateDir(dir: string): Promise<void> {
  // Parents made here (a first start's data directory) are private from the start: made open,
  // the store would find the data directory readable by others at its open and tighten it.
  await mkdir(dirname(dir), { recursive: true, mode: 0o700 });
  let created = false;
  try {
    await mkdir(dir, { mode: 0o700 });
    created = true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
  }
  // mkdir's mode is filtered by the umask and an existing directory may be looser: set it.
  if (((await stat(dir)).mode & 0o777) !== 0o700) await chmod(dir, 0o700);
  if (created) await fsyncDir(dirname(dir));
}

/** Deletes temp files left in `dir` by a write that crashed before its rename. */
export async function removeTempFiles(dir: string): Promise<string[]> {
  const removed: string[] = [];
  for (const name of await readdir(dir)) {
    if (!TEMP_FILE.test(name)) continue;
    await unlink(join(dir, name)).catch(() => undefined);
    removed.push(name);
  }
  return removed;
}

/** Replaces `path` with `data` atomically and durably; the file has `mode` from creation. */
export async function writeFileAtomic(path: string, data: string | Buffer, mode: number): Promise<void> {
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  const fh = await open(tmp, "wx", mode);
  try {
    await fh.writeFile(data);
    // The umask may have removed bits from a public file's mode; keys only ever lose bits.
    await fh.chmod(mode);
    await fh.sync();
    await fh.close();
    await rename(tmp, path);
  } catch (e) {
    await fh.close().catch(() => undefined);
    await unlink(tmp).catch(() => undefined);
    throw e;
  }
  await fsyncDir(dir);
}

/** The file's text, or undefined if it does not exist. Other read errors are thrown. */
export async function readIfExists(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
}

/** Narrows a key file's mode to 0600; true if it had to be changed. */
export async function tightenKeyMode(path: string): Promise<boolean> {
  if (((await stat(path)).mode & 0o077) === 0) return false;
  await chmod(path, 0o600);
  return true;
}
