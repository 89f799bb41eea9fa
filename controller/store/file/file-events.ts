// The file store's events: events/YYYY-MM-DD/<ts>-<id>.json, one file per event in the directory
// of its UTC day, read a day at a time when first asked for (event-log.ts).
import { rm } from "node:fs/promises";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { copyMessage } from "../../../common/message-copy.js";
import { EventSchema, type Event } from "../../../gen/skipper/v1/event_pb.js";
import { eventTimestamp } from "../record-checks.js";
import * as codec from "../record-codec.js";
import type * as S from "../store.js";
import type { FileCore } from "./file-core.js";
import { EventLog } from "./event-log.js";

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
