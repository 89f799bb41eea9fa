// Runs a CommandSpec from an order (execute_command) or a tenant's deploy hooks. The program must
// be on the node's allow-list; arguments go to it literally (no shell); the working directory
// must be absolute and exist. Nothing in a spec can widen the allow-list: variables that choose
// the program or inject code into it (PATH, LD_PRELOAD, …) are refused, since an upload_files
// order could otherwise place a program and have it run under an allowed name. The command does
// not inherit the agent's own secrets (its node token), and secret values are blanked from the
// reported arguments and output.
import { stat } from "node:fs/promises";
import { isAbsolute } from "node:path";
import { durationMs } from "@bufbuild/protobuf/wkt";
import type { CommandSpec } from "../../gen/skipper/v1/safety_pb.js";
import { isSecretKey } from "../../common/logging/redact.js";
import { ENV_KEY } from "../../common/action-rules.js";
import { checkCommand } from "./allow-list.js";
import { runCommand, scrub, withoutAgentSecrets, type CommandRun } from "./run-command.js";

export const DEFAULT_COMMAND_TIMEOUT_MS = 60_000;
const MAX_COMMAND_TIMEOUT_MS = 60 * 60 * 1000;
// Variables that choose the program or inject code into it (the loader's, shells', interpreters').
// HOME and the XDG directories are refused too: they point programs (git, ssh, shells) at config
// files an upload could have placed, and config files can run commands.
const ENV_REFUSED =
  /^(PATH|IFS|ENV|BASH_ENV|SHELLOPTS|BASHOPTS|PS4|PROMPT_COMMAND|HOME|ZDOTDIR|TMPDIR|NODE_OPTIONS|NODE_PATH|PYTHONPATH|PYTHONSTARTUP|PYTHONHOME|PYTHONUSERBASE|PERL5OPT|PERL5LIB|PERLLIB|RUBYOPT|RUBYLIB|GEM_PATH|GEM_HOME|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|JDK_JAVA_OPTIONS|CLASSPATH|GCONV_PATH|LOCPATH|NLSPATH|HOSTALIASES|RESOLV_HOST_CONF|EDITOR|VISUAL|PAGER|SYSTEMD_.*|XDG_.*|GIT_.*|SSH_.*|DOCKER_.*|COMPOSE_.*|LD_.*|DYLD_.*|SKIPPY_.*|SKIPPER_.*)$/;

export type SpecRun =
  | { kind: "not_allowed"; reason: string }
  | { kind: "invalid"; reason: string }
  /** `run.args` has secret values blanked. */
  | { kind: "ran"; run: CommandRun; timeoutMs: number };

export async function runCommandSpec(
  spec: CommandSpec,
  allowList: readonly string[],
  opts: { defaultCwd: string; signal?: AbortSignal },
): Promise<SpecRun> {
  if (spec.argv.length === 0) return { kind: "invalid", reason: "the command has no argv" };
  const allowed = checkCommand(spec.argv, allowList);
  if (!allowed.allowed) return { kind: "not_allowed", reason: allowed.reason ?? "not allowed" };
  const cwd = spec.workingDir || opts.defaultCwd;
  if (!isAbsolute(cwd) || cwd.includes("\0"))
    return { kind: "invalid", reason: `working_dir ${JSON.stringify(cwd)} must be an absolute path` };
  if (
    !(await stat(cwd).then(
      (s) => s.isDirectory(),
      () => false,
    ))
  )
    return { kind: "invalid", reason: `working_dir ${JSON.stringify(cwd)} is not an existing directory` };
  for (const [k, v] of Object.entries(spec.env)) {
    if (!ENV_KEY.test(k)) return { kind: "invalid", reason: `env key ${JSON.stringify(k)} is not a valid variable name` };
    if (ENV_REFUSED.test(k))
      return { kind: "invalid", reason: `env key ${k} may not be set by an order: it changes which program runs or what it loads` };
    if (v.includes("\0")) return { kind: "invalid", reason: `env value of ${k} contains a NUL byte` };
  }
  const timeoutMs = spec.timeout ? durationMs(spec.timeout) : DEFAULT_COMMAND_TIMEOUT_MS;
  if (timeoutMs < 0 || timeoutMs > MAX_COMMAND_TIMEOUT_MS)
    return { kind: "invalid", reason: `timeout must be between 0 and 1 h, got ${timeoutMs} ms` };
  const effective = timeoutMs || DEFAULT_COMMAND_TIMEOUT_MS;
  const secrets = Object.entries(spec.env)
    .filter(([k]) => isSecretKey(k))
    .map(([, v]) => v);
  const [program, ...args] = spec.argv as [string, ...string[]];
  const run = await runCommand(program, args, {
    timeoutMs: effective,
    cwd,
    env: { ...withoutAgentSecrets(), ...spec.env },
    secrets,
    signal: opts.signal,
  });
  return { kind: "ran", run: { ...run, args: run.args.map((a) => scrub(a, secrets)) }, timeoutMs: effective };
}

/** One line saying how a run went, for result messages. */
export function describeRun(r: SpecRun): string {
  if (r.kind !== "ran") return r.reason;
  const { run } = r;
  if (run.notFound) return `${run.program} could not be started: not found or not executable`;
  if (run.timedOut) return `${run.program} did not finish within ${r.timeoutMs} ms and was stopped`;
  if (run.cancelled) return `${run.program} was stopped`;
  if (run.exitCode === 0) return `${run.program} exited 0 after ${run.durationMs} ms`;
  // The output stays in details.command: messages end up in events and logs, and what a command
  // prints is the operator's business, not the audit trail's.
  return `${run.program} exited ${run.exitCode} (output in details.command)`;
}

/** True when the spec ran and exited 0. */
export function succeeded(r: SpecRun): boolean {
  return r.kind === "ran" && r.run.exitCode === 0 && !r.run.timedOut && !r.run.cancelled && !r.run.notFound;
}
