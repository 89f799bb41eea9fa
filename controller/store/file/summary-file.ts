// A directory of records that are never rewritten once there (finished work orders, one day of
// events) keeps a summary file beside them: one row per record, enough to index and filter it
// without reading it. open() reads the summary and the directory's file names instead of every
// record; the summary is only a cache of what the files say, checked against the names:
//   - a file with no row (written after the summary, e.g. before a kill -9) is read in full;
//   - a row with no file (deleted after the summary) is dropped;
//   - a summary that is missing or does not parse is rebuilt from the files.
// So a crash between a record's write and the summary's can neither lose nor hide a record.
// The summary is written atomically (atomic-write.ts) but need not be current.
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { TEMP_FILE_PATTERN, type DurableFs } from "./atomic-write.js";

/** The summary's file name; hidden, so the record loaders skip it. */
export const SUMMARY_FILE = ".summary.json";
// Format 2: each row one JSON string of tab-separated columns (a tab or backslash in a value is
// escaped), the file name first. Parsing 100,000 strings costs a fraction of parsing as many
// arrays of values. A summary of another format is rebuilt from the files.
const FORMAT = 2;

/**
 * Whether a summary `lag` changes behind its directory of `size` records is due for a rewrite:
 * after `every` changes, or a tenth of the directory if that is more. A rewrite writes every row,
 * so a fixed step would cost each new record a share that grows with the directory (100 rows per
 * finished order at 100,000 kept); a step in proportion keeps it to about ten, and open() after a
 * kill -9 reads at most that tenth of the files in full.
 */
export function summaryDue(lag: number, size: number, every: number): boolean {
  return lag > 0 && lag >= Math.max(every, Math.floor(size / 10));
}

/** How one record becomes a row of string columns and back. */
export interface SummaryRows<T> {
  toRow(item: T): string[];
  /** Throws on a row it cannot read (the whole summary is then rebuilt). */
  fromRow(columns: string[]): T;
}

/** What loadSummarised found: every record, and whether the summary on disk differs from it. */
export interface Summarised<T> {
  /** In the summary's order, then those read in full. */
  items: T[];
  stale: boolean;
  /** The item of one file name, if it is among `items`. */
  get(fileName: string): T | undefined;
}

/**
 * The records of `dir` as summaries: rows of the summary file for the files it names, `readOne`
 * (which reads a file in full, or quarantines it and returns undefined) for the files it does not.
 * Temp files left by interrupted writes (atomic-write.ts) are handed to `onTempFile`.
 */
export async function loadSummarised<T>(
  dir: string,
  rows: SummaryRows<T>,
  readOne: (fileName: string) => Promise<T | undefined>,
  onTempFile: (fileName: string) => Promise<void>,
  readConcurrency = 32,
): Promise<Summarised<T>> {
  // Both read at once: at open the listing of a long history and the summary's text take a while.
  const [{ names, temps }, summary] = await Promise.all([listDir(dir), readSummary(dir, rows)]);
  for (const t of temps) await onTempFile(t);
  // Rows in the summary's order (a writer that keeps it sorted spares the reader a sort). When
  // the summary names every file and nothing else (the usual case), its rows are the items.
  const unread = summary ? names.filter((n) => !summary.has(n)) : names;
  const exact = summary !== undefined && summary.size === names.length - unread.length;
  const present = exact ? summary : new Set(names);
  const items: T[] = exact ? [...summary.values()] : [];
  if (summary && !exact) for (const [name, item] of summary) if (present.has(name)) items.push(item);
  const read = new Map<string, T>();
  let next = 0;
  const worker = async () => {
    while (next < unread.length) {
      const name = unread[next++]!;
      const item = await readOne(name);
      if (item === undefined) continue;
      items.push(item);
      read.set(name, item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(readConcurrency, unread.length) }, worker));
  const stale = summary === undefined ? names.length > 0 : unread.length > 0 || !exact;
  const get = (name: string) => (present.has(name) ? (summary?.get(name) ?? read.get(name)) : undefined);
  return { items, stale, get };
}

/** Replaces the summary of `dir` with rows for `items`, each under its record's file name. */
export async function writeSummary<T>(fs: DurableFs, dir: string, rows: SummaryRows<T>, items: Iterable<[string, T]>): Promise<void> {
  const lines: string[] = [];
  for (const [name, item] of items) lines.push(JSON.stringify([name, ...rows.toRow(item)].map(escapeColumn).join("\t")));
  await fs.writeFile(join(dir, SUMMARY_FILE), `{"format":${FORMAT},"rows":[\n${lines.join(",\n")}\n]}\n`);
}

// The summary as file name -> item, or undefined when there is none or it cannot be read.
async function readSummary<T>(dir: string, rows: SummaryRows<T>): Promise<Map<string, T> | undefined> {
  let text: string;
  try {
    text = await readFile(join(dir, SUMMARY_FILE), "utf8");
  } catch {
    return undefined;
  }
  try {
    const parsed = JSON.parse(text) as { format?: unknown; rows?: unknown };
    if (parsed.format !== FORMAT || !Array.isArray(parsed.rows)) return undefined;
    const out = new Map<string, T>();
    for (const row of parsed.rows as unknown[]) {
      if (typeof row !== "string") return undefined;
      const columns = row.split("\t");
      if (row.includes("\\")) for (let i = 0; i < columns.length; i++) columns[i] = unescapeColumn(columns[i]!);
      out.set(columns[0]!, rows.fromRow(columns.slice(1)));
    }
    return out;
  } catch {
    return undefined;
  }
}

function escapeColumn(value: string): string {
  return /[\t\\]/.test(value) ? value.replace(/\\/g, "\\\\").replace(/\t/g, "\\t") : value;
}

function unescapeColumn(value: string): string {
  return value.replace(/\\(.)/g, (_m, c: string) => (c === "t" ? "\t" : c));
}

/** The record files of `dir` (not hidden: temp files and the summary are), and its temp files. */
export async function listDir(dir: string): Promise<{ names: string[]; temps: string[] }> {
  const names: string[] = [];
  const temps: string[] = [];
  try {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      if (!e.isFile()) continue;
      if (!e.name.startsWith(".")) names.push(e.name);
      else if (TEMP_FILE_PATTERN.test(e.name)) temps.push(e.name);
    }
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
  }
  return { names, temps };
}
