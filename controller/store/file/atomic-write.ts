// Durable file operations for the file store. A write is acknowledged only when it would survive
// a crash or power loss. Once the store is open, writes go through the write-ahead log
// (write-ahead-log.ts): the operation is appended and group-committed, then the record file is
// replaced (temp file renamed over it, atomic on POSIX) without an fsync of its own; the log's
// checkpoint makes the files durable later, and open() replays what a crash left. Files larger
// than DIRECT_BYTES (summaries, big snapshots), and every write before the log is open, take the
// direct way: the temp file is fsynced, renamed, and the directory fsynced (directory fsyncs go
// through DirFsyncBatcher so concurrent writers share them).
import { randomBytes } from "node:crypto";
import { mkdir, rename, unlink } from "node:fs/promises";
import { closeFd, fsyncFd, openFd, writeAll } from "./fd-ops.js";
import { basename, dirname, join, sep } from "node:path";
import { DirFsyncBatcher } from "./dir-fsync.js";
import { crashPoint } from "../../../common/crash-points.js";
import { lastPerPath, readSegments, removeSegments, syncFiles, WriteAheadLog } from "./write-ahead-log.js";

/** Files larger than this are written and fsynced directly instead of through the log. */
export const DIRECT_BYTES = 256 * 1024;

/** Store files hold service env values and token hashes: readable by the controller's user only. */
export const FILE_MODE = 0o600;
/** Store directories: the controller's user only. */
export const DIR_MODE = 0o700;

/** Temp files are hidden and end in .tmp so open() can find and remove leftovers. */
export const TEMP_FILE_PATTERN = /^\..+\.[0-9a-f]{12}\.tmp$/;

/** One operation of DurableFs.commit: a file's new text, or its removal. */
export type FileOp = { path: string; data: string } | { op: "unlink"; path: string };

/** Atomic, durable writes, unlinks and renames with group-committed directory fsyncs. */
export class DurableFs {
  readonly dirSync = new DirFsyncBatcher();
  // Directories known to exist durably; a new directory needs its parent fsynced too.
  private readonly knownDirs = new Map<string, Promise<void>>();

  private log: WriteAheadLog | undefined;

  /** `root` is the data directory; ensureDir never walks above it. `segmentBytes`: see WriteAheadLog. */
  constructor(
    private readonly root: string,
    private readonly segmentBytes?: number,
  ) {}

  /**
   * Replays what the log holds (a crash left it: the last operation per path, files synced, the
   * segments removed), then starts logging writes. Returns how many paths were replayed and
   * whether a segment ended in a torn frame (an append never acknowledged).
   */
  async openLog(): Promise<{ replayed: number; torn: boolean }> {
    const segments = await readSegments(this.root);
    const last = lastPerPath(segments.flatMap((s) => s.ops));
    for (const op of last.values()) {
      if (op.op === "put") {
        await this.ensureDir(dirname(op.path));
        await replaceFile(op.path, op.data, false);
      } else if (op.op === "unlink") await unlinkAbsentOk(op.path);
    }
    await syncFiles(this.root, new Set(last.keys()));
    await removeSegments(
      this.root,
      segments.map((s) => s.n),
    );
    const log = new WriteAheadLog(this.root, this.segmentBytes);
    await this.ensureDir(log.dir);
    await log.start(segments.at(-1)?.n ?? 0);
    this.log = log;
    return { replayed: last.size, torn: segments.some((s) => s.torn) };
  }

  /** Checkpoints and stops the log (every write must have settled): wal/ is left empty. */
  async closeLog(): Promise<void> {
    const log = this.log;
    this.log = undefined;
    await log?.close();
  }

  /** fdatasync(2) calls on the log so far (for tests and benchmarks). */
  get logSyncs(): number {
    return this.log?.syncCount ?? 0;
  }

  /** Replaces `path` with `data` atomically; resolves once that is durable (logged, or fsynced). */
  async writeFile(path: string, data: string): Promise<void> {
    const dir = dirname(path);
    await this.ensureDir(dir);
    const bytes = Buffer.from(data, "utf8");
    const log = this.log;
    if (!log || bytes.length > DIRECT_BYTES) {
      await replaceFile(path, bytes, true);
      await this.dirSync.sync(dir);
      // Logged puts of this path from before are older than what the file now holds.
      if (log) (await log.append({ op: "synced", path })).release();
      return;
    }
    const ticket = await log.append({ op: "put", path, data: bytes });
    try {
      crashPoint("store.after-log-append");
      await replaceFile(path, bytes, false);
    } finally {
      ticket.release();
    }
  }

  /**
   * Replaces each `put` and removes each `unlink` of `ops`, in order, as one step: logged, they
   * take one group append, so a crash keeps all of them or none (a record and the events of its
   * change). Every file goes through the log whatever its size; before the log is open, each is
   * written directly, one after the other.
   */
  async commit(ops: readonly FileOp[]): Promise<void> {
    const log = this.log;
    await Promise.all([...new Set(ops.flatMap((o) => ("data" in o ? [dirname(o.path)] : [])))].map((d) => this.ensureDir(d)));
    if (!log) {
      for (const o of ops) await ("data" in o ? this.writeFile(o.path, o.data) : this.unlink(o.path));
      return;
    }
    if (ops.length === 0) return;
    const logged = ops.map((o) => ("data" in o ? { op: "put" as const, path: o.path, data: Buffer.from(o.data, "utf8") } : o));
    const ticket = await log.append(...logged);
    try {
      crashPoint("store.after-log-append");
      await Promise.all(logged.map((o) => (o.op === "put" ? replaceFile(o.path, o.data, false) : undefined)));
      for (const o of logged) if (o.op === "unlink") await unlinkAbsentOk(o.path);
    } finally {
      ticket.release();
    }
  }

  /**
   * Writes `data` at `to`, then removes `from` (a record moving between directories); resolves
   * once both are durable. Logged, both take one append; a crash between the two files leaves
   * both (the caller's open() resolves that), never neither.
   */
  async move(from: string, to: string, data: string): Promise<void> {
    const bytes = Buffer.from(data, "utf8");
    const log = this.log;
    if (!log || bytes.length > DIRECT_BYTES) {
      await this.writeFile(to, data);
      return this.unlink(from);
    }
    await this.ensureDir(dirname(to));
    const ticket = await log.append({ op: "put", path: to, data: bytes }, { op: "unlink", path: from });
    try {
      crashPoint("store.after-log-append");
      await replaceFile(to, bytes, false);
      await unlinkAbsentOk(from);
    } finally {
      ticket.release();
    }
  }

  /** Removes `path` (absent is fine) and resolves once that is durable. */
  async unlink(path: string): Promise<void> {
    const log = this.log;
    if (!log) {
      await unlinkAbsentOk(path);
      return this.dirSync.sync(dirname(path));
    }
    const ticket = await log.append({ op: "unlink", path });
    try {
      await unlinkAbsentOk(path);
    } finally {
      ticket.release();
    }
  }

  /** Moves `from` to `to` (same file system) durably in both directories. */
  async rename(from: string, to: string): Promise<void> {
    await this.ensureDir(dirname(to));
    await rename(from, to);
    await Promise.all([this.dirSync.sync(dirname(to)), this.dirSync.sync(dirname(from))]);
    // A replay must not put back what was moved away (as the files stand now: no fsync needed).
    if (this.log) (await this.log.append({ op: "synced", path: from })).release();
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

// Writes `data` to a temp file beside `path` and renames it over `path` (readers see the old or
// the new file, never a part); `sync` fsyncs the temp file first (the caller fsyncs the
// directory). Through the thread pool, not in synchronous calls: on ext4 a rename over an existing
// file starts the new file's writeback, and creating or renaming a file may wait for the
// journal, so the main thread would stall on the disk.
async function replaceFile(path: string, data: Buffer, sync: boolean): Promise<void> {
  const tmp = tempPath(path);
  const fd = await openFd(tmp, "wx", FILE_MODE);
  try {
    await writeAll(fd, data);
    if (sync) await fsyncFd(fd);
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
}

// A hidden temp name beside `path` that TEMP_FILE_PATTERN matches: unique per process (a random
// prefix) and per write (a counter), without a call for random bytes each time.
const TEMP_PREFIX = randomBytes(3).toString("hex");
let tempCounter = 0;
function tempPath(path: string): string {
  tempCounter = (tempCounter + 1) % 0x1000000;
  return join(dirname(path), `.${basename(path)}.${TEMP_PREFIX}${tempCounter.toString(16).padStart(6, "0")}.tmp`);
}

async function unlinkAbsentOk(path: string): Promise<void> {
  try {
    await unlink(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
  }
}
