// One day directory of the event log (events/YYYY-MM-DD/): its events as rows (event-row.ts) in
// listing order, by id, and how many were added or removed since its summary file was written.
// Loaded from the summary and the directory's file names (summary-file.ts) the first time the day
// is read, not at open.
import { join } from "node:path";
import { EventSchema } from "../../../gen/skipper/v1/event_pb.js";
import { isValidId } from "../../../common/ids.js";
import type { RecordReader } from "./quarantine.js";
import * as codec from "../record-codec.js";
import { EVENT_SUMMARY_ROWS, rowOf, type EventRow } from "./event-row.js";
import { SortedIndex } from "./sorted-index.js";
import { loadSummarised } from "./summary-file.js";

const FILE_NAME = /^\d{8}T\d{9}Z-(.+)\.json$/;

/** The rows of one day of events. */
export class EventDay {
  readonly rows = new SortedIndex<EventRow>();
  private readonly byId = new Map<string, EventRow>();
  /** Events added or removed since the day's summary file was written. */
  lag = 0;

  private constructor(
    readonly day: string,
    readonly dir: string,
  ) {}

  /**
   * Reads the day at `dir`: rows from its summary for the files it names, the other files in
   * full (a bad one is quarantined by `reader`); temp files go to `removeTemp`.
   */
  static async load(day: string, dir: string, reader: RecordReader, removeTemp: (path: string) => Promise<void>): Promise<EventDay> {
    const d = new EventDay(day, dir);
    const found = await loadSummarised(
      dir,
      EVENT_SUMMARY_ROWS,
      async (name) => {
        const id = FILE_NAME.exec(name)?.[1] ?? "";
        const e = await reader.read(
          join(dir, name),
          (t) => codec.decodeMessage(EventSchema, t),
          (ev) => isValidId(id) && ev.id === id && ev.timestamp !== undefined && rowOf(ev).name === name,
        );
        return e && rowOf(e);
      },
      (name) => removeTemp(join(dir, name)),
    );
    d.rows.load(found.items.map((r) => [r.key, r]));
    for (const r of found.items) d.byId.set(r.id, r);
    if (found.stale) d.lag = 1;
    return d;
  }

  /** A day with no events yet. */
  static empty(day: string, dir: string): EventDay {
    return new EventDay(day, dir);
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  get size(): number {
    return this.rows.size;
  }

  add(row: EventRow): void {
    this.byId.set(row.id, row);
    this.rows.set(row.key, row);
    this.lag++;
  }

  /** Forgets the rows with key < `key`; returns them. */
  removeBefore(key: string): EventRow[] {
    const gone = this.rows.dropBefore(key);
    for (const r of gone) this.byId.delete(r.id);
    this.lag += gone.length;
    return gone;
  }
}
