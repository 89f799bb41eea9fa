// The verbs the relay's process executors are made of, each one command on the SSH node
// (remote-process-scripts.ts) over the node's master connection: observe every module, inspect
// one, install a version (its verified tree sent as a tar stream), write a record, stop, start
// (or only switch the active symlink), read the log's end. A failed command becomes a
// ProcessError: PROCESS_FAILED (retriable: the connection or the node's passing trouble) with
// what the node said, VERSION_NOT_INSTALLED when the version to start is not there.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import type { Launch } from "../process/run-state.js";
import { ProcessError, throwIfAborted } from "../process/layout.js";
import type { VersionMeta } from "../process/versions.js";
import { remoteSh } from "./shell-quote.js";
import { parseModules, type RemoteModule, type RemoteRunState } from "./remote-process-observation.js";
import {
  INSPECT,
  INSTALL,
  OBSERVE,
  PUT,
  REMOTE_PROCESS_BASE,
  START,
  STOP,
  SUPERVISOR,
  TAIL,
  envFile,
  launchScript,
} from "./remote-process-scripts.js";

/** How one script ran on the node. */
export interface ScriptRun {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

export interface ScriptOptions {
  timeoutMs: number;
  /** A file whose bytes are the script's stdin. */
  inputFile?: string;
  /** The script's stdin (what may be secret goes here, never in its arguments). */
  input?: string;
  signal?: AbortSignal;
}

/** Runs a script with its arguments on the node (over ssh; a local sh in tests). */
export type ScriptRunner = (script: string, args: readonly string[], opts: ScriptOptions) => Promise<ScriptRun>;

/** A runner over ssh: `sshArgs(line)` are ssh's arguments for one remote line (SshLink.args). */
export function sshScriptRunner(sshArgs: (line: string) => string[]): ScriptRunner {
  return async (script, args, opts) => {
    const r = await execa("ssh", sshArgs(remoteSh(script, args)), {
      reject: false,
      timeout: opts.timeoutMs,
      forceKillAfterDelay: 2000,
      stripFinalNewline: false,
      maxBuffer: 4 * 1024 * 1024,
      ...stdinOf(opts),
      ...(opts.signal ? { cancelSignal: opts.signal } : {}),
    });
    return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout ?? ""), stderr: String(r.stderr ?? ""), timedOut: r.timedOut === true };
  };
}

/** execa's stdin options for a script's. */
export function stdinOf(opts: ScriptOptions): { inputFile: string } | { input: string } | { stdin: "ignore" } {
  if (opts.inputFile) return { inputFile: opts.inputFile };
  if (opts.input !== undefined) return { input: opts.input };
  return { stdin: "ignore" };
}

const QUICK_MS = 30_000;
const INSTALL_MS = 600_000;

export class RemoteProcesses {
  constructor(
    private readonly run: ScriptRunner,
    /** Where staging tar files are written on the relay. */
    private readonly scratchDir: string,
    private readonly base = REMOTE_PROCESS_BASE,
  ) {}

  /** Every module on the node. */
  async observe(signal?: AbortSignal): Promise<RemoteModule[]> {
    return parseModules(await this.call("observe the process modules", OBSERVE, [], { timeoutMs: QUICK_MS, signal }));
  }

  /** One module (undefined: the node has nothing of it), with `version`'s meta as `want`. */
  async inspect(module: string, version = "", signal?: AbortSignal): Promise<RemoteModule | undefined> {
    const out = await this.call(`inspect ${module}`, INSPECT, [module, version], { timeoutMs: QUICK_MS, signal });
    const [m] = parseModules(out);
    if (m) return m;
    // No module directory, but a "want" line cannot come without one: nothing is there.
    return undefined;
  }

  /** Installs `tree` (a verified, unpacked artifact on the relay) as `version`, with its meta. */
  async install(module: string, version: string, tree: string, meta: VersionMeta, signal?: AbortSignal): Promise<void> {
    await mkdir(this.scratchDir, { recursive: true });
    const dir = await mkdtemp(join(this.scratchDir, ".send-"));
    try {
      const tar = join(dir, "send.tar");
      await writeFile(join(dir, "meta.json"), `${JSON.stringify(meta)}\n`, { mode: 0o600 });
      // tree/ (the version's files) and meta.json; owned by nobody in particular: unpacked by the
      // node's user, the files are that user's.
      const owner = ["--owner=0", "--group=0", "--numeric-owner"];
      const made = await execa("tar", ["-cf", tar, ...owner, "-C", dir, "meta.json", "--transform", "s,^\\.,tree,S", "-C", tree, "."], {
        reject: false,
        ...(signal ? { cancelSignal: signal } : {}),
      });
      throwIfAborted(signal);
      if (made.exitCode !== 0)
        throw new ProcessError("PROCESS_FAILED", `cannot pack ${module} ${version}: ${String(made.stderr).slice(0, 300)}`);
      await this.call(`install ${module} ${version}`, INSTALL, [module, version], {
        timeoutMs: INSTALL_MS,
        inputFile: tar,
        signal,
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  /** Records a version's meta (a redeploy may change its command, never its files). */
  async putMeta(module: string, version: string, meta: VersionMeta): Promise<void> {
    const input = `${JSON.stringify(meta)}\n`;
    await this.call(`record ${module} ${version}`, PUT, [module, `.${version}.json`], { timeoutMs: QUICK_MS, input });
  }

  /** Records the relay's state of the module. */
  async putState(module: string, state: RemoteRunState): Promise<void> {
    const input = `${JSON.stringify(state)}\n`;
    await this.call(`record ${module}'s state`, PUT, [module, ".run/state.json"], { timeoutMs: QUICK_MS, input });
  }

  /** Stops the module's supervisor and process (SIGKILL after `graceMs`); the pid that ran, 0 when none. */
  async stop(module: string, graceMs: number): Promise<number> {
    const tenths = String(Math.max(1, Math.ceil(graceMs / 100)));
    const out = await this.call(`stop ${module}`, STOP, [module, tenths], { timeoutMs: graceMs + QUICK_MS });
    return Number(/^was (\d+)$/m.exec(out)?.[1] ?? 0);
  }

  /**
   * Makes `launch.version` active and, with `run`, starts its supervisor: the pid of the process
   * started. Refused (PROCESS_FAILED) while a supervisor or process of the module lives: stop first.
   */
  async start(launch: Launch, mode: "run" | "switch", signal?: AbortSignal): Promise<number> {
    // The launch script's lines, then its environment's: what may be secret stays on stdin.
    const script = launchScript(launch);
    const args = [launch.module, launch.version, SUPERVISOR, mode, String(script.split("\n").length)];
    const input = `${script}\n${envFile(launch)}`;
    const out = await this.call(`start ${launch.module} ${launch.version}`, START, args, { timeoutMs: QUICK_MS, signal, input });
    return Number(/^pid (\d+)$/m.exec(out)?.[1] ?? 0);
  }

  /** Points the module's active symlink at `version` without starting anything. */
  async switchActive(module: string, version: string): Promise<void> {
    await this.call(`switch ${module} to ${version}`, START, [module, version, "", "switch", "0"], { timeoutMs: QUICK_MS });
  }

  /** The end of the module's log. */
  async tail(module: string): Promise<string> {
    return this.call(`read ${module}'s log`, TAIL, [module], { timeoutMs: QUICK_MS }).catch(() => "");
  }

  private async call(what: string, script: string, args: string[], opts: ScriptOptions): Promise<string> {
    const r = await this.run(script, [this.base, ...args], opts);
    throwIfAborted(opts.signal);
    if (r.exitCode === 0) return r.stdout;
    const said = r.timedOut ? "timed out" : r.stderr.trim().split("\n").slice(-3).join(" ").slice(0, 500) || `exit ${r.exitCode}`;
    if (r.exitCode === 4) throw new ProcessError("VERSION_NOT_INSTALLED", said);
    // ssh's own failures exit 255: the connection, not the node's answer.
    const where = r.exitCode === 255 ? "ssh" : "on the node";
    throw new ProcessError("PROCESS_FAILED", `could not ${what} (${where}): ${said}`);
  }
}
