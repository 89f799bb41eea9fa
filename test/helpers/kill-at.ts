// Killing a controller process (SIGKILL) at a moment defined by what it has written, not by time:
// the instant a work order matching a test's predicate lands in its file store. The controller's
// crash points (common/crash-points.ts) name points inside it; this names one from outside, for a
// moment between writes that has no point of its own (an order stored, the pass that issued it
// not done writing).
import type { ChildProcess } from "node:child_process";
import { type FSWatcher, readFileSync, watch } from "node:fs";
import { join } from "node:path";

/** A stored work order as the file store writes it (snake_case JSON), the fields a test matches on. */
export interface StoredOrder {
  id: string;
  type: string;
  target?: { node_id?: string; tenant_id?: string };
  desired_state?: { spec_hash?: string };
}

/** SIGKILLs `child` and resolves with the signal it died of. */
export async function killNow(child: ChildProcess): Promise<NodeJS.Signals | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.signalCode;
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once("exit", (_code, signal) => resolve(signal)));
  child.kill("SIGKILL");
  return exited;
}

/**
 * Arms a watch on the controller's pending work orders (<dataDir>/work-orders/pending) and
 * SIGKILLs `child` as soon as an order for which `match` holds is stored there. `killed` resolves
 * with that order once the process is dead, or rejects when none came within `timeoutMs`;
 * `cancel` disarms the watch.
 */
export function killWhenOrderStored(
  child: ChildProcess,
  dataDir: string,
  match: (order: StoredOrder) => boolean,
  timeoutMs = 60_000,
): { killed: Promise<StoredOrder>; cancel: () => void } {
  const dir = join(dataDir, "work-orders", "pending");
  let watcher: FSWatcher | undefined;
  let timer: NodeJS.Timeout | undefined;
  const cancel = () => {
    watcher?.close();
    clearTimeout(timer);
  };
  const killed = new Promise<StoredOrder>((resolve, reject) => {
    timer = setTimeout(() => {
      cancel();
      reject(new Error(`no matching work order was stored in ${dir} within ${timeoutMs} ms`));
    }, timeoutMs);
    watcher = watch(dir, (_event, name) => {
      // Orders are renamed into place from hidden temp files: only whole records are read.
      if (!name || name.startsWith(".") || !name.endsWith(".json")) return;
      let order: StoredOrder;
      try {
        order = JSON.parse(readFileSync(join(dir, name), "utf8")) as StoredOrder;
      } catch {
        return; // already claimed and moved on, or not one of ours
      }
      if (!match(order)) return;
      cancel();
      killNow(child).then(() => resolve(order), reject);
    });
    watcher.on("error", reject);
  });
  return { killed, cancel };
}
