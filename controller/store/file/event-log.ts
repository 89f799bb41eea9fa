// The event log of the file store: events/YYYY-MM-DD/<ts>-<id>.json, a directory per UTC day.
// open() lists only the day directories; a day is read (event-day.ts: its summary file and file
// names) the first time a listing, an append or a prune needs it, and an event's body is read
// from its file when it is listed. So neither restart time nor memory grows with the history
// kept, only with what is read of it. Events are never rewritten, so a day's summary is a cache
// of file names and filter fields, checked against the directory when the day is read.
import { readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { EventSchema, type Event } from "../../../gen/skipper/v1/event_pb.js";
import type { DurableFs } from "./atomic-write.js";
import { EventDay } from "./event-day.js";
import { EVENT_SUMMARY_ROWS, rowOf, type EventRow } from "./event-row.js";
import { decodePageToken, encodePageToken, pageSizeOf, pageTag } from "../paging.js";
import type { RecordReader, Warn } from "./quarantine.js";
import * as codec from "../record-codec.js";
import { eventDay, timestampKey, timestampKeyDate, tupleKey } from "../record-keys.js";
import type { EventFilter, Page } from "../store.js";
import type { StorePaths } from "./store-paths.js";
import { listDir, summaryDue, writeSummary } from "./summary-file.js";

const PAGE_TAG = "events";
const KEY_PATTERN = /^\d{21}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const DAY_PATTERN = /^\d{4}-\d{2}-\d{2}$/;

/** What the log needs from its store. */
export interface EventLogDeps {
  paths: StorePaths;
  fs: DurableFs;
  reader: RecordReader;
  warn: Warn;
  /** Removes a temp file left by an interrupted write, with a warning. */
  removeTemp: (path: string) => Promise<void>;
  /** Runs a write as the store's writes run (tracked, so close() waits for it). */
  track: (key: string, write: () => Promise<void>) => Promise<void>;
  /** Rewrite a day's summary after this many events were added to it or removed. */
  summaryEvery: number;
}

/** The days of events, each read when first needed. */
export class EventLog {
  // Day directory names, ascending (string order is date order).
  private days: string[] = [];
  private readonly loading = new Map<string, Promise<EventDay>>();
  private readonly loaded = new Map<string, EventDay>();

  constructor(private readonly deps: EventLogDeps) {}

  /** Lists the day directories (and reads none of them). */
  async open(): Promise<void> {
    const root = this.deps.paths.dir("events");
    this.days = (await readdir(root, { withFileTypes: true }))
      .filter((e) => e.isDirectory() && DAY_PATTERN.test(e.name))
      .map((e) => e.name)
      .sort();
  }

  /** The day an event at `at` belongs to, read if it was not yet. */
  dayOf(at: Date): Promise<EventDay> {
    const name = eventDay(at);
    if (!this.days.includes(name)) {
      this.days.push(name);
      this.days.sort();
    }
    return this.day(name);
  }

  /** Indexes an event just written to `day`. */
  added(day: EventDay, e: Event): void {
    day.add(rowOf(e));
    this.summariseIfBehind(day);
  }

  /**
   * A page of events in (timestamp, id) order matching the filter (descending with newestFirst),
   * read from their files.
   */
  async list(filter: EventFilter): Promise<Page<Event>> {
    const size = pageSizeOf(filter);
    const tag = pageTag(PAGE_TAG, filter);
    const resume = decodePageToken(tag, filter.pageToken, KEY_PATTERN);
    const from = filter.since ? timestampKey(timestampFromDate(filter.since)) : undefined;
    const dayOfKey = (k: string) => eventDay(timestampKeyDate(k));
    const match = (r: EventRow) =>
      (!filter.type || r.type === filter.type) &&
      (!filter.tenantId || r.tenantId === filter.tenantId) &&
      (!filter.resourceId || r.resourceId === filter.resourceId) &&
      (!filter.workOrderId || r.workOrderId === filter.workOrderId) &&
      (!filter.correlationId || r.correlationId === filter.correlationId) &&
      (filter.sinceRevision === undefined || r.revision > filter.sinceRevision);
    // Oldest first: the days from the token's and since's on; newest first: the days down from
    // the token's, to since's.
    const firstDay = from === undefined ? "" : dayOfKey(from);
    const days = filter.newestFirst
      ? this.days.filter((d) => (resume === undefined || d <= dayOfKey(resume)) && d >= firstDay).reverse()
      : this.days.filter((d) => d >= firstDay && (resume === undefined || d >= dayOfKey(resume)));
    // One match more than a page, so the last page has no token.
    const found: Array<{ dir: string; row: EventRow }> = [];
    scan: for (const name of days) {
      if (!this.days.includes(name)) continue; // pruned meanwhile
      const day = await this.day(name);
      const rows = filter.newestFirst ? day.rows.entriesDescending(resume) : day.rows.entries({ after: resume, from });
      for (const [key, row] of rows) {
        if (filter.newestFirst && from !== undefined && key < from) break scan;
        if (!match(row)) continue;
        found.push({ dir: day.dir, row });
        if (found.length > size) break scan;
      }
    }
    const page = found.slice(0, size);
    const items = await Promise.all(page.map(({ dir, row }) => this.body(dir, row)));
    return {
      items: items.filter((e) => e !== undefined),
      nextPageToken: found.length > size ? encodePageToken(tag, page[page.length - 1]!.row.key) : "",
    };
  }

  /** Deletes every event older than `before`: whole days as directories, the cutoff's day file by file. */
  async prune(before: Date): Promise<number> {
    const cutoffDay = eventDay(before);
    const old = this.days.filter((d) => d < cutoffDay);
    this.days = this.days.filter((d) => d >= cutoffDay);
    let count = 0;
    for (const name of old) {
      const day = this.loading.get(name);
      this.loading.delete(name);
      this.loaded.delete(name);
      const dir = this.deps.paths.dir("events", name);
      count += day ? (await day).size : (await listDir(dir)).names.length;
      await rm(dir, { recursive: true, force: true });
    }
    if (!this.days.includes(cutoffDay)) return count;
    const day = await this.day(cutoffDay);
    const gone = day.removeBefore(tupleKey(timestampKey(timestampFromDate(before)), ""));
    for (const r of gone) await rm(join(day.dir, r.name), { force: true });
    this.summariseIfBehind(day, true);
    return count + gone.length;
  }

  /** Brings every day read so far up to date on disk (at close). */
  flush(): void {
    for (const day of this.loaded.values()) this.summariseIfBehind(day, true);
  }

  private day(name: string): Promise<EventDay> {
    let p = this.loading.get(name);
    if (!p) {
      const { paths, reader, removeTemp } = this.deps;
      p = EventDay.load(name, paths.dir("events", name), reader, removeTemp).then((day) => {
        this.loaded.set(name, day);
        // A summary that differed from the directory is rewritten at once: past days rarely
        // change again, so waiting for more changes would leave the next read as slow.
        this.summariseIfBehind(day, true);
        return day;
      });
      this.loading.set(name, p);
      p.catch(() => this.loading.delete(name));
    }
    return p;
  }

  // The stored event a row stands for; one that cannot be read is left out with a warning.
  private async body(dir: string, row: EventRow): Promise<Event | undefined> {
    try {
      const e = codec.decodeMessage(EventSchema, await readFile(join(dir, row.name), "utf8"));
      if (e.id === row.id && e.timestamp && rowOf(e).key === row.key) return e;
      this.deps.warn("an event's file does not match its summary", { event_id: row.id });
    } catch (e) {
      this.deps.warn("could not read an event", { event_id: row.id, reason: e instanceof Error ? e.message : String(e) });
    }
    return undefined;
  }

  // Rewrites a day's summary (in the background, tracked like a write) when it is due (summaryDue)
  // or, with `now`, when it lags at all. It only saves work when the day is next read after a restart.
  private summariseIfBehind(day: EventDay, now = false): void {
    if (now ? day.lag === 0 : !summaryDue(day.lag, day.size, this.deps.summaryEvery)) return;
    const lag = day.lag;
    day.lag = 0;
    const rows = [...day.rows.entries()].map(([, r]): [string, EventRow] => [r.name, r]);
    this.deps
      .track(`summary/events/${day.day}`, async () => {
        if (this.loaded.get(day.day) !== day) return; // pruned meanwhile
        await writeSummary(this.deps.fs, day.dir, EVENT_SUMMARY_ROWS, rows);
      })
      .catch((e: unknown) => {
        day.lag += lag;
        this.deps.warn("could not write an event day's summary", { day: day.day, reason: e instanceof Error ? e.message : String(e) });
      });
  }
}
