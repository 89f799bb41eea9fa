// `skippy updater [agent flags...]`: skippy-updater, the small supervisor the service runs. It keeps
// the agent's versions under <state-dir>/updater/ (update-files.ts), runs
// `node <updater>/versions/<current's dir>/skippy.mjs <the same flags>` as its child (in its own
// process group), restarts it when it exits, prunes old versions after an update,
// and runs the update machine (updater-machine.ts) on what it sees: request.json from the agent's
// update_agent executor, the child's exits, confirmed.json from the new agent, and the clock. It
// imports none of the agent's modules, so a broken agent version cannot break the updater.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdir, realpath, unlink } from "node:fs/promises";
import { homedir } from "node:os";
import { join, resolve, sep } from "node:path";
import { accessSync, constants, mkdirSync } from "node:fs";
import { createLogger, type Logger } from "../../common/logging/logger.js";
import { checkStaged, currentSlot, pruneVersions, seedFromBundle } from "./updater-bundles.js";
import {
  atRest,
  DEFAULT_MACHINE_CONFIG,
  type MachineAction,
  type MachineConfig,
  type MachineEvent,
  type MachineState,
  recoverState,
  type Slot,
  step,
  takesRequests,
  toStateFile,
} from "./updater-machine.js";
import {
  BUNDLE_SHA256_ENV,
  bundlePathOf,
  readConfirmed,
  readUpdaterState,
  sha256File,
  switchVersionLink,
  takeUpdateRequest,
  UPDATER_DIR_ENV,
  UpdateFileError,
  updaterDirOf,
  updaterPaths,
  writeUpdaterState,
} from "./update-files.js";

/** How often the updater looks at its directory and its clock. */
export const POLL_MS = 500;

export interface UpdaterOptions {
  /** The updater directory (<state-dir>/updater). */
  dir: string;
  /** The bundle the updater was started from (seeded into versions/). */
  bundle: string;
  /** The agent's flags, passed on to the child. */
  args: string[];
  env: NodeJS.ProcessEnv;
  log: Logger;
  config?: MachineConfig;
}

/** skippy-updater: one machine, one child, one directory. */
export class Updater {
  private state!: MachineState;
  private child: ChildProcess | undefined;
  private queue: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private stopping = false;
  private readonly cfg: MachineConfig;
  private exited!: (code: number) => void;
  /** Settles with the exit code once the updater stopped (a signal, and its child exited). */
  readonly done = new Promise<number>((r) => (this.exited = r));

  constructor(private readonly opts: UpdaterOptions) {
    this.cfg = opts.config ?? DEFAULT_MACHINE_CONFIG;
  }

  /** Seeds versions/, recovers the machine from state.json, starts the child and the poll. */
  async start(): Promise<void> {
    const { dir, log } = this.opts;
    await mkdir(updaterPaths(dir).versions, { recursive: true });
    const seeded = await seedFromBundle(dir, this.opts.bundle);
    if (seeded.installed) {
      log.info(
        { action: "updater_seed", metadata: { version: seeded.current.version, sha256: seeded.current.sha256 } },
        `installed bundle ${seeded.current.version} is current`,
      );
    }
    const file = await readUpdaterState(dir).catch((e: Error) => {
      log.warn({ action: "updater_recover", result: "error", metadata: { message: e.message } }, "state.json unreadable: starting at rest");
      return undefined;
    });
    // A bundle an admin installed since replaces whatever an update was doing.
    const first = recoverState(seeded.installed ? undefined : file, (await currentSlot(dir)) ?? seeded.current, Date.now(), this.cfg);
    this.state = first.state;
    log.info(
      { action: "updater_start", metadata: { dir, state: this.state.name, running: this.state.running } },
      `skippy-updater in ${this.state.name}, running ${this.state.running?.version}`,
    );
    await this.run(first.actions, undefined);
    this.enqueue({ type: "tick" });
    this.timer = setInterval(() => this.poll(), POLL_MS);
  }

  /**
   * SIGTERM/SIGINT: passed on to the agent alone (it finishes the order it runs; its compose
   * commands are not signalled); once it exited, whatever is left of its process group is killed
   * and the updater exits. No child is started once stopping.
   */
  stop(signal: NodeJS.Signals): void {
    if (this.stopping) return;
    this.stopping = true;
    clearInterval(this.timer);
    this.opts.log.info({ action: "updater_stop", metadata: { signal } }, `stopping: ${signal} to the agent`);
    if (!this.child) this.exited(0);
    else this.child.kill(signal);
  }

  // One look at the directory, then the clock.
  private poll(): void {
    this.serially(async () => {
      if (this.stopping) return;
      const { dir } = this.opts;
      // Taken (renamed) before it is read, and only when the machine takes one: what is renamed is seen.
      if (takesRequests(this.state.name)) {
        try {
          const req = await takeUpdateRequest(dir);
          if (req) await this.handle({ type: "request", request: req });
        } catch (e) {
          if (e instanceof UpdateFileError) await this.handle({ type: "requestInvalid", message: e.message });
          else this.warn("request", e);
        }
      }
      if (!atRest(this.state.name)) {
        const confirmed = await readConfirmed(dir).catch(() => undefined);
        if (confirmed) await this.handle({ type: "confirmed", sha256: confirmed.sha256 });
      }
      await this.handle({ type: "tick" });
    });
  }

  private enqueue(e: MachineEvent): void {
    this.serially(() => this.handle(e));
  }

  // One event at a time, in order; a failure is logged and the next one still runs.
  private serially(fn: () => Promise<void>): void {
    this.queue = this.queue.then(fn).catch((e: unknown) => this.warn("event", e));
  }

  private async handle(e: MachineEvent): Promise<void> {
    if (this.stopping) return;
    const before = this.state;
    const next = step(before, e, Date.now(), this.cfg);
    this.state = next.state;
    await this.run(next.actions, before);
  }

  // The actions in order; one that fails is logged and the next runs, but a failed link switch ends
  // the step: the machine hears it (switchFailed) and nothing after it (the child's start) runs.
  private async run(actions: MachineAction[], before: MachineState | undefined): Promise<void> {
    for (const a of actions) {
      try {
        await this.act(a, before);
      } catch (e) {
        this.warn(a.type, e);
        if (a.type === "switchLinks") return this.handle({ type: "switchFailed", message: (e as Error).message });
      }
    }
  }

  private async act(a: MachineAction, before: MachineState | undefined): Promise<void> {
    const { dir, log } = this.opts;
    switch (a.type) {
      case "validate":
        // In the background: STAGED has its own deadline, and the poll goes on meanwhile.
        void checkStaged(dir, a.target)
          .catch((e: Error) => e.message)
          .then((error) => this.enqueue({ type: "validated", sha256: a.target.sha256, error }));
        return;
      case "stopChild":
        this.child?.kill("SIGTERM");
        return;
      case "killChild":
        // The whole process group: compose commands the agent ran die with it, not orphaned.
        if (this.child) killGroup(this.child, "SIGKILL");
        return;
      case "switchLinks":
        if (a.previous) await switchVersionLink(dir, "previous", a.previous);
        await switchVersionLink(dir, "current", a.current);
        log.info({ action: "updater_switch", metadata: { current: a.current, previous: a.previous } }, `current -> versions/${a.current}`);
        return;
      case "startChild":
        if (this.stopping) return;
        await unlink(updaterPaths(dir).confirmed).catch(() => undefined);
        await this.spawnChild(a.slot).catch((e: Error) => {
          log.warn(
            { action: "updater_child", result: "error", metadata: { message: e.message } },
            `could not start the agent: ${e.message}`,
          );
          this.enqueue({ type: "childExited", code: null, signal: null });
        });
        return;
      case "prune": {
        const keep = [this.state.running, this.state.previous, this.state.target].flatMap((x) => (x ? [x.dir] : []));
        const removed = await pruneVersions(dir, keep);
        if (removed.length) log.info({ action: "updater_prune", metadata: { removed } }, `removed old versions: ${removed.join(", ")}`);
        return;
      }
      case "writeState":
        await writeUpdaterState(dir, toStateFile(this.state));
        this.logTransition(before);
        return;
      case "log":
        log.info({ action: "updater", metadata: { state: this.state.name } }, a.message);
    }
  }

  // Runs versions/<slot.dir>/skippy.mjs itself (not through the `current` link, which may not have
  // been switched), telling it the SHA-256 of exactly that file: a confirmation names what ran. In
  // its own process group (detached), so a SIGKILL reaches the commands it runs.
  private async spawnChild(slot: Slot): Promise<void> {
    const { dir, args, env, log } = this.opts;
    const { version } = slot;
    const versions = await realpath(updaterPaths(dir).versions);
    const file = await realpath(bundlePathOf(dir, slot.dir));
    if (!file.startsWith(versions + sep)) throw new Error(`versions/${slot.dir}/skippy.mjs leads to ${file}, outside versions/`);
    const sha256 = await sha256File(file);
    if (sha256 !== slot.sha256)
      log.warn({ action: "updater_child", metadata: { file, sha256, expected: slot.sha256 } }, `${file} is not ${version}'s bundle`);
    if (this.stopping) return;
    const child = spawn(process.execPath, [file, ...args], {
      env: { ...env, [UPDATER_DIR_ENV]: dir, [BUNDLE_SHA256_ENV]: sha256 },
      stdio: "inherit",
      detached: true,
    });
    this.child = child;
    log.info({ action: "updater_child", metadata: { pid: child.pid, version, sha256 } }, `started the agent ${version} (pid ${child.pid})`);
    let reported = false;
    const exited = (code: number | null, signal: string | null) => {
      if (reported) return;
      reported = true;
      if (this.child === child) this.child = undefined;
      log.info(
        { action: "updater_child", result: "exited", metadata: { pid: child.pid, version, code, signal } },
        `the agent ${version} exited (${signal ?? `code ${code}`})`,
      );
      if (this.stopping) {
        // What the agent left running in its group does not outlive the updater (systemd's
        // KillMode=mixed would kill it with the unit's cgroup; a terminal would not).
        killGroup(child, "SIGKILL");
        this.exited(code ?? 0);
      } else this.enqueue({ type: "childExited", code, signal });
    };
    child.once("exit", exited);
    child.once("error", (e) => {
      log.warn({ action: "updater_child", result: "error", metadata: { message: e.message } }, `could not start the agent: ${e.message}`);
      exited(null, null);
    });
  }

  private logTransition(before: MachineState | undefined): void {
    const s = this.state;
    if (before && before.name === s.name && before.message === s.message) return;
    const metadata = {
      from: before?.name,
      to: s.name,
      target: s.target,
      previous: s.previous,
      running: s.running,
      deadline_at: s.deadlineAt,
    };
    const level = s.name === "FAILED" || s.name === "ROLLING_BACK" ? "warn" : "info";
    this.opts.log[level]({ action: "updater_state", result: s.name, metadata }, `${before?.name ?? "start"} -> ${s.name}: ${s.message}`);
  }

  private warn(what: string, e: unknown): void {
    this.opts.log.warn(
      { action: "updater", result: "error", metadata: { step: what, message: (e as Error).message } },
      `${what}: ${(e as Error).message}`,
    );
  }
}

// A signal to the child's process group (it leads one: spawned detached); to the child alone when
// that fails (no such group any more).
function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid !== undefined) return void process.kill(-child.pid, signal);
  } catch {}
  child.kill(signal);
}

/** The agent's --state-dir as its flags, its environment and its defaults give it (agent/config.ts). */
export function stateDirOf(args: string[], env: NodeJS.ProcessEnv): string {
  let value: string | undefined;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--state-dir") value = args[i + 1];
    else if (args[i]!.startsWith("--state-dir=")) value = args[i]!.slice("--state-dir=".length);
  }
  return resolve(value ?? env.SKIPPY_STATE_DIR ?? writableOr("/var/lib/skippy", join(homedir(), ".local", "state", "skippy")));
}

function writableOr(preferred: string, fallback: string): string {
  try {
    mkdirSync(preferred, { recursive: true });
    accessSync(preferred, constants.W_OK);
    return preferred;
  } catch {
    return fallback;
  }
}

const USAGE = `Usage: skippy updater [agent flags...]

Runs skippy-updater: the agent (node <state-dir>/updater/current/skippy.mjs [agent flags...]) as
its child, started again when it exits, switched to the versions the agent's update_agent orders
stage, and switched back by itself when a new version does not reach the controller in time.
The flags are the agent's (skippy --help); the updater reads only --state-dir (SKIPPY_STATE_DIR).
The service skippy install writes runs this.
`;

/** `skippy updater [agent flags...]`: runs until SIGTERM/SIGINT; returns the exit code. */
export async function updaterCommand(args: string[], bundle: string | undefined): Promise<number> {
  // The child would print its usage and exit, and be started again, forever.
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(USAGE);
    return 0;
  }
  const { logger, close } = createLogger({ service: "skippy-updater", level: process.env.SKIPPY_LOG_LEVEL ?? "info" });
  if (!bundle) {
    process.stderr.write("skippy updater: runs only from the one-file bundle (npm run bundle:agent), which it copies into its versions\n");
    return 2;
  }
  const updater = new Updater({
    dir: updaterDirOf(stateDirOf(args, process.env)),
    bundle: resolve(bundle),
    args,
    env: process.env,
    log: logger,
  });
  for (const sig of ["SIGTERM", "SIGINT"] as const) process.on(sig, () => updater.stop(sig));
  try {
    await updater.start();
  } catch (e) {
    logger.error({ action: "updater_start", result: "error", metadata: { message: (e as Error).message } }, (e as Error).message);
    close();
    process.stderr.write(`skippy updater: ${(e as Error).message}\n`);
    return 1;
  }
  const code = await updater.done;
  close();
  return code;
}
