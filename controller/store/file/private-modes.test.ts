// The data directory is private to the controller's user: what the store writes is 0700/0600,
// and a directory an older version left open to others is tightened when the store opens.
import { chmod, lstat, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { tenant } from "../../../test/store-conformance.js";
import { ensurePrivateDir } from "../../tls/pem-files.js";
import { FileStore } from "./file-store.js";

let root = "";
beforeEach(async () => {
  root = join(await mkdtemp(join(tmpdir(), "skipper-modes-")), "data");
});
afterEach(async () => {
  await rm(join(root, ".."), { recursive: true, force: true });
});

/** Every directory and regular file under (and including) `dir`, with its permission bits. */
async function modes(dir: string): Promise<Array<{ path: string; mode: number; dir: boolean }>> {
  const out = [{ path: dir, mode: (await lstat(dir)).mode & 0o777, dir: true }];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await modes(path)));
    else if (e.isFile()) out.push({ path, mode: (await lstat(path)).mode & 0o777, dir: false });
  }
  return out;
}

const openToOthers = async (dir: string) => (await modes(dir)).filter((m) => (m.mode & 0o077) !== 0).map((m) => m.path);

async function writeSome(): Promise<void> {
  const store = new FileStore(root);
  await store.open();
  await store.createResource(tenant("shop"));
  await store.close();
}

describe("data directory modes", () => {
  it("a new store writes directories 0700 and files 0600", async () => {
    await writeSome();
    const all = await modes(root);
    expect(all.filter((m) => !m.dir).length).toBeGreaterThan(0);
    expect(await openToOthers(root)).toEqual([]);
  });

  it("a directory left open to others (0755/0644) is made private when the store opens, with a warning", async () => {
    await writeSome();
    for (const m of await modes(root)) await chmod(m.path, m.dir ? 0o755 : 0o644);
    expect((await openToOthers(root)).length).toBeGreaterThan(1);
    const warnings: string[] = [];
    const store = new FileStore(root, { onWarning: (msg) => warnings.push(msg) });
    await store.open();
    await store.close();
    expect(await openToOthers(root)).toEqual([]);
    expect(warnings.some((w) => w.includes("made private"))).toBe(true);
    // Still readable by its owner: the record is there after the change.
    const again = new FileStore(root);
    await again.open();
    expect((await again.getResource("tenant", "shop"))?.id).toBe("shop");
    await again.close();
  });

  it("a first start's data directory, made for its TLS files before the store opens, draws no warning", async () => {
    // What the controller's main does first on a fresh start: tls/ (and so the data directory) made.
    await ensurePrivateDir(join(root, "tls"));
    const warnings: string[] = [];
    const store = new FileStore(root, { onWarning: (msg) => warnings.push(msg) });
    await store.open();
    await store.close();
    expect(warnings).toEqual([]);
    expect(await openToOthers(root)).toEqual([]);
  });
});
