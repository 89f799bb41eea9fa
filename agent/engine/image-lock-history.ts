// The image locks of the last specs that applied in a project, kept on the node
// (<project dir>/.skipper-image-locks.json): a restore of one of them (a failed gate's rollback, a
// rollout's) finds its images by digest on the host and needs no registry, even when the order
// carries no lock of its own or the tag has moved since.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "./durable-file.js";

export const LOCK_HISTORY_FILE = ".skipper-image-locks.json";
/** How many specs' locks are kept: the rollbacks a host can be asked for reach a few specs back. */
const KEPT = 8;

interface HistoryRecord {
  schema_version: "v1";
  /** Oldest first. */
  locks: { spec_hash: string; digests: Record<string, string> }[];
}

/** The lock recorded for `specHash` in the project directory `dir`, or undefined. */
export async function recordedLock(dir: string, specHash: string): Promise<Record<string, string> | undefined> {
  if (specHash === "") return undefined;
  return (await readHistory(dir)).locks.find((l) => l.spec_hash === specHash)?.digests;
}

/** Records `digests` as spec `specHash`'s lock (newest; the oldest beyond KEPT go). */
export async function recordLock(dir: string, specHash: string, digests: Record<string, string>): Promise<void> {
  if (specHash === "" || Object.keys(digests).length === 0) return;
  const history = await readHistory(dir);
  const locks = [...history.locks.filter((l) => l.spec_hash !== specHash), { spec_hash: specHash, digests }].slice(-KEPT);
  const record: HistoryRecord = { schema_version: "v1", locks };
  await writeFileAtomic(join(dir, LOCK_HISTORY_FILE), `${JSON.stringify(record, null, 2)}\n`, { mode: 0o644 });
}

// An unreadable file is no history: the next deploy pulls its tags and writes it again.
async function readHistory(dir: string): Promise<HistoryRecord> {
  try {
    const r = JSON.parse(await readFile(join(dir, LOCK_HISTORY_FILE), "utf8")) as Partial<HistoryRecord>;
    if (r.schema_version !== "v1" || !Array.isArray(r.locks)) return { schema_version: "v1", locks: [] };
    const locks = r.locks.filter(
      (l) => typeof l?.spec_hash === "string" && typeof l.digests === "object" && l.digests !== null && !Array.isArray(l.digests),
    );
    return { schema_version: "v1", locks };
  } catch {
    return { schema_version: "v1", locks: [] };
  }
}
