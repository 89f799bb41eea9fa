// A compose project's files on disk while a deploy changes them: where they live and where the
// order stages the new ones (<work_dir>/tenants/<tenant>/.staging-<order>), the live files kept
// aside while `up` checks the new ones and put back when Compose rejects them, a directory
// swapped by renames, and other orders' staging cleared away.
import { readdir, readFile, rename, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import { pathExists, writeFileAtomic } from "../engine/durable-file.js";
import { SECRET_DIR } from "../engine/project-secrets.js";

/** Where a deploy's files live, and where it stages the new ones. */
export interface ProjectFiles {
  dir: string;
  composePath: string;
  envPath: string;
  secretDir: string;
  staging: string;
  stagedYml: string;
  stagedEnv: string;
  stagedSecrets: string;
}

/** The files of `tenantId`'s project under `workDir`, staged for order `orderId`. */
export function projectFiles(workDir: string, tenantId: string, orderId: string): ProjectFiles {
  const dir = join(workDir, "tenants", tenantId);
  const staging = join(dir, `.staging-${orderId}`);
  return {
    dir,
    composePath: join(dir, "docker-compose.yml"),
    envPath: join(dir, ".env"),
    secretDir: join(dir, SECRET_DIR),
    staging,
    stagedYml: join(staging, "docker-compose.yml"),
    stagedEnv: join(staging, ".env"),
    stagedSecrets: join(staging, SECRET_DIR),
  };
}

/** The live files (compose file, .env, secret directory), in the order they are kept and restored. */
export function liveFiles(f: ProjectFiles): string[] {
  return [f.composePath, f.envPath, f.secretDir];
}

// The live files moved aside into the order's staging directory while `up` checks the new ones.
// A marker written first says which existed, so a replay of the order after a crash (its new
// files already live) neither keeps those nor loses the ones kept.
const KEPT = "kept.json";

/** Moves the live files aside into `staging` (once: a replay keeps what the first run kept). */
export async function keepLive(staging: string, live: string[]): Promise<void> {
  if (await pathExists(join(staging, KEPT))) return;
  const had = await Promise.all(live.map(pathExists));
  await writeFileAtomic(join(staging, KEPT), `${JSON.stringify(Object.fromEntries(live.map((p, i) => [basename(p), had[i]])))}\n`, {
    mode: 0o600,
  });
  for (const [i, p] of live.entries()) if (had[i]) await rename(p, join(staging, `kept-${basename(p)}`));
}

/** Puts the kept files back (and removes new ones that had no predecessor), then the staging directory. */
export async function restoreLive(staging: string, live: string[]): Promise<void> {
  const had = JSON.parse(await readFile(join(staging, KEPT), "utf8")) as Record<string, boolean>;
  for (const p of live) {
    await rm(p, { recursive: true, force: true });
    if (had[basename(p)]) await rename(join(staging, `kept-${basename(p)}`), p);
  }
  await rm(staging, { recursive: true, force: true });
}

/**
 * Puts a staged directory in place of the live one (or removes the live one when none was
 * staged). Renames only, so the live path is missing for two renames' time at most, never for a
 * copy's or a delete's; a kill in between leaves the old one beside it (.old), which the next
 * deploy's replay puts right.
 */
export async function replaceDir(staged: string, live: string): Promise<void> {
  const old = `${live}.old`;
  await rm(old, { recursive: true, force: true });
  if (await pathExists(live)) await rename(live, old);
  if (await pathExists(staged)) await rename(staged, live);
  await rm(old, { recursive: true, force: true });
}

/** Removes the staging directories in `dir` other than `keep`. */
export async function removeOtherStaging(dir: string, keep: string): Promise<void> {
  for (const name of await readdir(dir).catch(() => [] as string[]))
    if (name.startsWith(".staging-") && name !== keep) await rm(join(dir, name), { recursive: true, force: true });
}
