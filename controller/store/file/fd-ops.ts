// File-descriptor operations for the write path, as promises over Node's callback API. The
// FileHandle objects of node:fs/promises cost about twice the CPU per open/close on the hot
// path (each apply opens, syncs and closes several files and directories), so the store's
// durable writes use plain descriptors and close them itself.
//
// At most MAX_OPEN of them are open at once; more wait for one to close. Ten thousand agents'
// first heartbeats arrive together, each writing its node's record: unbounded, their temp files
// on top of the agents' connections ran the process out of descriptors (EMFILE).
import fs from "node:fs";
import { promisify } from "node:util";

const MAX_OPEN = 256;
const open = promisify(fs.open) as (path: string, flags: string, mode?: number) => Promise<number>;
const close = promisify(fs.close) as (fd: number) => Promise<void>;
let opened = 0;
const waiting: Array<() => void> = [];

/** Opens a descriptor, once fewer than MAX_OPEN of ours are open; close it with closeFd. */
export async function openFd(path: string, flags: string, mode?: number): Promise<number> {
  while (opened >= MAX_OPEN) await new Promise<void>((r) => waiting.push(r));
  opened++;
  try {
    return await open(path, flags, mode);
  } catch (e) {
    release();
    throw e;
  }
}

/** Closes a descriptor from openFd (its slot is free even if the close fails). */
export async function closeFd(fd: number): Promise<void> {
  try {
    await close(fd);
  } finally {
    release();
  }
}

function release(): void {
  opened--;
  waiting.shift()?.();
}

export const fsyncFd = promisify(fs.fsync) as (fd: number) => Promise<void>;
/** fdatasync(2): the file's data and what reading it back needs (its size), without other metadata. */
export const fdatasyncFd = promisify(fs.fdatasync) as (fd: number) => Promise<void>;
const writeFd = promisify(fs.write);

/** Writes all of `data` at the descriptor's current position. */
export async function writeAll(fd: number, data: Buffer): Promise<void> {
  let off = 0;
  while (off < data.length) off += (await writeFd(fd, data, off, data.length - off, null)).bytesWritten;
}
