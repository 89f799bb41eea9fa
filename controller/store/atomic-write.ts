// Durable file operations for the file store. A write is acknowledged only when it would survive
// a crash or power loss: the data is written to a temp file in the target directory, the file is
// fsynced, renamed over the target (atomic on POSIX), and the directory is fsynced so the rename
// itself is on disk. Directory fsyncs go through DirFsyncBatcher so concurrent writers share them.
import { randomBytes } from "node:crypto";
import { mkdir, rename, unlink } from "node:fs/promises";
import { closeFd, fsyncFd, openFd, writeAll } from "./fd-ops.js";
import { basename, dirname, join, sep } from "node:path";
import { DirFsyncBatcher } from "./dir-fsync.js";
import { crashPoint } from "../../common/crash-points.js";

/** Store files hold service env values and token hashes: readable by the controller's user only. */
export const FILE_MODE = 0o600;
/** Store directories: the controller's user only. */
export const DIR_MODE = 0o700;

/** Temp files are hidden and end in .tmp so open() can find and remove leftovers. */
export const TEMP_FILE_PATTERN = /^\..+\.[0-9a-f]{12}\.tmp$/;

/** Atomic, durable writes, unlinks and renames with group-committed directory fsyncs. */
export class DurableFs {
  readonly dirSync = new DirFsyncBatcher();
  // Directories known to exist durably; a new directory needs its parent fsynced too.
  private readonly knownDirs = new Map<string, Promise<void>>();

  /** `root` is the data directory; ensureDir never walks above it. */
  constructor(private readonly root: string) {}

  /** Replaces `path` with `data` atomically; resolves after the directory fsync. */
  async writeFile(path: string, data: string): Promise<void> {
    const dir = dirname(path);
    await this.ensureDir(dir);
    const tmp = join(dir, `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
    const fd = await openFd(tmp, "wx", FILE_MODE);
    try {
      await writeAll(fd, Buffer.from(data, "utf8"));
      await fsyncFd(fd);
    } catch (e) {
      await closeFd(fd).catch(() => undefined);
      await unlink(tmp).catch(() => undefined);
      throw e;
    }
    await closeFd(fd);
    crashPoint("store.after-write");
    try {
      await rename(tmp, path);
    } catch (e) {
      await unlink(tmp).catch(() => undefined);
      throw e;
    }
    crashPoint("store.after-rename");
    await this.dirSync.sync(dir);
  }

  /** Removes `path` (absent is fine) and resolves after the directory fsync. */
  async unlink(path: string): Promise<void> {
    try {
      await unlink(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    await this.dirSync.sync(dirname(path));
  }

  /** Moves `from` to `to` (same file system) durably in both directories. */
  async rename(from: string, to: string): Promise<void> {
    await this.ensureDir(dirname(to));
    await rename(from, to);
    await Promise.all([this.dirSync.sync(dirname(to)), this.dirSync.sync(dirname(from))]);
  }

  /**
   * Creates `dir` (and missing parents) durably: each directory this call creates has its parent
   * fsynced, otherwise a file acknowledged inside a brand-new directory could vanish with it.
   */
  ensureDir(dir: string): Promise<void> {
    let p = this.knownDirs.get(dir);
    if (!p) {
      p = this.createDir(dir);
      this.knownDirs.set(dir, p);
      p.catch(() => this.knownDirs.delete(dir));
    }
    return p;
  }

  private async createDir(dir: string): Promise<void> {
    if (dir === this.root || !dir.startsWith(this.root + sep)) {
      // The root may be several levels deep and new: make each directory created here durable.
      const first = await mkdir(dir, { recursive: true, mode: DIR_MODE });
      if (first === undefined) return;
      for (let d = dir; d.length >= first.length && d !== dirname(d); d = dirname(d)) await this.dirSync.sync(dirname(d));
      return;
    }
    const parent = dirname(dir);
    await this.ensureDir(parent);
    try {
      await mkdir(dir, { mode: DIR_MODE });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    // Also after EEXIST: a previous process may have crashed between its mkdir and this fsync.
    await this.dirSync.sync(parent);
  }
}
