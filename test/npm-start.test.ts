// `npm start` as a person meets it (issue 37): what it runs after the build,
// `node scripts/start-local.mjs`, from a temporary directory that stands for the checkout (its
// ./data and ./.skippy land there), without any SKIPPER_/SKIPPY_ variable or DOCKER_HOST, as
// root so that it starts the private Docker engine it does by default (its own address pool).
//
// - The first screen: a short summary with the controller's and the dashboard's URLs, the admin
//   token's banner last, no JSON; after a CLI command the banner is still on the screen; the
//   JSON logs (access log included) are in the data directory's log files.
// - Ownership: Ctrl-C leaves the private engine running when it runs a container npm start's
//   agent did not deploy, and says how to stop it (the test runs that command); a private engine
//   with only its own containers is stopped.
// - The store switch: the quick start on the file store, then PostgreSQL (a database of its own on
//   the tests' server) as the README writes it: the CLI, logged in at the quick start, lists the
//   local node on the new store.
// Nothing waits for a fixed time: each step waits for the line or state it needs.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { execa } from "execa";
import { afterAll, describe, expect, it } from "vitest";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import { freePort, stopProcess, waitFor } from "./helpers/processes.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const START = join(ROOT, "scripts", "start-local.mjs");
const CLI = join(ROOT, "dist", "cli", "main.js");
const ENGINE_SCRIPT = join(ROOT, "scripts", "docker-engine.sh");
const asRoot = process.getuid?.() === 0;
const hasDockerd = (() => {
  try {
    execFileSync("sh", ["-c", "command -v dockerd"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();
if (!asRoot || !hasDockerd) console.warn("!!! npm-start.test.ts SKIPPED: npm start's private Docker engine needs root and dockerd");
const SCREEN = 24;
/** How long a wait for one line of npm start may take (a private engine's first start included). */
const LINE_DEADLINE_MS = 90_000;

/** A running `npm start`: every line it printed, and a wait for the next one matching. */
interface Started {
  child: ChildProcess;
  lines: string[];
  line(re: RegExp, from?: number, deadlineMs?: number): Promise<string>;
  /** Ctrl-C, as a terminal sends it; resolves when it exited. */
  interrupt(): Promise<void>;
}

const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function tempDir(prefix: string): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
}

/** The environment of a fresh shell: no Skipper variable, no DOCKER_HOST. */
function shellEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (/^(SKIPPER_|SKIPPY_|VITEST)/.test(k) || k === "NODE_ENV" || k === "DOCKER_HOST") delete env[k];
  return { ...env, ...extra };
}

function npmStart(cwd: string, args: string[], env: NodeJS.ProcessEnv): Started {
  const child = spawn(process.execPath, [START, ...args], { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  const lines: string[] = [];
  const waiting: Array<() => void> = [];
  for (const s of [child.stdout!, child.stderr!])
    createInterface({ input: s }).on("line", (l) => {
      lines.push(l);
      for (const w of waiting.splice(0)) w();
    });
  const exited = new Promise<void>((r) =>
    child.once("exit", () => {
      r();
      for (const w of waiting.splice(0)) w();
    }),
  );
  // A deadline, not a delay: a line that never comes fails the wait, and the test's cleanup runs.
  const line = (re: RegExp, from = 0, deadlineMs = LINE_DEADLINE_MS) =>
    new Promise<string>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`npm start printed no ${re} within ${deadlineMs} ms:\n${lines.join("\n")}`)),
        deadlineMs,
      );
      const check = () => {
        const found = lines.slice(from).find((l) => re.test(l));
        if (found !== undefined) resolve(found);
        else if (child.exitCode !== null || child.signalCode !== null)
          reject(new Error(`npm start exited before printing ${re}:\n${lines.join("\n")}`));
        else return void waiting.push(check);
        clearTimeout(timer);
      };
      check();
    });
  return {
    child,
    lines,
    line,
    interrupt: async () => {
      child.kill("SIGINT");
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`npm start did not stop within 60 s of Ctrl-C:\n${lines.join("\n")}`)), 60_000);
      });
      await Promise.race([exited, late]).finally(() => clearTimeout(timer));
    },
  };
}

/** Runs the built CLI with `args`; resolves with its output (rejects on a non-zero exit). */
async function cli(args: string[], env: NodeJS.ProcessEnv, input?: string): Promise<string> {
  const r = await execa(process.execPath, [CLI, ...args], { env, input, reject: false });
  if (r.exitCode !== 0) throw new Error(`skipper ${args.join(" ")} exited ${r.exitCode}: ${r.stderr}${r.stdout}`);
  return r.stdout;
}

const engineAnswers = async (host: string) =>
  (await execa("docker", ["version", "--format", "{{.Server.Version}}"], { env: { ...process.env, DOCKER_HOST: host }, reject: false }))
    .exitCode === 0;

/** Waits until `skipper nodes` shows host-1 ONLINE. */
const nodeOnline = (args: string[], env: NodeJS.ProcessEnv) =>
  waitFor("host-1 to be listed ONLINE by the CLI", async () => {
    const out = await cli([...args, "nodes"], env);
    return /^host-1\s+ONLINE/m.test(out) ? out : undefined;
  });

describe.skipIf(!asRoot || !hasDockerd)("npm start", () => {
  it("shows a short first screen: the URLs, the admin token banner last, no JSON; the logs go to the data directory", async () => {
    const dir = await tempDir("skipper-npm-start-");
    const start = npmStart(dir, ["--listen", "127.0.0.1:0"], shellEnv({ SKIPPER_DOCKER_ADDRESS_POOL: "10.209.0.0/16" }));
    try {
      const ready = await start.line(/^npm start: ready/);
      const tokenLine = await start.line(/^ {2}export SKIPPER_ADMIN_TOKEN=ska\.\S+$/);
      const token = tokenLine.trim().slice("export SKIPPER_ADMIN_TOKEN=".length);
      const screen = start.lines.slice(0, start.lines.indexOf(tokenLine) + 1);
      const url = /controller\s+(https:\/\/127\.0\.0\.1:\d+)/.exec(screen.join("\n"))?.[1];
      expect(url, screen.join("\n")).toBeDefined();
      expect(screen).toContain(ready);
      expect(screen.some((l) => l.includes(`dashboard   ${url}/ui/`))).toBe(true);
      expect(screen.some((l) => /engine\s+unix:\/\/.*\.skippy\/docker\/docker\.sock \(private to this checkout, started now/.test(l))).toBe(
        true,
      );
      expect(screen.some((l) => /agent\s+host-1: token registered now/.test(l))).toBe(true);
      expect(screen.length).toBeLessThanOrEqual(SCREEN);
      expect(screen.filter((l) => l.trimStart().startsWith("{"))).toEqual([]);
      expect(screen.join("\n")).not.toContain("readable by other users");
      // The banner is the last thing start-up printed, and printed once.
      expect(screen.filter((l) => l.includes("export SKIPPER_ADMIN_TOKEN="))).toHaveLength(1);
      expect(screen.at(-2)).toBe("Admin token (shown only now; stored as a SHA-256 hash):");

      // A CLI command, as the summary's next step says: the banner is still on the screen after it.
      const cliEnv = shellEnv({ XDG_CONFIG_HOME: join(dir, "config") });
      await cli(["login", "--server", url!, "--ca-file", join(dir, "data", "tls", "ca.crt"), "--token-stdin"], cliEnv, token);
      await nodeOnline([], cliEnv);
      const after = start.lines.slice(-SCREEN);
      expect(after.join("\n"), start.lines.join("\n")).toContain(tokenLine);
      expect(start.lines.filter((l) => l.trimStart().startsWith("{"))).toEqual([]);

      // The JSON logs are in the data directory: the controller's, access log included, and the agent's.
      const logs = join(dir, "data", "logs");
      const day = readdirSync(logs)[0]!;
      // (Reads log at debug: the access log's line at info is npm start's own registration of host-1.)
      expect(readFileSync(join(logs, day, "skipper-controller.ndjson"), "utf8")).toContain('"action":"NodeService.RegisterNode"');
      expect(readFileSync(join(logs, day, "skippy.ndjson"), "utf8")).toContain('"service":"skippy"');

      // Something npm start's agent did not deploy runs on its private engine: Ctrl-C leaves the engine running, and says how to stop it.
      const host = /engine\s+(unix:\/\/\S+)/.exec(screen.join("\n"))![1]!;
      await execa("docker", ["run", "-d", "--name", "not-npm-starts", "skipper-busybox:local", "sleep", "600"], {
        env: { ...process.env, DOCKER_HOST: host },
      });
      await start.interrupt();
      const left = start.lines.find((l) => l.includes("left the private engine"));
      expect(left, start.lines.join("\n")).toContain("not-npm-starts");
      expect(await engineAnswers(host)).toBe(true);
      const stopCommand = /stop it with: (scripts\/docker-engine\.sh stop \S+)/.exec(left!)![1]!;
      await execa("docker", ["rm", "-f", "not-npm-starts"], { env: { ...process.env, DOCKER_HOST: host } });
      await execa(join(ROOT, stopCommand.split(" ")[0]!), stopCommand.split(" ").slice(1));
      expect(await engineAnswers(host)).toBe(false);
    } finally {
      await stopProcess(start.child);
      await execa(ENGINE_SCRIPT, ["stop", join(dir, ".skippy", "docker")], { reject: false });
    }
  }, 240_000);

  it.skipIf(!pgUrl())(
    "switched to PostgreSQL as the README writes it, it registers host-1 on the new store and the CLI lists it",
    async () => {
      const readme = readFileSync(join(ROOT, "README.md"), "utf8");
      const pgSection = readme.slice(readme.indexOf("## PostgreSQL and several controllers"));
      expect(pgSection).toContain('npm start -- --store "$SKIPPER_STORE_URL"');
      const storeUrl = await freshDatabase("npm_start_switch");
      const dir = await tempDir("skipper-npm-start-pg-");
      const listen = `127.0.0.1:${await freePort()}`;
      const cliEnv = shellEnv({ XDG_CONFIG_HOME: join(dir, "config") });

      // The quick start: the file store, the token pasted into the shell, the CLI logged in.
      const first = npmStart(dir, ["--listen", listen], shellEnv({ SKIPPER_START_ENGINE: "shared" }));
      let token: string;
      try {
        await first.line(/^npm start: ready/);
        token = (await first.line(/export SKIPPER_ADMIN_TOKEN=/)).trim().slice("export SKIPPER_ADMIN_TOKEN=".length);
        await cli(
          ["login", "--server", `https://${listen}`, "--ca-file", join(dir, "data", "tls", "ca.crt"), "--token-stdin"],
          cliEnv,
          token,
        );
        await nodeOnline([], cliEnv);
      } finally {
        await first.interrupt();
      }

      // The README's switch, in the same shell (SKIPPER_ADMIN_TOKEN exported as the quick start says).
      const second = npmStart(
        dir,
        ["--store", storeUrl, "--listen", listen],
        shellEnv({ SKIPPER_ADMIN_TOKEN: token, SKIPPER_DOCKER_ADDRESS_POOL: "10.208.0.0/16" }),
      );
      try {
        const replaced = await second.line(
          /^npm start: the token in .* was issued by the file store in .* does not know it: registered now on PostgreSQL/,
        );
        expect(replaced).toContain("npm_start_switch");
        await second.line(/^npm start: ready/);
        const nodes = await nodeOnline([], cliEnv);
        expect(nodes).toContain("host-1");
        expect(second.lines.join("\n")).not.toMatch(/invalid node token/);
        const host = /engine\s+(unix:\/\/\S+)/.exec(second.lines.join("\n"))![1]!;
        await second.interrupt();
        // Nothing but its own agent used the private engine it started: Ctrl-C stopped it.
        expect(second.lines.some((l) => l.startsWith("npm start: stopping the private engine npm start started"))).toBe(true);
        expect(await engineAnswers(host)).toBe(false);
      } finally {
        await stopProcess(second.child);
        await execa(ENGINE_SCRIPT, ["stop", join(dir, ".skippy", "docker")], { reject: false });
      }
    },
    240_000,
  );
});
