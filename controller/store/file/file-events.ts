// The file store's events: events/YYYY-MM-DD/<ts>-<id>.json, one file per event in the directory
// of its UTC day, read a day at a time when first asked for (event-log.ts).
import { rm } from "node:fs/promises";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { copyMessage } from "../../../common/message-copy.js";
import { EventSchema, type Event } from "../../../gen/skipper/v1/event_pb.js";
import { eventTimestamp } from "../record-checks.js";
import * as codec from "../record-codec.js";
import type * as S from "../store.js";
import type { FileOp } from "./atomic-write.js";
import type { FileCore } from "./file-core.js";
import { EventLog } from "./event-log.js";
import type { EventDay } from "./event-day.js";

/** The EventStore facet of the file store. */
export class FileEvents implements S.EventStore {
  private log: EventLog;

  constructor(
    private readonly core: FileCore,
    private readonly summaryEvery: number,
  ) {
    this.log = this.eventLog();
  }

  /** Starts a fresh log of the data directory's days (at open). */
  async open(): Promise<void> {
    this.log = this.eventLog();
    await this.log.open();
  }

  /** Brings the days' summaries up to date (at close). */
  flush(): void {
    this.log.flush();
  }

  async appendEvent(event: Event): Promise<void> {
    const at = timestampDate(eventTimestamp(event));
    const path = this.core.paths.event(at, event.id);
    await this.core.write(`event/${event.id}`, async () => {
      const day = await this.log.dayOf(at);
      if (day.has(event.id)) return;
      const stored = copyMessage(EventSchema, event);
      await this.core.fs.writeFile(path, codec.encodeMessage(EventSchema, stored));
      this.log.added(day, stored);
    });
  }

  /**
   * The files of `events` not stored yet, for a record's write to commit with them (store.ts
   * EventsOf), and `indexed`, to call once that write is durable: listings show them from then on.
   */
  async stage(events: readonly Event[]): Promise<{ files: FileOp[]; indexed: () => void }> {
    const staged: { path: string; day: EventDay; stored: Event }[] = [];
    for (const event of events) {
      const at = timestampDate(eventTimestamp(event));
      const path = this.core.paths.event(at, event.id);
      const day = await this.log.dayOf(at);
      if (day.has(event.id)) continue;
      staged.push({ path, day, stored: copyMessage(EventSchema, event) });
    }
    return {
      files: staged.map((e) => ({ path: e.path, data: codec.encodeMessage(EventSchema, e.stored) })),
      indexed: () => {
        // An append of the same id may have won meanwhile: its file is this one's, listed once.
        for (const e of staged) if (!e.day.has(e.stored.id)) this.log.added(e.day, e.stored);
      },
    };
  }

  async listEvents(filter: S.EventFilter): Promise<S.Page<Event>> {
    this.core.ensureOpen();
    return this.log.list(filter);
  }

  async pruneEvents(before: Date): Promise<number> {
    this.core.ensureOpen();
    return this.log.prune(before);
  }

  private eventLog(): EventLog {
    const { paths, fs, reader, warn } = this.core;
    return new EventLog({
      paths,
      fs,
      reader,
      warn,
      removeTemp: async (path) => {
        await rm(path, { force: true });
        warn("removed a temp file left by an interrupted write", { path: reader.rel(path) });
      },
      track: (key, write) => this.core.write(key, write),
      summaryEvery: this.summaryEvery,
    });
  }
}
