// Searching a directory tree for bytes: the tests that prove a secret is stored nowhere.
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";

/** Files under `dir` (recursively) whose bytes contain `needle`. */
export async function filesContaining(dir: string, needle: string): Promise<string[]> {
  const hits: string[] = [];
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const p = join(entry.parentPath, entry.name);
    if ((await readFile(p)).includes(needle)) hits.push(p);
  }
  return hits;
}
