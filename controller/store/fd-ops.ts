// File-descriptor operations for the write path, as promises over Node's callback API. The
// FileHandle objects of node:fs/promises cost about twice the CPU per open/close on the hot
// path (each apply opens, syncs and closes several files and directories), so the store's
// durable writes use plain descriptors and close them itself.
import fs from "node:fs";
import { promisify } from "node:util";

export const openFd = promisify(fs.open) as (path: string, flags: string, mode?: number) => Promise<number>;
export const closeFd = promisify(fs.close) as (fd: number) => Promise<void>;
export const fsyncFd = promisify(fs.fsync) as (fd: number) => Promise<void>;
const writeFd = promisify(fs.write);

/** Writes all of `data` at the descriptor's current position. */
export async function writeAll(fd: number, data: Buffer): Promise<void> {
  let off = 0;
  while (off < data.length) off += (await writeFd(fd, data, off, data.length - off, null)).bytesWritten;
}
