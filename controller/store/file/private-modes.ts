// The data directory is the controller's alone: directories 0700, files 0600 (store records hold
// service env values and token hashes; logs and TLS keys live beside them). New ones are created
// so; a directory made by an older version (0755 / 0644) is tightened once, when the store opens:
// the walk runs only while the root itself is still open to others, and the root is tightened last.
import { chmod, lstat, readdir } from "node:fs/promises";
import { join } from "node:path";
import { DIR_MODE, FILE_MODE } from "./atomic-write.js";

/** Tightens `root` and everything below it if the root is readable by others; returns how many entries changed. */
export async function makePrivate(root: string): Promise<number> {
  const st = await lstat(root);
  if ((st.mode & 0o077) === 0) return 0;
  let changed = await tighten(root);
  if ((st.mode & 0o777) !== DIR_MODE) {
    await chmod(root, DIR_MODE);
    changed++;
  }
  return changed;
}

// Below `dir`: directories to 0700 and regular files to 0600 where they are looser; links are left alone.
async function tighten(dir: string): Promise<number> {
  let changed = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      changed += await tighten(path);
      changed += await narrow(path, DIR_MODE);
    } else if (entry.isFile()) {
      changed += await narrow(path, FILE_MODE);
    }
  }
  return changed;
}

async function narrow(path: string, mode: number): Promise<number> {
  const st = await lstat(path);
  if ((st.mode & 0o077) === 0) return 0;
  await chmod(path, st.mode & mode & 0o777);
  return 1;
}
