// skippy-updater's driver (agent/updater/updater.ts) with fake agent bundles: real child processes
// on a real temp directory. What the machine's tests cannot show: which file runs under which
// SHA-256, what a failed link switch, a SIGKILL, a SIGTERM and a spawn that throws do to the
// processes, and old versions pruned.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, readlink, realpath, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Logger } from "../common/logging/logger.js";
import { Updater } from "../agent/updater/updater.js";
import { DEFAULT_MACHINE_CONFIG, type MachineConfig } from "../agent/updater/updater-machine.js";
import { readUpdaterState, stageBundle, updaterPaths, versionDirName, writeUpdateRequest } from "../agent/updater/update-files.js";

interface FakeOptions {
  /** Write confirmed.json with the SHA-256 the updater gave it. */
  confirm?: boolean;
  /** Start `sleep 300` (in its process group) and note its pid in grandchild.pid. */
  grandchild?: boolean;
  /** Ignore SIGTERM (only SIGKILL stops it). */
  ignoreTerm?: boolean;
}

// A fake agent: notes which file runs and the SHA-256 the updater told it in runs.ndjson.
const fake = (version: string, o: FakeOptions = {}) =>
  Buffer.from(`// skippy-bundle-version: ${version}
import { appendFileSync, renameSync, writeFileSync } from "node:fs";
import { spawn } from "node:child_process";
const dir = process.env.SKIPPY_UPDATER_DIR;
const sha256 = process.env.SKIPPY_BUNDLE_SHA256;
appendFileSync(dir + "/runs.ndjson", JSON.stringify({ version: "${version}", file: process.argv[1], sha256, pid: process.pid }) + "\\n");
if (${!!o.grandchild}) appendFileSync(dir + "/grandchild.pid", spawn("sleep", ["300"], { stdio: "ignore" }).pid + "\\n");
if (${!!o.confirm}) {
  writeFileSync(dir + "/.c.tmp", JSON.stringify({ sha256, at: new Date().toISOString() }));
  renameSync(dir + "/.c.tmp", dir + "/confirmed.json");
}
process.on("SIGTERM", () => { if (!${!!o.ignoreTerm}) process.exit(0); });
setInterval(() => {}, 1000);
`);

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

interface Run {
  version: string;
  file: string;
  sha256: string;
  pid: number;
}

let root: string;
let dir: string;
let updater: Updater | undefined;
let lines: string[];
let onLine: (m: string) => void;

// A logger that keeps the messages (and lets a test act on one).
function fakeLog(): Logger {
  const write = (o: unknown, m?: string) => {
    const line = m ?? String(o);
    lines.push(line);
    onLine(line);
  };
  return new Proxy({}, { get: () => write }) as unknown as Logger;
}

async function startUpdater(first: Buffer, config: Partial<MachineConfig> = {}, args: string[] = []): Promise<Updater> {
  const bundle = join(root, "first.mjs");
  await writeFile(bundle, first);
  updater = new Updater({ dir, bundle, args, env: process.env, log: fakeLog(), config: { ...DEFAULT_MACHINE_CONFIG, ...config } });
  await updater.start();
  return updater;
}

async function runs(): Promise<Run[]> {
  const text = await readFile(join(dir, "runs.ndjson"), "utf8").catch(() => "");
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Run);
}

// Waits for observed progress: `fn` is asked every 50 ms until it answers, for at most `ms`.
async function until<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Alive and not a zombie (an orphan's parent may be slow to reap it).
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

async function stage(b: Buffer, version: string): Promise<string> {
  return stageBundle(dir, b, { version, sha256: sha(b), size: b.length, signature: "" });
}

async function request(b: Buffer, version: string, deadlineMs = 20_000): Promise<void> {
  await writeUpdateRequest(dir, { version, sha256: sha(b), deadlineMs, orderId: "o-1", requestedAt: new Date().toISOString() });
}

const atRest = async () => {
  const s = await readUpdaterState(dir);
  return s && ["CONFIRMED", "FAILED", "ROLLED_BACK"].includes(s.state) ? s : undefined;
};

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "skippy-updater-driver-"));
  dir = join(root, "updater");
  lines = [];
  onLine = () => undefined;
});

afterEach(async () => {
  updater?.stop("SIGTERM");
  await updater?.done;
  updater = undefined;
  const pids = (await runs()).map((r) => r.pid);
  const more = await readFile(join(dir, "grandchild.pid"), "utf8").catch(() => "");
  for (const pid of [...pids, ...more.split("\n").filter(Boolean).map(Number)]) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {}
  }
  await rm(root, { recursive: true, force: true });
});

describe("skippy-updater driver", () => {
  it("runs the staged bundle's own file under that file's SHA-256, and prunes old versions after CONFIRMED", async () => {
    const a = fake("0.1.0-a", { confirm: true });
    const b = fake("0.1.0-b", { confirm: true });
    await startUpdater(a);
    await until("A to run", async () => (await runs()).length === 1);
    // Four older versions, changed long ago: all but the newest three directories go.
    const old: string[] = [];
    for (const v of ["0.0.1", "0.0.2", "0.0.3", "0.0.4"]) {
      const name = await stage(fake(v), v);
      const t = new Date(Date.now() - 3_600_000 + old.length * 1000);
      await utimes(join(updaterPaths(dir).versions, name), t, t);
      old.push(name);
    }
    const bDir = await stage(b, "0.1.0-b");
    await request(b, "0.1.0-b");
    const s = await until("the update to end", atRest);
    expect(s).toMatchObject({ state: "CONFIRMED", running: { version: "0.1.0-b" }, previous: { version: "0.1.0-a" } });
    const bRun = (await runs()).at(-1)!;
    expect(bRun).toMatchObject({ version: "0.1.0-b", sha256: sha(b) });
    expect(bRun.file).toBe(join(await realpath(dir), "versions", bDir, "skippy.mjs"));
    expect(await readlink(updaterPaths(dir).current)).toBe(join("versions", bDir));
    const left = await until("old versions pruned", async () => {
      const names = await readdir(updaterPaths(dir).versions);
      return names.length === 3 ? names.sort() : undefined;
    });
    // current (B) and previous (A), the two newest, and the newest of the old ones (the third).
    expect(left).toEqual([old[3]!, versionDirName("0.1.0-a", sha(a)), bDir].sort());
  });

  it("a link switch that fails ends in FAILED with the old agent running again under its own SHA-256, never CONFIRMED", async () => {
    const a = fake("0.1.0-a", { confirm: true });
    const b = fake("0.1.0-b", { confirm: true });
    await startUpdater(a);
    await until("A to run", async () => (await runs()).length === 1);
    await stage(b, "0.1.0-b");
    // Something where `previous` goes makes the switch fail (in life: ENOSPC, EIO, a read-only fs).
    await mkdir(join(updaterPaths(dir).previous, "x"), { recursive: true });
    await request(b, "0.1.0-b");
    const s = await until("the update to end", atRest);
    expect(s.state).toBe("FAILED");
    expect(s.message).toMatch(/^could not switch to 0\.1\.0-b: .*; 0\.1\.0-a runs again$/);
    expect(s.running?.version).toBe("0.1.0-a");
    const all = await until("A to run again", async () => ((await runs()).length >= 2 ? runs() : undefined));
    expect(all.map((r) => r.version)).toEqual(["0.1.0-a", "0.1.0-a"]);
    expect(all.every((r) => r.sha256 === sha(a))).toBe(true);
    expect(await readlink(updaterPaths(dir).current)).toBe(join("versions", versionDirName("0.1.0-a", sha(a))));
  });

  it("SIGKILL reaches the agent's process group: a command it ran does not outlive it", async () => {
    const a = fake("0.1.0-a", { grandchild: true, ignoreTerm: true });
    const b = fake("0.1.0-b", { confirm: true });
    await startUpdater(a, { stopTimeoutMs: 300 });
    const gpid = await until(
      "the command to start",
      async () => Number(await readFile(join(dir, "grandchild.pid"), "utf8").catch(() => "")) || undefined,
    );
    expect(alive(gpid)).toBe(true);
    await stage(b, "0.1.0-b");
    await request(b, "0.1.0-b");
    expect(await until("the update to end", atRest)).toMatchObject({ state: "CONFIRMED" });
    await until("the command to die with the killed agent", () => !alive(gpid), 5_000);
  });

  it("on SIGTERM passes it to the agent, and what the agent left in its group dies with the updater", async () => {
    const u = await startUpdater(fake("0.1.0-a", { grandchild: true }));
    const gpid = await until(
      "the command to start",
      async () => Number(await readFile(join(dir, "grandchild.pid"), "utf8").catch(() => "")) || undefined,
    );
    const agent = (await runs())[0]!.pid;
    u.stop("SIGTERM");
    expect(await u.done).toBe(0);
    expect(alive(agent)).toBe(false);
    await until("the command to die with the updater", () => !alive(gpid), 5_000);
  });

  it("a SIGTERM while the links switch starts no agent afterwards", async () => {
    const a = fake("0.1.0-a", { confirm: true });
    const b = fake("0.1.0-b", { confirm: true });
    const u = await startUpdater(a);
    await until("A to run", async () => (await runs()).length === 1);
    await stage(b, "0.1.0-b");
    // The signal arrives once the links are switched, before the new agent is started.
    onLine = (m) => {
      if (m.startsWith("current -> versions/0.1.0-b")) u.stop("SIGTERM");
    };
    await request(b, "0.1.0-b");
    expect(await u.done).toBe(0);
    await (u as unknown as { queue: Promise<void> }).queue;
    expect(lines.some((l) => l.startsWith("current -> versions/0.1.0-b"))).toBe(true);
    expect(lines.filter((l) => l.startsWith("started the agent"))).toEqual([expect.stringContaining("0.1.0-a")]);
  });

  it("a spawn that throws is heard as the agent's exit: it is started again, with backoff", async () => {
    // A NUL byte in an argument makes spawn throw at once.
    await startUpdater(fake("0.1.0-a"), { restartBaseMs: 50 }, ["--state-dir\0x"]);
    await until("a second start", () => lines.filter((l) => l.startsWith("could not start the agent")).length >= 2 || undefined);
    const s = await readUpdaterState(dir);
    expect(s?.state).toBe("IDLE");
  });
});
