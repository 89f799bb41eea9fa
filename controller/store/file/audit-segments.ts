// The file store's audit trail: audit/YYYY-MM-DD.jsonl under the data directory, one entry per
// line as audit-chain.ts stores it, a file per UTC day of the entries' times. Time never goes back
// along the chain, so the files in name order hold the chain in order.
//
// Appends are serialised here (one controller owns a data directory: .lock) and group-committed:
//
//   appends queue up -> each is chained to the one before -> one write + fdatasync takes the
//   whole queue -> it resolves them all
//
// and appends that arrive meanwhile wait for the next turn. A new day's file has its directory
// fsynced before its first entry is acknowledged. Readers read the current file only up to what
// was acknowledged, never a line being written.
//
// open() takes the chain head from the newest file's last line (audit-tail.ts). A last line
// without its newline is an append a crash cut short, never acknowledged: it is cut off, with a
// warning. Retention deletes whole files of days before a cutoff, never the last entry's (the
// chain goes on from it).
import fs from "node:fs";
import { open, readdir } from "node:fs/promises";
import { promisify } from "node:util";
import type { AuditEntry } from "../../../gen/skipper/v1/audit_service_pb.js";
import { SkipperError } from "../../base/errors.js";
import { KeyedLock } from "../../base/keyed-lock.js";
import { FILE_MODE, type DurableFs } from "./atomic-write.js";
import { auditDay, auditTime, chainAuditEntry, headOf, readAuditLine, type AuditHead } from "../audit-chain.js";
import { lastAuditEntry } from "./audit-tail.js";
import { closeFd, fdatasyncFd, openFd, writeAll } from "./fd-ops.js";
import { decodePageToken, encodePageToken, pageSizeOf } from "../paging.js";
import type { Warn } from "./quarantine.js";
import type { AuditDraft, AuditFilter, Page, StoredAuditEntry } from "../store.js";
import { eventDay } from "../record-keys.js";
import type { StorePaths } from "./store-paths.js";

const FILE_NAME = /^(\d{4}-\d{2}-\d{2})\.jsonl$/;
const PAGE_TAG = "audit";
// A page token resumes after (day file, sequence).
const PAGE_KEY = /^\d{4}-\d{2}-\d{2}\/\d{1,19}$/;
const ftruncate = promisify(fs.ftruncate);

/** What the trail needs from its store. */
export interface AuditSegmentsDeps {
  paths: StorePaths;
  fs: DurableFs;
  warn: Warn;
}

interface Pending {
  draft: AuditDraft;
  resolve: (entry: AuditEntry) => void;
  reject: (e: unknown) => void;
}

/** The day files of the audit trail and its chain head. */
export class AuditSegments {
  // Days that have a file, ascending (string order is date order).
  private days: string[] = [];
  private head: AuditHead | undefined;
  // The newest file, open for appends, and how many of its bytes are acknowledged.
  private current: { day: string; fd: number; size: number } | undefined;
  private queue: Pending[] = [];
  private flushing = false;
  private flushed: Promise<void> = Promise.resolve();
  // A write that failed and could not be undone leaves the file's tail unknown: no append after it.
  private broken: unknown;
  // A batch's writes and a prune take turns.
  private readonly turns = new KeyedLock();

  constructor(private readonly deps: AuditSegmentsDeps) {}

  private get dir(): string {
    return this.deps.paths.dir("audit");
  }

  private file(day: string): string {
    return this.deps.paths.dir("audit", `${day}.jsonl`);
  }

  /** Lists the day files and recovers the chain head from the newest (cutting off a torn last line). */
  async open(): Promise<void> {
    this.days = (await readdir(this.dir))
      .map((name) => FILE_NAME.exec(name)?.[1])
      .filter((d) => d !== undefined)
      .sort();
    this.head = undefined;
    for (let i = this.days.length - 1; i >= 0 && !this.head; i--) {
      const day = this.days[i]!;
      this.head = await lastAuditEntry(this.file(day), `audit/${day}.jsonl`, i === this.days.length - 1, this.deps.warn);
    }
    // Open from the start, so that readers know how much of it is acknowledged.
    const newest = this.days.at(-1);
    if (newest) await this.openDay(newest);
  }

  /** Stops taking appends once those queued are written, and closes the current file. */
  async close(): Promise<void> {
    await this.flushed;
    const current = this.current;
    this.current = undefined;
    if (current) await closeFd(current.fd);
  }

  /** Chains and writes `draft`; resolves with the entry once its line is on disk. */
  append(draft: AuditDraft): Promise<AuditEntry> {
    return new Promise((resolve, reject) => {
      this.queue.push({ draft, resolve, reject });
      if (!this.flushing) {
        this.flushing = true;
        this.flushed = this.flush();
      }
    });
  }

  /** A page of entries in sequence order whose time is in [since, until). */
  async list(filter: AuditFilter): Promise<Page<AuditEntry>> {
    const size = pageSizeOf(filter);
    const key = decodePageToken(PAGE_TAG, filter.pageToken, PAGE_KEY);
    const [afterDay, afterSeq] = key ? [key.slice(0, 10), BigInt(key.slice(11))] : ["", 0n];
    const sinceDay = filter.since ? eventDay(filter.since) : "";
    const fromDay = afterDay > sinceDay ? afterDay : sinceDay;
    const found: Array<{ day: string; entry: AuditEntry }> = [];
    for (const day of this.days.filter((d) => d >= fromDay)) {
      for await (const { text } of this.lines(day)) {
        const line = readAuditLine(text);
        if (!line.ok) continue;
        const { entry } = line;
        if (day === afterDay && entry.sequence <= afterSeq) continue;
        const at = auditTime(entry);
        if (filter.since && at < filter.since) continue;
        // Times never go back along the chain: nothing after this one is before `until` either.
        if (filter.until && at >= filter.until) return pageOf(found, size);
        found.push({ day, entry });
        if (found.length > size) return pageOf(found, size);
      }
    }
    return pageOf(found, size);
  }

  /** Every line of every kept file, in order, with where it is. */
  async *scan(): AsyncIterable<StoredAuditEntry> {
    for (const day of [...this.days]) yield* this.lines(day);
  }

  /** Deletes the files of days before `before`'s, never the last entry's; returns how many entries they held. */
  prune(before: Date): Promise<number> {
    const cutoff = eventDay(before);
    return this.turns.run("audit", async () => {
      const headDay = this.head ? auditDay(this.head) : undefined;
      const old = this.days.filter((d) => d < cutoff && (headDay === undefined || d < headDay));
      let count = 0;
      for (const day of old) {
        for await (const { text } of this.lines(day)) if (text !== "") count++;
        await this.deps.fs.unlink(this.file(day));
        this.days = this.days.filter((d) => d !== day);
      }
      return count;
    });
  }

  // Writes queued appends, a batch at a time, until the queue is empty.
  private async flush(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue;
      this.queue = [];
      await this.turns.run("audit", () => this.write(batch));
    }
    // In the same step as the last look at the queue: an append from now on starts a flush.
    this.flushing = false;
  }

  // Chains a batch after the head and writes it, a day's file at a time (days only go forward).
  private async write(batch: Pending[]): Promise<void> {
    let head = this.head;
    const lines: Array<{ p: Pending; entry: AuditEntry; text: string; day: string }> = [];
    for (const p of batch) {
      try {
        const { entry, text } = chainAuditEntry(p.draft, head);
        lines.push({ p, entry, text, day: auditDay(entry) });
        head = headOf(entry);
      } catch (e) {
        p.reject(e);
      }
    }
    while (lines.length > 0) {
      const day = lines[0]!.day;
      const next = lines.findIndex((l) => l.day !== day);
      const group = lines.splice(0, next < 0 ? lines.length : next);
      try {
        if (this.broken !== undefined) throw this.broken;
        await this.appendToDay(day, Buffer.from(group.map((l) => `${l.text}\n`).join(""), "utf8"));
      } catch (e) {
        const failed = new SkipperError("INTERNAL_ERROR", "could not write the audit trail", {}, { cause: e });
        for (const l of [...group, ...lines]) l.p.reject(failed);
        return;
      }
      this.head = headOf(group.at(-1)!.entry);
      for (const l of group) l.p.resolve(l.entry);
    }
  }

  // Appends `data` to the day's file and syncs it; a new file's directory is synced first.
  private async appendToDay(day: string, data: Buffer): Promise<void> {
    if (this.current?.day !== day) await this.openDay(day);
    const current = this.current!;
    try {
      await writeAll(current.fd, data);
      await fdatasyncFd(current.fd);
    } catch (e) {
      // Take back what may have reached the file, so no line it was not told of is left behind.
      try {
        await ftruncate(current.fd, current.size);
        await fdatasyncFd(current.fd);
      } catch {
        this.broken = e;
      }
      throw e;
    }
    current.size += data.length;
  }

  private async openDay(day: string): Promise<void> {
    const old = this.current;
    this.current = undefined;
    if (old) await closeFd(old.fd);
    await this.deps.fs.ensureDir(this.dir);
    const fd = await openFd(this.file(day), "a", FILE_MODE);
    try {
      const { size } = await promisify(fs.fstat)(fd);
      if (!this.days.includes(day)) {
        // The new file must outlive a crash, or the entries acknowledged in it go with it.
        await this.deps.fs.dirSync.sync(this.dir);
        this.days = [...this.days, day].sort();
      }
      this.current = { day, fd, size };
    } catch (e) {
      await closeFd(fd).catch(() => undefined);
      throw e;
    }
  }

  // The lines of a day's file (the current one up to what was acknowledged), numbered from 1;
  // nothing when the file is gone (pruned meanwhile).
  private async *lines(day: string): AsyncIterable<StoredAuditEntry> {
    const path = this.file(day);
    const end = this.current?.day === day ? this.current.size : Number.POSITIVE_INFINITY;
    if (end === 0) return;
    let handle: fs.promises.FileHandle;
    try {
      handle = await open(path, "r");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
      throw e;
    }
    try {
      let n = 0;
      for await (const text of handle.readLines({ start: 0, end: end - 1, autoClose: false })) {
        n++;
        yield { location: `audit/${day}.jsonl:${n}`, text };
      }
    } finally {
      await handle.close();
    }
  }
}

function pageOf(found: Array<{ day: string; entry: AuditEntry }>, size: number): Page<AuditEntry> {
  const page = found.slice(0, size);
  const last = page.at(-1);
  return {
    items: page.map((f) => f.entry),
    nextPageToken: found.length > size && last ? encodePageToken(PAGE_TAG, `${last.day}/${last.entry.sequence}`) : "",
  };
}
