// A pino destination that appends to logs/YYYY-MM-DD/<service>.ndjson under the data directory
// and switches files when the UTC date changes. Writes are asynchronous (sonic-boom); logs are a
// record for people, not the source of truth, so they are not fsynced per line.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";

type Boom = ReturnType<typeof pino.destination>;

/** Appends NDJSON log lines to a per-day file for one service. */
export class DailyFileStream {
  private day = "";
  private dest: Boom | undefined;

  constructor(
    private readonly logsDir: string,
    private readonly service: string,
  ) {}

  /** pino calls write() with one serialized line. */
  write(line: string): void {
    const day = new Date().toISOString().slice(0, 10);
    if (day !== this.day || !this.dest) this.rotate(day);
    this.dest!.write(line);
  }

  /** Flushes pending lines synchronously (used on shutdown). */
  flush(): void {
    try {
      this.dest?.flushSync();
    } catch {
      // Nothing buffered or the stream is already closed.
    }
  }

  /** Flushes and closes the current file. */
  end(): void {
    this.flush();
    this.dest?.end();
    this.dest = undefined;
  }

  private rotate(day: string): void {
    this.end();
    const dir = join(this.logsDir, day);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.day = day;
    this.dest = pino.destination({ dest: join(dir, `${this.service}.ndjson`), sync: false, append: true, mode: 0o600 });
  }
}
