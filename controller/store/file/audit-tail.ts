// Where the file store's audit trail left off: the last entry of a day's file, found by reading
// it backwards from the end (a day's file may be large; its last line is what open() needs). A
// last line without its newline is an append a crash cut short, never acknowledged: the newest
// file's is cut off. Lines at the end that are not entries (an edit) are skipped with a warning;
// verification reports them.
import type fs from "node:fs";
import { open } from "node:fs/promises";
import { headOf, readAuditLine, type AuditHead } from "../audit-chain.js";
import type { Warn } from "./quarantine.js";

// Read this much at a time.
const CHUNK = 64 * 1024;
const NEWLINE = 0x0a;

/**
 * The last entry of the audit file at `path` (`rel`: as warnings name it), read backwards;
 * `repair`: first cut off a torn last line, with a warning.
 */
export async function lastAuditEntry(path: string, rel: string, repair: boolean, warn: Warn): Promise<AuditHead | undefined> {
  const handle = await open(path, repair ? "r+" : "r");
  try {
    let end = (await handle.stat()).size;
    if (end === 0) return undefined;
    const lastNewline = await findBackwards(handle, end);
    if (lastNewline + 1 < end) {
      if (repair) {
        await handle.truncate(lastNewline + 1);
        await handle.datasync();
        warn("the audit trail ended in a torn line (an append never acknowledged): cut it off", {
          path: rel,
          bytes: end - lastNewline - 1,
        });
      }
      end = lastNewline + 1;
      if (end === 0) return undefined;
    }
    let skipped = 0;
    for await (const text of linesBackwards(handle, end - 1)) {
      const line = readAuditLine(text);
      if (line.ok) {
        if (skipped > 0) {
          warn("the audit trail's last lines are not valid entries: the chain goes on from the last that is", {
            path: rel,
            lines: skipped,
            sequence: line.entry.sequence.toString(),
          });
        }
        return headOf(line.entry);
      }
      skipped++;
    }
    return undefined;
  } finally {
    await handle.close();
  }
}

// The position of the last newline before `end` (-1 when there is none).
async function findBackwards(handle: fs.promises.FileHandle, end: number): Promise<number> {
  const buf = Buffer.allocUnsafe(CHUNK);
  for (let pos = end; pos > 0; ) {
    const n = Math.min(CHUNK, pos);
    pos -= n;
    await handle.read(buf, 0, n, pos);
    const i = buf.subarray(0, n).lastIndexOf(NEWLINE);
    if (i >= 0) return pos + i;
  }
  return -1;
}

// The lines of bytes [0, end), last first (`end` is the position of the file's final newline).
async function* linesBackwards(handle: fs.promises.FileHandle, end: number): AsyncIterable<string> {
  let carry = Buffer.alloc(0);
  for (let pos = end; pos > 0; ) {
    const n = Math.min(CHUNK, pos);
    pos -= n;
    const buf = Buffer.allocUnsafe(n);
    await handle.read(buf, 0, n, pos);
    let data = Buffer.concat([buf, carry]);
    for (let i = data.lastIndexOf(NEWLINE); i >= 0; i = data.lastIndexOf(NEWLINE)) {
      yield data.subarray(i + 1).toString("utf8");
      data = data.subarray(0, i);
    }
    carry = data;
  }
  yield carry.toString("utf8");
}
