// The file store's write-ahead log (wal/ under the data directory): a recovery aid, not a second
// copy of the truth. A record write is acknowledged once its operation ("put this text at this
// path", "remove this path") is appended to the log and the log is fdatasynced; its record file is
// written afterwards without an fsync of its own. Appends group-commit:
//
//   appends queue up -> one write + fdatasync takes the whole queue -> it resolves them all
//
// and appends that arrive while an fdatasync runs wait for the next one, so concurrent writers
// share one fsync instead of paying two each (file and directory).
//
// A segment grows in steps of zeros (EXTEND_BYTES) written ahead of the appends, which overwrite
// them: an fdatasync of an append then flushes data alone, without a journal commit for the
// file's new size, and so does not hold up the metadata of every other file write (temp files,
// renames) behind the file system's journal.
//
// A segment (wal/<n>.log) that grew past SEGMENT_BYTES, or whose first append is MAX_AGE_MS old,
// is closed and a new one started (so the log holds a write's text for seconds, not until 8 MiB of
// others follow: a secret a record no longer holds does not linger in it); once the
// record files of every operation in the closed segment are written, the file system is synced
// (syncfs through `sync -f`, else an fsync of each file and directory the segment touched) and
// the segment deleted. open() replays what a crash left: the last operation per path, over
// every segment in order. The log ends at the first zero length (space written ahead), or at a
// torn tail (a frame whose length or CRC does not check): that append was never acknowledged. close() checkpoints, leaving wal/ empty.
//
// Frame: u32 length of the rest | u32 crc32 of the rest | u8 op | u16 path length | path | data.
// An append of several operations is one group frame (op 4, no path), whose data is their frames:
// one CRC covers them all, so a crash keeps all of them or none (a record and its events are one
// step: store.ts, "Changes and their events" in ARCHITECTURE.md). Logs written before groups
// existed hold ops 1-3 only and replay as they did.
import { execFile } from "node:child_process";
import fs from "node:fs";
import { readdir, readFile, unlink } from "node:fs/promises";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { promisify } from "node:util";
import { crc32 } from "node:zlib";
import { fsyncDir } from "./dir-fsync.js";
import { closeFd, fsyncFd, openFd } from "./fd-ops.js";

/** What a logged operation does to its path. */
export type LogOp =
  | { op: "put"; path: string; data: Buffer }
  | { op: "unlink"; path: string }
  // The file at `path` was written and fsynced directly (a large file): earlier logged puts of it are stale.
  | { op: "synced"; path: string };

const OP_CODES = { put: 1, unlink: 2, synced: 3 } as const;
const OP_NAMES = ["", "put", "unlink", "synced"] as const;
/** A group frame: its data is the frames of several operations, kept or lost together. */
const GROUP_CODE = 4;
/** A segment past this many bytes is closed and checkpointed. */
export const SEGMENT_BYTES = 8 * 1024 * 1024;
const SEGMENT_PATTERN = /^(\d{1,15})\.log$/;
/** A segment is closed and checkpointed this long after its first append, however small. */
export const MAX_AGE_MS = 2000;
/** A segment's written-ahead zeros grow by this much at a time. */
const EXTEND_BYTES = 1024 * 1024;
const ZEROS = Buffer.alloc(64 * 1024);
const fdatasync = promisify(fs.fdatasync);
const write = promisify(fs.write);
const run = promisify(execFile);

interface Pending {
  frame: Buffer;
  paths: string[];
  resolve: (segment: Segment) => void;
  reject: (e: unknown) => void;
}

// One log file, and what its operations still owe before it can be deleted.
interface Segment {
  n: number;
  fd: number;
  /** Bytes of frames written. */
  size: number;
  /** Bytes of the file (frames, then zeros written ahead). */
  allocated: number;
  /** Record files of its operations not yet written (see release()). */
  unwritten: number;
  written: (() => void) | undefined;
  /** Paths its operations touched (the fallback checkpoint fsyncs them). */
  paths: Set<string>;
}

/** An appended operation: release() once its record file is written (or its write gave up). */
export interface LogTicket {
  release(): void;
}

/** The group-committed, checkpointed operation log of one data directory. */
export class WriteAheadLog {
  private segment: Segment | undefined;
  private queue: Pending[] = [];
  private flushing = false;
  // The flush under way (close() waits for it).
  private flushed: Promise<void> = Promise.resolve();
  private broken: unknown;
  private checkpoints: Promise<void> = Promise.resolve();
  // Set when the current segment is MAX_AGE_MS old: the flush loop rotates it at its next turn.
  private rotateDue = false;
  private ageTimer: NodeJS.Timeout | undefined;
  /** fdatasync(2) calls on the log (for tests and benchmarks). */
  syncCount = 0;

  /** `root` is the data directory; the log lives in root/wal. */
  constructor(
    readonly root: string,
    private readonly segmentBytes = SEGMENT_BYTES,
    private readonly maxAgeMs = MAX_AGE_MS,
  ) {}

  get dir(): string {
    return join(this.root, "wal");
  }

  /** Starts a new segment after `replayed` (the highest segment number found at open). */
  async start(after: number): Promise<void> {
    this.segment = await this.newSegment(after + 1);
  }

  /**
   * Appends `ops` (in one batch: a torn tail can only cut off the last ones); resolves once they
   * are durable in the log, with the ticket that the writes of their record files release.
   */
  async append(...ops: LogOp[]): Promise<LogTicket> {
    if (this.broken !== undefined) throw this.broken;
    if (!this.segment) throw new Error("the write-ahead log is not started");
    const frames = ops.map((op) => encodeFrame(op, this.relative(op.path)));
    const frame = frames.length === 1 ? frames[0]! : groupFrame(frames);
    const segment = await new Promise<Segment>((resolve, reject) => {
      this.queue.push({ frame, paths: ops.map((op) => op.path), resolve, reject });
      if (!this.flushing) {
        this.flushing = true;
        this.flushed = this.flush();
      }
    });
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        if (--segment.unwritten === 0) segment.written?.();
      },
    };
  }

  // Writes and syncs queued frames, a batch at a time, until the queue is empty; rotates a
  // segment that is due (rotation runs here only, never beside an append being written).
  private async flush(): Promise<void> {
    while (this.queue.length > 0 || this.rotateDue) {
      if (this.rotateDue) {
        this.rotateDue = false;
        if (this.broken === undefined && this.segment && this.segment.size > 0) {
          try {
            await this.rotate();
          } catch (e) {
            this.broken ??= e;
          }
        }
        continue;
      }
      const batch = this.queue;
      this.queue = [];
      try {
        if (this.broken !== undefined) throw this.broken;
        const seg = this.segment!;
        const frames = batch.map((p) => p.frame);
        let bytes = 0;
        for (const f of frames) bytes += f.length;
        if (seg.size + bytes > seg.allocated) await extend(seg, bytes);
        // Into space already written: page-cache copies, done at once.
        let at = seg.size;
        for (const f of frames) {
          for (let off = 0; off < f.length; ) off += fs.writeSync(seg.fd, f, off, f.length - off, at + off);
          at += f.length;
        }
        await fdatasync(seg.fd);
        this.syncCount++;
        if (seg.size === 0) this.ageOut(seg);
        seg.size += bytes;
        // Counted before anyone hears of it, so a checkpoint waits for every record file of the segment.
        seg.unwritten += batch.length;
        for (const p of batch) {
          for (const path of p.paths) seg.paths.add(path);
          p.resolve(seg);
        }
        if (seg.size >= this.segmentBytes) await this.rotate();
      } catch (e) {
        // A failed write or fsync leaves the log's tail unknown: no later append may be acknowledged.
        this.broken ??= e;
        for (const p of batch) p.reject(e);
      }
    }
    // In the same step as the last look at the queue: an append from now on starts a flush.
    this.flushing = false;
  }

  // Has `seg` rotated MAX_AGE_MS after its first append, unless it was rotated before then.
  private ageOut(seg: Segment): void {
    if (this.ageTimer) clearTimeout(this.ageTimer);
    this.ageTimer = setTimeout(() => {
      this.ageTimer = undefined;
      if (this.segment !== seg) return;
      this.rotateDue = true;
      if (!this.flushing) {
        this.flushing = true;
        this.flushed = this.flush();
      }
    }, this.maxAgeMs);
    this.ageTimer.unref();
  }

  // Closes the current segment for appends and checkpoints it in the background.
  private async rotate(): Promise<void> {
    const old = this.segment!;
    this.segment = await this.newSegment(old.n + 1);
    const next = this.checkpoints.then(() => this.checkpoint([old]));
    this.checkpoints = next.catch(() => undefined);
    // A failed checkpoint keeps its segment: a later one (or the next open) replays it.
    next.catch(() => undefined);
  }

  /** Checkpoints every segment and leaves the log empty (close()). Appends must have stopped. */
  async close(): Promise<void> {
    if (this.ageTimer) clearTimeout(this.ageTimer);
    this.ageTimer = undefined;
    await this.flushed;
    const seg = this.segment;
    this.segment = undefined;
    await this.checkpoints;
    if (seg) await this.checkpoint([seg]);
  }

  // Once the segments' record files are written, makes them durable and deletes the segments.
  private async checkpoint(segments: Segment[]): Promise<void> {
    await Promise.all(segments.map(writtenOf));
    await syncFiles(this.root, new Set(segments.flatMap((s) => [...s.paths])));
    for (const s of segments) {
      await closeFd(s.fd);
      await unlink(this.segmentPath(s.n));
    }
    // Durably gone before a later segment can be: a segment that came back would replay old data.
    await fsyncDir(this.dir);
  }

  private async newSegment(n: number): Promise<Segment> {
    const fd = await openFd(this.segmentPath(n), "wx", 0o600);
    // The segment must exist after a crash, or the appends it holds are lost with it.
    await fsyncDir(this.dir);
    return { n, fd, size: 0, allocated: 0, unwritten: 0, written: undefined, paths: new Set() };
  }

  private segmentPath(n: number): string {
    return join(this.dir, `${n}.log`);
  }

  private relative(path: string): string {
    // Store paths are built under the root (store-paths.ts checks them): cut the prefix, and
    // leave path.relative for the rest.
    const prefix = this.root + sep;
    if (path.startsWith(prefix) && !path.includes(`${sep}..`) && !path.includes(`${sep}.${sep}`) && path.length > prefix.length)
      return path.slice(prefix.length);
    const rel = relative(this.root, path);
    if (rel === "" || rel.startsWith(`..${sep}`) || rel === ".." || isAbsolute(rel)) throw new Error(`not in the data directory: ${path}`);
    return rel;
  }
}

function writtenOf(s: Segment): Promise<void> {
  if (s.unwritten === 0) return Promise.resolve();
  return new Promise((r) => (s.written = r));
}

// Writes zeros past the end of `seg` for at least `need` more bytes of frames (the next
// fdatasync makes the new size durable with them).
async function extend(seg: Segment, need: number): Promise<void> {
  const target = seg.size + Math.max(need, EXTEND_BYTES);
  while (seg.allocated < target) {
    const n = Math.min(ZEROS.length, target - seg.allocated);
    seg.allocated += (await write(seg.fd, ZEROS, 0, n, seg.allocated)).bytesWritten;
  }
}

function encodeFrame(op: LogOp, rel: string): Buffer {
  return frameOf(OP_CODES[op.op], rel, op.op === "put" ? op.data : undefined);
}

// One frame holding `frames` (each a whole frame): replayed all together or not at all.
function groupFrame(frames: Buffer[]): Buffer {
  return frameOf(GROUP_CODE, "", Buffer.concat(frames));
}

function frameOf(code: number, rel: string, data: Buffer | undefined): Buffer {
  const path = Buffer.from(rel, "utf8");
  const rest = 1 + 2 + path.length + (data?.length ?? 0);
  const frame = Buffer.allocUnsafe(8 + rest);
  frame.writeUInt32LE(rest, 0);
  frame.writeUInt8(code, 8);
  frame.writeUInt16LE(path.length, 9);
  path.copy(frame, 11);
  data?.copy(frame, 11 + path.length);
  frame.writeUInt32LE(crc32(frame.subarray(8)), 4);
  return frame;
}

/** The operations of one segment's bytes, up to the first frame that does not check (a torn tail). */
export function decodeFrames(buf: Buffer, root: string): { ops: LogOp[]; torn: boolean } {
  const ops: LogOp[] = [];
  let at = 0;
  while (at + 8 <= buf.length) {
    const len = buf.readUInt32LE(at);
    // Zeros written ahead: the end of what was appended.
    if (len === 0) return { ops, torn: false };
    if (len < 3 || at + 8 + len > buf.length) break;
    const body = buf.subarray(at + 8, at + 8 + len);
    if (crc32(body) !== buf.readUInt32LE(at + 4)) break;
    const pathLen = body.readUInt16LE(1);
    if (body.readUInt8(0) === GROUP_CODE) {
      // Checked whole by the CRC above: its frames must decode to the last byte, or none counts.
      const inner = decodeFrames(body.subarray(3 + pathLen), root);
      if (inner.torn || pathLen !== 0) break;
      ops.push(...inner.ops);
      at += 8 + len;
      continue;
    }
    const name = OP_NAMES[body.readUInt8(0)];
    if (!name || 3 + pathLen > len) break;
    const path = resolve(root, body.toString("utf8", 3, 3 + pathLen));
    if (!path.startsWith(root + sep)) break;
    ops.push(name === "put" ? { op: name, path, data: Buffer.from(body.subarray(3 + pathLen)) } : { op: name, path });
    at += 8 + len;
  }
  // Stopped at a frame that does not check, or at a header cut short.
  return { ops, torn: at < buf.length };
}

/** The log's segments at open, oldest first, read in full. */
export async function readSegments(root: string): Promise<{ n: number; ops: LogOp[]; torn: boolean }[]> {
  const dir = join(root, "wal");
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw e;
  }
  const numbers = names.flatMap((name) => {
    const m = SEGMENT_PATTERN.exec(name);
    return m ? [Number(m[1])] : [];
  });
  numbers.sort((a, b) => a - b);
  const out = [];
  for (const n of numbers) out.push({ n, ...decodeFrames(await readFile(join(dir, `${n}.log`)), root) });
  return out;
}

/** The last operation per path over `ops` in order: what replaying them all leaves. */
export function lastPerPath(ops: LogOp[]): Map<string, LogOp> {
  const last = new Map<string, LogOp>();
  for (const op of ops) {
    last.delete(op.path); // re-inserted: the map keeps the order of each path's last operation
    last.set(op.path, op);
  }
  return last;
}

/** Deletes segments whose operations are applied and synced, durably. */
export async function removeSegments(root: string, numbers: number[]): Promise<void> {
  const dir = join(root, "wal");
  for (const n of numbers) await unlink(join(dir, `${n}.log`));
  if (numbers.length > 0) await fsyncDir(dir);
}

let syncfsWorks: boolean | undefined;

/**
 * Makes every write under `root` so far durable: syncfs(2) of its file system through coreutils'
 * `sync -f` where there is one (one call however many files), else an fsync of each of `paths`
 * (absent ones skipped) and of their directories.
 */
export async function syncFiles(root: string, paths: Set<string>): Promise<void> {
  if (paths.size === 0) return;
  if (syncfsWorks !== false) {
    try {
      await run("sync", ["-f", root]);
      syncfsWorks = true;
      return;
    } catch (e) {
      // Not there, or refused: fall back for good unless it worked before (then the failure is real).
      if (syncfsWorks) throw e;
      syncfsWorks = false;
    }
  }
  const dirs = new Set<string>();
  for (const p of paths) {
    dirs.add(dirname(p));
    try {
      const fd = await openFd(p, "r");
      try {
        await fsyncFd(fd);
      } finally {
        await closeFd(fd);
      }
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
  }
  for (const d of dirs) await fsyncDir(d);
}
