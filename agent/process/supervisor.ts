// The agent's own process supervisor, for hosts without systemd. A module's process is started
// detached (its own session, so it outlives an agent restart) through the active symlink, with
// stdout and stderr appended to <workDir>/logs/<module>.log and only the order's environment (plus
// PATH): the agent's own variables hold its node token and must not leak into a module. A process
// is recognised by pid *and* start time from /proc, so after a restart the agent adopts its
// process, and a pid the kernel has since given to another program is never taken for it.
import { spawn } from "node:child_process";
import { mkdir, open, readFile, realpath } from "node:fs/promises";
import { dirname, isAbsolute, resolve, sep } from "node:path";
import { sleep } from "../engine/sleep.js";
import { ProcessError, modulePaths } from "./layout.js";
import type { Launch, ProcessRunner, RunState, Started } from "./run-state.js";

/** The line written to the log before each start, so a failure's tail can begin there. */
export const START_MARK = "--- skipper: starting";
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** The start time of a live process (field 22 of /proc/<pid>/stat), undefined when it is gone. */
export async function processStartTicks(pid: number): Promise<string | undefined> {
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  let stat: string;
  try {
    stat = await readFile(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may hold spaces: count from the last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const state = fields[0];
  if (state === "Z" || state === "X") return undefined; // exited, not yet reaped
  return fields[19];
}

/** Whether `pid` is still the process that was started at `startTicks`. */
export async function isSameProcess(pid: number, startTicks: string): Promise<boolean> {
  return startTicks !== "" && (await processStartTicks(pid)) === startTicks;
}

/**
 * The program to run: argv[0] resolved under `dir` (the module's active symlink, or a version
 * directory to check before switching). It must stay inside, also after following symlinks.
 */
export async function resolveProgram(dir: string, argv0: string): Promise<string> {
  const program = resolve(dir, argv0);
  const escapes = (root: string, p: string) => p !== root && !p.startsWith(root + sep);
  if (isAbsolute(argv0) || escapes(dir, program))
    throw new ProcessError("PROCESS_INVALID", `argv[0] ${JSON.stringify(argv0)} must be a path inside the version directory`);
  let realDir: string;
  let realProgram: string;
  try {
    realDir = await realpath(dir);
    realProgram = await realpath(program);
  } catch {
    throw new ProcessError("PROCESS_INVALID", `argv[0] ${JSON.stringify(argv0)} does not exist in the version`);
  }
  if (escapes(realDir, realProgram))
    throw new ProcessError("PROCESS_INVALID", `argv[0] ${JSON.stringify(argv0)} leads outside the version directory`);
  return program;
}

/** The environment a module's process gets: the order's, on top of a plain PATH. */
export function processEnv(env: Record<string, string>): Record<string, string> {
  return { PATH: process.env.PATH ?? DEFAULT_PATH, ...env };
}

/** Starts the module's active version detached, its output appended to the module's log. */
async function start(workDir: string, launch: Launch): Promise<Started> {
  const paths = modulePaths(workDir, launch.module);
  const program = await resolveProgram(paths.active, launch.argv[0] ?? "");
  await mkdir(dirname(paths.log), { recursive: true });
  const log = await open(paths.log, "a", 0o640);
  let pid: number;
  try {
    await log.write(`${START_MARK} ${launch.module} ${launch.version} at ${new Date().toISOString()}\n`);
    const child = spawn(program, launch.argv.slice(1), {
      cwd: paths.active,
      env: processEnv(launch.env),
      detached: true,
      stdio: ["ignore", log.fd, log.fd],
    });
    pid = await new Promise<number>((ok, fail) => {
      child.once("spawn", () => ok(child.pid!));
      child.once("error", (e) => fail(new ProcessError("PROCESS_FAILED", `cannot start ${launch.argv[0]}: ${e.message}`)));
    });
    child.on("error", () => undefined);
    child.unref();
  } finally {
    await log.close();
  }
  const startTicks = await processStartTicks(pid);
  // A program that dies at once is reported by the settle check; record what we know.
  return { pid, startTicks: startTicks ?? "", systemdUnit: "" };
}

/** SIGTERM to the process group, SIGKILL when it is still there after `graceMs`. */
async function stop(_workDir: string, state: RunState, graceMs: number): Promise<void> {
  if (!(await isSameProcess(state.pid, state.startTicks))) return;
  signalGroup(state.pid, "SIGTERM");
  if (await waitGone(state, graceMs)) return;
  signalGroup(state.pid, "SIGKILL");
  if (!(await waitGone(state, 5000))) throw new ProcessError("PROCESS_FAILED", `process ${state.pid} of ${state.module} survived SIGKILL`);
}

async function livePid(_workDir: string, state: RunState): Promise<number> {
  return (await isSameProcess(state.pid, state.startTicks)) ? state.pid : 0;
}

/** The agent's own supervisor as a ProcessRunner. */
export const agentRunner: ProcessRunner = { kind: "agent", start, stop, livePid };

// The process was started as a session (and group) leader, so -pid reaches what it spawned too.
function signalGroup(pid: number, sig: NodeJS.Signals): void {
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, sig);
      return;
    } catch {
      // no such group: try the process alone
    }
  }
}

async function waitGone(state: RunState, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  const never = new AbortController().signal;
  while (await isSameProcess(state.pid, state.startTicks)) {
    if (Date.now() >= deadline) return false;
    await sleep(25, never);
  }
  return true;
}

/** The last `bytes` of the module's log, for a PROCESS_EXITED message. */
export async function logTail(workDir: string, module: string, bytes = 2048): Promise<string> {
  try {
    const fh = await open(modulePaths(workDir, module).log, "r");
    try {
      const { size } = await fh.stat();
      const len = Math.min(size, bytes);
      const buf = Buffer.alloc(len);
      await fh.read(buf, 0, len, size - len);
      return buf.toString("utf8");
    } finally {
      await fh.close();
    }
  } catch {
    return "";
  }
}
