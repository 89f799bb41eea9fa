// Searching a directory tree for bytes: the tests that prove a secret is stored nowhere.
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";

/** Files under `dir` (recursively) whose bytes contain `needle`. */
export async function filesContaining(dir: string, needle: string): Promise<string[]> {
  return (await filesHolding(dir, [needle])).map((h) => h.path);
}

/**
 * Every file under `dir` (recursively, except those `skip` says) that holds one of `needles`,
 * with the needle. A file gone between the listing and its read (a temp file a live process
 * renamed meanwhile: its bytes are in the file it became) is passed over.
 */
export async function filesHolding(
  dir: string,
  needles: string[],
  skip: (path: string) => boolean = () => false,
): Promise<{ path: string; needle: string }[]> {
  const hits: { path: string; needle: string }[] = [];
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const p = join(entry.parentPath, entry.name);
    if (skip(p)) continue;
    const bytes = await readFile(p).catch((e: NodeJS.ErrnoException) => {
      if (e.code === "ENOENT") return undefined;
      throw e;
    });
    if (!bytes) continue;
    for (const needle of needles) if (bytes.includes(needle)) hits.push({ path: p, needle });
  }
  return hits;
}
