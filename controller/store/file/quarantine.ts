// A store file that does not parse, or does not match the path it sits at, is moved to
// quarantine/ with a warning instead of stopping the controller: an operator can look at it, and
// the rest of the data loads.
import { readFileSync } from "node:fs";
import { relative, sep } from "node:path";
import type { DurableFs } from "./atomic-write.js";
import type { StorePaths } from "./store-paths.js";

export type Warn = (msg: string, meta: object) => void;

/** Reads and decodes one record file, or quarantines it: see readOrQuarantine. */
export class RecordReader {
  constructor(
    private readonly paths: StorePaths,
    private readonly fs: DurableFs,
    private readonly warn: Warn,
  ) {}

  /** The decoded record at `path` if it decodes and passes `ok`; otherwise moves it to quarantine/ and returns undefined. */
  async read<T>(path: string, decode: (text: string) => T, ok: (v: T) => boolean): Promise<T | undefined> {
    let reason: string;
    try {
      // Synchronous: for thousands of small files one call each is far cheaper than
      // fs/promises' open, stat, read and close round trips.
      const value = decode(readFileSync(path, "utf8"));
      if (ok(value)) return value;
      reason = "its content does not match its file name or directory";
    } catch (e) {
      reason = e instanceof Error ? e.message : String(e);
    }
    await this.quarantine(path, reason);
    return undefined;
  }

  /** Moves `path` to quarantine/, named after where it was, with a warning (`message`, and the reason). */
  async quarantine(path: string, reason: string, message = "moved an unreadable store file to quarantine"): Promise<void> {
    const rel = this.rel(path);
    const stamp = new Date().toISOString().replace(/[-:.]/g, "");
    const target = this.paths.dir("quarantine", `${rel.split(sep).join("__")}.${stamp}`);
    await this.fs.rename(path, target);
    this.warn(message, { path: rel, quarantined_as: this.rel(target), reason });
  }

  /** `p` relative to the data directory, for warnings. */
  rel(p: string): string {
    return relative(this.paths.root, p);
  }
}
