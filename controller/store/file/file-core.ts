// What every facet of the file store shares: the data directory's paths and durable writes, the
// per-record locks, the writes in flight (close() waits for them), the reader that quarantines
// what does not parse, and whether the store is open (it holds the directory lock).
import { SkipperError } from "../../base/errors.js";
import { KeyedLock } from "../../base/keyed-lock.js";
import { DurableFs } from "./atomic-write.js";
import type { DataDirLock } from "./data-dir-lock.js";
import { RecordReader } from "./quarantine.js";
import { StorePaths } from "./store-paths.js";

/** A message to the operator with its details. */
export type Notice = (msg: string, meta: object) => void;

/** The file store's shared plumbing, handed to each of its facets. */
export class FileCore {
  readonly paths: StorePaths;
  readonly fs: DurableFs;
  readonly reader: RecordReader;
  /** The data directory's lock while the store is open. */
  lock: DataDirLock | undefined;
  private readonly locks = new KeyedLock();
  private readonly inFlight = new Set<Promise<unknown>>();

  constructor(
    dataDir: string,
    readonly warn: Notice,
    readonly info: Notice,
  ) {
    this.paths = new StorePaths(dataDir);
    this.fs = new DurableFs(this.paths.root);
    this.reader = new RecordReader(this.paths, this.fs, this.warn);
  }

  /** Runs a write under the record's lock and tracks it so close() can wait for it. */
  write<T>(key: string, fn: () => Promise<T>): Promise<T> {
    this.ensureOpen();
    // Once accepted, a write runs to completion even if close() starts meanwhile.
    return this.track(this.locks.run(key, fn));
  }

  /** Counts a write in flight until it settles (close() waits for it). */
  track<T>(p: Promise<T>): Promise<T> {
    this.inFlight.add(p);
    const forget = () => this.inFlight.delete(p);
    p.then(forget, forget);
    return p;
  }

  /** Settles once every write in flight has. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.inFlight]);
  }

  /** Throws INTERNAL_ERROR unless the store is open. */
  ensureOpen(): void {
    if (!this.lock) throw new SkipperError("INTERNAL_ERROR", "the file store is not open");
  }
}
