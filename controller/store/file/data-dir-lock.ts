// One controller per data directory: two processes writing the same files would each serve
// reads from their own memory and silently overwrite each other. The lock is a file holding the
// owner's pid. A lock left by a dead process is taken over; a live owner makes open() fail.
// Within one process a registry catches a second store on the same directory (same pid).
//
// This guards against operator mistakes (starting a second controller), not against a hostile
// process: two processes taking over the same stale lock at the same instant could both win.
import { randomBytes } from "node:crypto";
import { open, readFile, unlink, type FileHandle } from "node:fs/promises";
import { dirname } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { fsyncDir } from "./dir-fsync.js";

const heldInThisProcess = new Set<string>();

/** A held data-directory lock; release() is idempotent. */
export interface DataDirLock {
  release(): Promise<void>;
}

/** Takes the lock at `lockPath` or throws an Error naming the owner. */
export async function acquireDataDirLock(lockPath: string, dataDir: string): Promise<DataDirLock> {
  if (heldInThisProcess.has(lockPath)) {
    throw new Error(`data directory ${dataDir} is already open in this process (another store holds ${lockPath})`);
  }
  heldInThisProcess.add(lockPath);
  const token = `${process.pid}\n${randomBytes(8).toString("hex")}\n`;
  try {
    for (let attempt = 0; ; attempt++) {
      if (await tryCreate(lockPath, token)) break;
      // An empty file may be a lock another process created a moment ago and is still writing.
      const owner = (await readOwner(lockPath)) ?? (await delay(50).then(() => readOwner(lockPath)));
      if (owner !== undefined && owner !== process.pid && isAlive(owner)) {
        throw new Error(
          `data directory ${dataDir} is in use by another controller (pid ${owner}, lock ${lockPath}); stop it or use another data directory`,
        );
      }
      if (attempt >= 3) throw new Error(`could not take the lock ${lockPath}`);
      // Stale (dead owner, our own pid from an earlier life, or unreadable): replace it.
      await unlink(lockPath).catch(() => undefined);
    }
  } catch (e) {
    heldInThisProcess.delete(lockPath);
    throw e;
  }
  let released = false;
  return {
    async release() {
      if (released) return;
      released = true;
      // Only remove the file if it is still ours.
      const current = await readFile(lockPath, "utf8").catch(() => "");
      if (current === token) await unlink(lockPath).catch(() => undefined);
      heldInThisProcess.delete(lockPath);
    },
  };
}

async function tryCreate(lockPath: string, token: string): Promise<boolean> {
  let fh: FileHandle;
  try {
    fh = await open(lockPath, "wx", 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw e;
  }
  try {
    await fh.writeFile(token, "utf8");
    await fh.sync();
  } finally {
    await fh.close();
  }
  await fsyncDir(dirname(lockPath));
  return true;
}

async function readOwner(lockPath: string): Promise<number | undefined> {
  try {
    const pid = Number.parseInt((await readFile(lockPath, "utf8")).split("\n")[0] ?? "", 10);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: the process exists but belongs to someone else.
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
