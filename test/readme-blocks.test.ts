// The README's shell examples, run as a reader runs them, so they cannot rot (issue 18): every
// ```sh block of README.md, in README order, in ONE bash process (test/helpers/readme-shell.ts),
// so that what a block leaves (exported variables, the rollout example's functions and agents)
// is there for the blocks after it, as in the reader's shell. Each block runs under
// `set -euo pipefail`; one that exits non-zero fails its test with its README line, its text and
// its output, and ends the shell, so the blocks after it are skipped (they build on it).
//
// What the reader does before the examples, the test does:
// - `npm start` (the quick start's block, marked skipped): the test runs what it runs after the
//   build, `node scripts/start-local.mjs` (`npm test` builds dist/ first; to run this file alone,
//   `npm run build` first: a build here would rewrite dist/ under the other tests), from a temporary
//   directory that stands for the repository root (a link to each of its top-level entries), so
//   that the controller's ./data, the agent's ./.skippy and what the examples write (tokens) land
//   there and not in the checkout. The agent deploys to the suite's Docker engine (DOCKER_HOST),
//   its compose projects in the temporary directory (SKIPPY_WORK_DIR).
// - the admin token: read from the `export SKIPPER_ADMIN_TOKEN=…` line npm start prints, and
//   exported in the shell, as the README says to. The shell has no other SKIPPER_/SKIPPY_ variable.
// - a config directory of its own (XDG_CONFIG_HOME in the temporary directory), so the CLI
//   examples' `skipper login` saves its context there and not in the user's ~/.config.
// - curl fails on an HTTP error answer (`--fail-with-body`, added by a shell function), so an
//   example whose call the controller refuses fails its block instead of printing the refusal.
//
// A block that cannot run here has `<!-- readme-test: skip: <reason> -->` before it and is listed
// as a skipped test with its reason. A `<!-- readme-test: cleanup -->` block runs in its place and,
// when an earlier block failed, as the shell exits: it stops what the examples started (agents,
// Docker engines). Then the test stops npm start (its controller and agent), removes the example
// tenant's containers from the suite's engine, deletes the temporary directory, and deletes
// dist/skippy.mjs and dist/skipper.mjs if the bundle examples wrote them.
//
// The examples use fixed ports (8443, 8081) and paths (/tmp/demo-N, /tmp/skipper-docker-demo-N),
// so two runs of this test on one machine (two checkouts tested at once) take turns: each holds
// a lock (flock) from before npm start until everything is cleaned up. The examples wait for
// what they need by polling (their loops fail after two minutes without it); the per-block
// timeout only catches a hang.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, readdir, rm, symlink } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, it } from "vitest";
import { readmeBlocks, type ReadmeBlock } from "./helpers/readme-blocks.js";
import { ReadmeShell } from "./helpers/readme-shell.js";
import { removeComposeProject, stopProcess } from "./helpers/processes.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const blocks = readmeBlocks(readFileSync(join(ROOT, "README.md"), "utf8"));
const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const asRoot = process.getuid?.() === 0;
if (!dockerHost) console.warn("!!! readme-blocks.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");
else if (!asRoot) console.warn("!!! readme-blocks.test.ts SKIPPED: the README's rollout example starts Docker engines, as root");

/** What the examples take for themselves: the controller's and the example tenant's ports. */
const README_PORTS = [8443, 8081];
/** The example tenant's Compose project (examples/tenant.json), on the suite's engine. */
const EXAMPLE_PROJECT = "example-tenant";
const LOCK_FILE = "/tmp/skipper-readme-blocks.lock";
/** What the bundle examples write into the checkout (npm run bundle:agent, bundle:cli). */
const BUNDLES = ["dist/skippy.mjs", "dist/skipper.mjs"];
const BLOCK_TIMEOUT_MS = 8 * 60_000;
/** Entries of the checkout the stand-in root does not link: its own state would be the checkout's. */
const NOT_LINKED = new Set([".git", "data", ".skippy"]);

const firstLine = (b: ReadmeBlock) =>
  b.text
    .split("\n")
    .find((l) => l.trim() !== "")!
    .trim()
    .slice(0, 70);

/** Waits for the machine-wide lock of this test; holds it until `release` (or this process ends). */
async function takeLock(): Promise<{ release(): Promise<void> }> {
  const child = spawn("flock", ["--exclusive", LOCK_FILE, "sh", "-c", "echo locked; exec cat > /dev/null"], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  await new Promise<void>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`flock exited with ${code}`)));
    child.stdout!.once("data", () => resolve());
  });
  return { release: () => new Promise((resolve) => (child.once("exit", () => resolve()), child.stdin!.end())) };
}

// Free now, or once what holds it lets go (a run stopped a moment ago winding down); after two
// minutes of it staying taken, the test says who probably holds it.
async function assertFree(port: number): Promise<void> {
  const free = () =>
    new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once("error", () => resolve(false));
      s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
    });
  const deadline = Date.now() + 120_000;
  while (!(await free())) {
    if (Date.now() > deadline) throw new Error(`port ${port} is in use (an \`npm start\` running?): the README's examples need it`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** The environment of a new shell: this process's, without Skipper's variables and the test runner's. */
function readerEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (/^(SKIPPER_|SKIPPY_|VITEST)/.test(k) || k === "NODE_ENV" || k === "DOCKER_HOST") delete env[k];
  return env;
}

/** `npm start`'s program, from the stand-in root; resolves with the admin token it prints at the end of its start-up. */
async function npmStart(root: string, env: NodeJS.ProcessEnv, lines: string[]): Promise<{ child: ChildProcess; adminToken: string }> {
  const child = spawn(process.execPath, ["scripts/start-local.mjs"], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
  let adminToken: string | undefined;
  let ready = false;
  await new Promise<void>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`npm start exited with ${code}:\n${lines.slice(-30).join("\n")}`)));
    for (const stream of [child.stdout!, child.stderr!])
      createInterface({ input: stream }).on("line", (line) => {
        lines.push(line);
        adminToken ??= /export SKIPPER_ADMIN_TOKEN=(\S+)/.exec(line)?.[1];
        ready ||= /^npm start: ready/.test(line);
        // The summary first, then the once-only banner: the end of start-up.
        if (ready && adminToken) resolve();
        if (ready && /^admin token: /.test(line)) reject(new Error(`npm start printed no admin token:\n${lines.join("\n")}`));
      });
  });
  return { child, adminToken: adminToken! };
}

function failure(b: ReadmeBlock, r: { exitCode?: number; output: string; cleanupOutput?: string }): string {
  const tail = (s: string) => (s.length > 20_000 ? `…${s.slice(-20_000)}` : s);
  return [
    `README.md:${b.line}: the block failed (exit ${r.exitCode ?? "?"})`,
    "--- block",
    b.text.trimEnd(),
    "--- output",
    tail(r.output.trim()),
    ...(r.cleanupOutput ? ["--- then the cleanup blocks ran", tail(r.cleanupOutput.trim())] : []),
  ].join("\n");
}

describe.skipIf(!dockerHost || !asRoot)("the README's shell examples, run in order against npm start", () => {
  let lock: { release(): Promise<void> } | undefined;
  let dir: string | undefined;
  let start: ChildProcess | undefined;
  const startLines: string[] = [];
  let shell: ReadmeShell | undefined;
  let failed: ReadmeBlock | undefined;
  let bundlesAbsentBefore: string[] = [];

  beforeAll(async () => {
    const skipped = blocks.filter((b) => b.skip);
    console.info(`README blocks skipped:\n${skipped.map((b) => `  README.md:${b.line} ${firstLine(b)}\n    ${b.skip}`).join("\n")}`);
    lock = await takeLock();
    for (const port of README_PORTS) await assertFree(port);
    bundlesAbsentBefore = BUNDLES.filter((b) => !existsSync(join(ROOT, b)));
    dir = await mkdtemp(join(tmpdir(), "skipper-readme-"));
    const root = join(dir, "repo");
    await mkdir(root);
    for (const entry of await readdir(ROOT)) if (!NOT_LINKED.has(entry)) await symlink(join(ROOT, entry), join(root, entry));
    const env = readerEnv();
    const started = await npmStart(root, { ...env, DOCKER_HOST: dockerHost, SKIPPY_WORK_DIR: join(dir, "work") }, startLines);
    start = started.child;
    const config = join(dir, "config");
    shell = ReadmeShell.start({
      cwd: root,
      dir,
      env: { ...env, SKIPPER_ADMIN_TOKEN: started.adminToken, XDG_CONFIG_HOME: config },
      blocks,
    });
  }, BLOCK_TIMEOUT_MS);

  afterAll(async () => {
    const cleanup = await shell?.close();
    if (cleanup) console.info(`cleanup blocks run as the shell exited:\n${cleanup}`);
    if (start) {
      await stopProcess(start); // as Ctrl-C does: it stops its controller and agent
      try {
        process.kill(-start.pid!, "SIGKILL"); // whatever of them is left, if it did not
      } catch {
        // none is
      }
    }
    if (dockerHost) await removeComposeProject(dockerHost, EXAMPLE_PROJECT);
    if (dir) await rm(dir, { recursive: true, force: true });
    for (const b of bundlesAbsentBefore) await rm(join(ROOT, b), { force: true });
    await lock?.release();
  }, BLOCK_TIMEOUT_MS);

  for (const block of blocks) {
    const name = `README.md:${block.line} ${firstLine(block)}`;
    if (block.skip) {
      it.skip(`${name} (skipped: ${block.skip})`, () => {});
      continue;
    }
    it(
      `${name} runs`,
      async (ctx) => {
        if (failed) ctx.skip(`the block at README.md:${failed.line} failed`);
        const r = await shell!.run(block, BLOCK_TIMEOUT_MS - 30_000);
        if (r.ok) return;
        failed = block;
        const started = startLines.slice(-15).map((l) => l.slice(0, 300));
        throw new Error(`${failure(block, r)}\n--- npm start's last lines\n${started.join("\n")}`);
      },
      BLOCK_TIMEOUT_MS,
    );
  }
});
