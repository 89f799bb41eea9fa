// Group commit for directory fsyncs. A rename or unlink is only durable once its directory has
// been fsynced, and a directory fsync is the expensive part of an atomic write. Writers that
// finish their rename while no fsync of that directory is running share the next one:
//
//   waiters queue up -> one fsync starts and takes the whole queue -> it resolves them all
//
// A waiter that arrives while an fsync is already running waits for the following one, because
// the running fsync may have started before that waiter's rename and so may not cover it. That is
// the whole correctness argument: every waiter is resolved by an fsync that began after it asked.
import { closeFd, fsyncFd, openFd } from "./fd-ops.js";

interface Waiter {
  resolve: () => void;
  reject: (e: unknown) => void;
}

interface DirQueue {
  running: boolean;
  waiters: Waiter[];
}

/** Shares directory fsyncs between concurrent writers of the same directory. */
export class DirFsyncBatcher {
  private readonly queues = new Map<string, DirQueue>();
  /** Number of fsync(2) calls made on directories (for tests and benchmarks). */
  fsyncCount = 0;

  /** Resolves once `dir` has been fsynced by a flush that started after this call. */
  sync(dir: string): Promise<void> {
    let q = this.queues.get(dir);
    if (!q) {
      q = { running: false, waiters: [] };
      this.queues.set(dir, q);
    }
    const queue = q;
    const done = new Promise<void>((resolve, reject) => queue.waiters.push({ resolve, reject }));
    if (!queue.running) void this.flush(dir, queue);
    return done;
  }

  private async flush(dir: string, q: DirQueue): Promise<void> {
    q.running = true;
    while (q.waiters.length > 0) {
      const batch = q.waiters;
      q.waiters = [];
      try {
        await fsyncDir(dir);
        this.fsyncCount++;
        for (const w of batch) w.resolve();
      } catch (e) {
        for (const w of batch) w.reject(e);
      }
    }
    q.running = false;
    // Forget idle directories so day-partitioned event dirs do not accumulate forever.
    this.queues.delete(dir);
  }
}

/** fsyncs one directory (makes renames, creations and unlinks inside it durable). */
export async function fsyncDir(dir: string): Promise<void> {
  const fd = await openFd(dir, "r");
  try {
    await fsyncFd(fd);
  } finally {
    await closeFd(fd);
  }
}
