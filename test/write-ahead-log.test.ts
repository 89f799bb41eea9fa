// The file store's write-ahead log (controller/store/file/write-ahead-log.ts) through DurableFs:
// concurrent writes share the log's fsyncs, a stop that did not checkpoint is replayed (the last
// operation per path), a torn tail is dropped, a commit of several files is kept or lost whole,
// and full segments are checkpointed away.
import { mkdir, mkdtemp, open, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { DurableFs } from "../controller/store/file/atomic-write.js";

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function dataDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "skipper-wal-"));
  dirs.push(d);
  return d;
}

async function openFs(root: string, segmentBytes?: number): Promise<DurableFs> {
  const fs = new DurableFs(root, segmentBytes);
  await fs.ensureDir(root);
  await fs.openLog();
  return fs;
}

const walFiles = (root: string) => readdir(join(root, "wal"));

// Writes the start of a frame that does not check after the segment's last frame (where the
// zeros written ahead begin), as an append cut short by a crash leaves it.
async function tearTail(segment: string): Promise<void> {
  const buf = await readFile(segment);
  let at = 0;
  while (at + 8 <= buf.length && buf.readUInt32LE(at) !== 0) at += 8 + buf.readUInt32LE(at);
  const fh = await open(segment, "r+");
  await fh.write(Buffer.from([9, 0, 0, 0, 1, 2, 3]), 0, 7, at);
  await fh.close();
}

describe("write-ahead log", () => {
  it("writes made while the log syncs share the next sync", async () => {
    const root = await dataDir();
    const fs = await openFs(root);
    const before = fs.logSyncs;
    await Promise.all(Array.from({ length: 40 }, (_, i) => fs.writeFile(join(root, "r", `${i}.json`), `{"i":${i}}`)));
    // The first write starts a sync on its own; the other 39 queue behind it and share the next.
    expect(fs.logSyncs - before).toBeLessThan(10);
    for (let i = 0; i < 40; i++) expect(await readFile(join(root, "r", `${i}.json`), "utf8")).toBe(`{"i":${i}}`);
    await fs.closeLog();
    expect(await walFiles(root)).toEqual([]);
  });

  it("a stop without a checkpoint is replayed at open: the last operation of each path wins", async () => {
    const root = await dataDir();
    const fs = await openFs(root);
    const a = join(root, "r", "a.json");
    const b = join(root, "r", "b.json");
    await fs.writeFile(a, "1");
    await fs.writeFile(a, "2");
    await fs.writeFile(b, "x");
    await fs.unlink(b);
    // As a crash leaves it: the log holds the operations, the files are not what they said.
    await rm(join(root, "r"), { recursive: true });
    await tearTail(join(root, "wal", (await walFiles(root))[0]!));

    const again = new DurableFs(root);
    expect(await again.openLog()).toEqual({ replayed: 2, torn: true });
    expect(await readFile(a, "utf8")).toBe("2");
    await expect(readFile(b)).rejects.toThrow(/ENOENT/);
    // Replayed, synced and removed: only the new, empty segment is left.
    const left = await walFiles(root);
    expect(left).toHaveLength(1);
    expect((await readFile(join(root, "wal", left[0]!))).length).toBe(0);
    await again.closeLog();
  });

  it("a full segment is checkpointed and removed while writes go on", async () => {
    const root = await dataDir();
    const fs = await openFs(root, 4096);
    for (let i = 0; i < 200; i++) await fs.writeFile(join(root, "r", `${i % 20}.json`), JSON.stringify({ i, pad: "x".repeat(100) }));
    // Segments are removed by checkpoints in the background: wait for it, not for a time.
    while ((await walFiles(root)).length > 2) await new Promise((r) => setImmediate(r));
    await fs.closeLog();
    expect(await walFiles(root)).toEqual([]);
    for (let k = 0; k < 20; k++) expect(JSON.parse(await readFile(join(root, "r", `${k}.json`), "utf8")).i).toBe(180 + k);
  });

  it("a commit of several files is replayed whole, and a commit cut short anywhere is replayed not at all", async () => {
    const root = await dataDir();
    const fs = await openFs(root);
    const rec = join(root, "r", "rec.json");
    const ev1 = join(root, "e", "1.json");
    const ev2 = join(root, "e", "2.json");
    const old = join(root, "r", "old.json");
    await fs.writeFile(old, "old");
    await fs.commit([
      { path: rec, data: "v1" },
      { path: ev1, data: "e1" },
      { op: "unlink", path: old },
    ]);
    await fs.commit([
      { path: rec, data: "v2" },
      { path: ev2, data: "e2" },
    ]);
    // As a crash leaves it: the log holds both commits, no file is there.
    await rm(join(root, "r"), { recursive: true });
    await rm(join(root, "e"), { recursive: true });
    const segment = join(root, "wal", (await walFiles(root))[0]!);
    const whole = await readFile(segment);
    // The second commit's frame (the last one): every cut inside it loses all of it, never a part.
    const frames: number[] = [];
    for (let at = 0; at + 8 <= whole.length && whole.readUInt32LE(at) !== 0; at += 8 + whole.readUInt32LE(at)) frames.push(at);
    expect(frames).toHaveLength(3);
    const last = frames[2]!;
    const end = last + 8 + whole.readUInt32LE(last);
    for (const cut of [last + 9, Math.floor((last + end) / 2), end - 1]) {
      const torn = Buffer.concat([whole.subarray(0, cut), Buffer.alloc(whole.length - cut)]);
      // Its bytes past the cut never reached the disk: zeros, or garbage where they were.
      torn.fill(7, cut, Math.min(end, whole.length));
      const copy = await dataDir();
      await mkdir(join(copy, "wal"));
      await writeFile(join(copy, "wal", "1.log"), torn);
      const again = new DurableFs(copy);
      expect((await again.openLog()).torn, `cut at ${cut - last} of ${end - last}`).toBe(true);
      expect(await readFile(join(copy, "r", "rec.json"), "utf8")).toBe("v1");
      expect(await readFile(join(copy, "e", "1.json"), "utf8")).toBe("e1");
      await expect(readFile(join(copy, "e", "2.json"))).rejects.toThrow(/ENOENT/);
      await again.closeLog();
    }
    // Not cut: both commits are replayed whole, the unlink included.
    const again = new DurableFs(root);
    await again.openLog();
    expect(await readFile(rec, "utf8")).toBe("v2");
    expect(await readFile(ev1, "utf8")).toBe("e1");
    expect(await readFile(ev2, "utf8")).toBe("e2");
    await expect(readFile(old)).rejects.toThrow(/ENOENT/);
    await again.closeLog();
  });

  it("a file written directly (too big for the log) is not put back by an older logged write", async () => {
    const root = await dataDir();
    const fs = await openFs(root);
    const p = join(root, "summary.json");
    await fs.writeFile(p, "small");
    const big = "y".repeat(300 * 1024);
    await fs.writeFile(p, big);
    const again = new DurableFs(root);
    await again.openLog();
    expect(await readFile(p, "utf8")).toBe(big);
    await again.closeLog();
  });
});

describe("a quiet log", () => {
  it("lets go of a small segment seconds after its first write: the segment is checkpointed away", async () => {
    const root = await dataDir();
    const fs = await openFs(root);
    const [first] = await walFiles(root);
    await fs.writeFile(join(root, "a.json"), '{"secret":"s3cr3t"}\n');
    // Waits for the rotation and checkpoint (MAX_AGE_MS after the write), however small the segment.
    for (;;) {
      const files = await walFiles(root);
      if (!files.includes(first!)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    for (const f of await walFiles(root)) expect(await readFile(join(root, "wal", f), "utf8")).not.toContain("s3cr3t");
    expect(await readFile(join(root, "a.json"), "utf8")).toBe('{"secret":"s3cr3t"}\n');
    await fs.closeLog();
  });
});
