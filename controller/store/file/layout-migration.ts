// Layout 1 kept each resource type's records in a directory named after the type
// (resources/tenant/, resources/resource_limits/); layout 2 uses the design's plural, hyphenated
// names (resources/tenants/, resources/resource-limits/: resourceDir in store-paths.ts). open()
// runs migrateLayout under the directory lock, before anything creates or reads those
// directories. Nothing else in the data directory moves.
//
// Every step is one rename(2), so a record is in exactly one directory at every instant, and a
// kill at any point leaves a state the next open finishes:
//   - only the old directory exists: it is renamed to its new name, whole (atomic);
//   - both exist (a migration killed mid-way, or an older controller run on the directory after
//     it was migrated): the old one's entries are renamed into the new one one by one, both
//     directories fsynced, then the empty old one removed. A name the new directory already
//     holds is never overwritten: only an older controller writing after a migration makes one,
//     and neither copy can be called the newer, so the old one goes to quarantine/ with a warning.
// The directory names alone say which layout a type is in (no old name is a new one), so there is
// no version marker to disagree with them, and an already-migrated directory costs one readdir.
import { lstat, readdir, rename, rmdir } from "node:fs/promises";
import { join } from "node:path";
import { crashPoint } from "../../../common/crash-points.js";
import { RESOURCE_TYPES, type ResourceType } from "../../../common/ids.js";
import type { DurableFs } from "./atomic-write.js";
import type { RecordReader } from "./quarantine.js";
import { resourceDir, type StorePaths } from "./store-paths.js";

/** One type's records moved from their layout-1 directory to their layout-2 one. */
export interface MovedDir {
  /** Relative to the data directory: "resources/tenant". */
  from: string;
  /** Relative to the data directory: "resources/tenants". */
  to: string;
  /** "directory": renamed whole; "files": entries moved one by one into a new directory that existed. */
  by: "directory" | "files";
  /** Entries moved one by one (by "files"). */
  files?: number;
  /** Entries whose name the new directory already held, moved to quarantine/ instead (by "files"). */
  quarantined?: number;
}

/** Moves every layout-1 resource directory to its layout-2 name; returns what moved ([] when nothing was left to do). */
export async function migrateLayout(paths: StorePaths, fs: DurableFs, reader: RecordReader): Promise<MovedDir[]> {
  const root = paths.dir("resources");
  const present = await subdirectories(root);
  const legacy = RESOURCE_TYPES.filter((t) => t !== resourceDir(t) && present.has(t));
  if (legacy.length === 0) return [];
  const moved: MovedDir[] = [];
  for (const type of legacy) {
    const from = join(root, type);
    const to = paths.resourceDir(type);
    if (present.has(resourceDir(type))) {
      moved.push(await mergeInto(type, from, to, fs, reader));
    } else {
      await rename(from, to);
      crashPoint("store.after-layout-move");
      moved.push({ ...names(type), by: "directory" });
    }
  }
  await fs.dirSync.sync(root);
  return moved;
}

// Moves each entry of `from` into `to` by rename, fsyncs both, removes the emptied `from`.
async function mergeInto(type: ResourceType, from: string, to: string, fs: DurableFs, reader: RecordReader): Promise<MovedDir> {
  let files = 0;
  let quarantined = 0;
  for (const name of await readdir(from)) {
    if (await exists(join(to, name))) {
      await reader.quarantine(
        join(from, name),
        `${names(type).to}/${name} already exists`,
        "kept a resource file's new-layout copy; moved its old-layout copy to quarantine",
      );
      quarantined++;
    } else {
      await rename(join(from, name), join(to, name));
      files++;
    }
    crashPoint("store.after-layout-move");
  }
  // The new entries are durable before the old directory is: a record is never in neither.
  await fs.dirSync.sync(to);
  await fs.dirSync.sync(from);
  await rmdir(from);
  return { ...names(type), by: "files", files, ...(quarantined > 0 ? { quarantined } : {}) };
}

function names(type: ResourceType): { from: string; to: string } {
  return { from: `resources/${type}`, to: `resources/${resourceDir(type)}` };
}

// The names of the directories in `dir` (none when it does not exist yet).
async function subdirectories(dir: string): Promise<Set<string>> {
  try {
    return new Set((await readdir(dir, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return new Set();
    throw e;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw e;
  }
}
