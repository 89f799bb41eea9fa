// systemd as a module's supervisor, on hosts where it runs (and the agent is root, which writing
// units needs). The unit's ExecStart and WorkingDirectory go through the active symlink, so a
// version switch is a symlink rename plus `systemctl restart`; the unit is rewritten only to carry
// the command and environment. Elsewhere the agent's own supervisor is used (supervisor.ts).
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { runCommand } from "../engine/run-command.js";
import { ProcessError, modulePaths, writeFileAtomic } from "./layout.js";
import type { Launch, ProcessRunner, RunState, Started } from "./run-state.js";
import { agentRunner, processEnv, processStartTicks, resolveProgram } from "./supervisor.js";

const UNIT_DIR = "/etc/systemd/system";
const SYSTEMCTL_TIMEOUT_MS = 60_000;

/** Whether systemd manages this host and the agent may write units (root). */
export function systemdUsable(): boolean {
  return existsSync("/run/systemd/system") && process.getuid?.() === 0;
}

/** The runner to use for new starts: systemd when `useSystemd` (default: detected), else the agent. */
export function chooseRunner(useSystemd: boolean = systemdUsable()): ProcessRunner {
  return useSystemd ? systemdRunner : agentRunner;
}

/** The runner that started the process `state` records. */
export function runnerOf(state: RunState): ProcessRunner {
  return state.systemdUnit ? systemdRunner : agentRunner;
}

/** skipper-<module>.service */
export function unitName(module: string): string {
  return `skipper-${module}.service`;
}

/** The unit file text for a module; `program` is argv[0] as an absolute path through the active symlink. */
export function unitText(workDir: string, launch: Launch, program: string, graceMs = 10_000): string {
  const paths = modulePaths(workDir, launch.module);
  const env = Object.entries(processEnv(launch.env)).map(([k, v]) => `Environment=${quote(`${k}=${v}`)}`);
  return [
    "# Written by skippy (Skipper agent); rewritten on every deploy of this module.",
    "[Unit]",
    `Description=Skipper process module ${launch.module}`,
    "After=network-online.target",
    "",
    "[Service]",
    "Type=simple",
    `WorkingDirectory=${paths.active.replaceAll("%", "%%")}`,
    `ExecStart=${[program, ...launch.argv.slice(1)].map((a) => quote(a).replaceAll("$", "$$$$")).join(" ")}`,
    ...env,
    `StandardOutput=append:${paths.log.replaceAll("%", "%%")}`,
    `StandardError=append:${paths.log.replaceAll("%", "%%")}`,
    "Restart=always",
    "RestartSec=2",
    "KillMode=control-group",
    `TimeoutStopSec=${Math.max(1, Math.ceil(graceMs / 1000))}`,
    "",
    "[Install]",
    "WantedBy=multi-user.target",
    "",
  ].join("\n");
}

// systemd's quoting: one word in double quotes with C-style escapes; "%" starts a specifier.
function quote(s: string): string {
  const escaped = s
    .replace(/[\\"]/g, (c) => `\\${c}`)
    .replace(/\n/g, "\\n")
    .replace(/\t/g, "\\t")
    .replaceAll("%", "%%");
  return `"${escaped}"`;
}

async function systemctl(args: string[]): Promise<string> {
  const run = await runCommand("systemctl", args, { timeoutMs: SYSTEMCTL_TIMEOUT_MS });
  if (run.exitCode !== 0)
    throw new ProcessError("PROCESS_FAILED", `systemctl ${args.join(" ")} failed: ${run.stderr.trim().slice(0, 300)}`);
  return run.stdout.trim();
}

async function mainPid(unit: string): Promise<number> {
  const out = await systemctl(["show", "--property", "MainPID", "--value", unit]).catch(() => "0");
  return Number.parseInt(out, 10) || 0;
}

async function start(workDir: string, launch: Launch): Promise<Started> {
  const program = await resolveProgram(modulePaths(workDir, launch.module).active, launch.argv[0] ?? "");
  const unit = unitName(launch.module);
  // systemd opens the append: log itself and fails the unit (209/STDOUT) when its directory is missing.
  await mkdir(dirname(modulePaths(workDir, launch.module).log), { recursive: true });
  // 0600: Environment= lines carry the order's env, which may hold secrets.
  await writeFileAtomic(join(UNIT_DIR, unit), unitText(workDir, launch, program), { mode: 0o600 });
  await systemctl(["daemon-reload"]);
  await systemctl(["enable", unit]);
  await systemctl(["restart", unit]);
  const pid = await mainPid(unit);
  return { pid, startTicks: (await processStartTicks(pid)) ?? "", systemdUnit: unit };
}

async function stop(_workDir: string, state: RunState): Promise<void> {
  // Disabled too, so a reboot does not start what the orders stopped.
  await systemctl(["disable", "--now", state.systemdUnit || unitName(state.module)]);
}

async function livePid(_workDir: string, state: RunState): Promise<number> {
  return mainPid(state.systemdUnit || unitName(state.module));
}

// Between a crash and its Restart= (RestartSec), the unit is "activating" in "auto-restart". A
// probe that fails (systemctl slow or refused under load) says nothing: the unit is left to systemd
// this round (its Restart=always brings it back; the next round looks again), never started by
// the agent over systemd's own restart.
async function restarting(state: RunState): Promise<boolean> {
  const out = await systemctl(["show", "--property", "ActiveState,SubState", state.systemdUnit || unitName(state.module)]).catch(
    () => undefined,
  );
  if (out === undefined) return true;
  return /ActiveState=activating/.test(out) && /SubState=auto-restart/.test(out);
}

/** systemd as a ProcessRunner. */
export const systemdRunner: ProcessRunner = { kind: "systemd", start, stop, livePid, restarting };
