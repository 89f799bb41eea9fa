// Runs one external program with an argument array (never through a shell), a timeout and a
// bounded amount of captured output, and describes the run the way a work-order result reports it.
// Values of secret-shaped variables are blanked from the output before anything leaves the agent.
import { execa } from "execa";
import { isSecretKey } from "../../common/logging/redact.js";
import { engineEnv } from "./engine-env.js";

/** At most this much of stdout and of stderr is kept (the tail: errors come last). */
export const OUTPUT_CAP_BYTES = 16 * 1024;

export interface CommandRun {
  program: string;
  args: string[];
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  /** The program could not be started (not installed, not executable). */
  notFound: boolean;
  /** Stopped because the order was cancelled. */
  cancelled: boolean;
  durationMs: number;
}

export interface RunOptions {
  timeoutMs: number;
  cwd?: string;
  /** Variables to set; undefined removes one the agent has. */
  env?: Record<string, string | undefined>;
  /** Strings to blank out of the captured output (secret values). */
  secrets?: string[];
  /** Keep the whole output (for output the agent parses itself, never for reported output). */
  uncapped?: boolean;
  /** Stops the program (SIGTERM, then SIGKILL) when it aborts: the order was cancelled. */
  signal?: AbortSignal;
}

/** Runs `program args…`; never throws for a failed or timed-out command, only describes it. */
export async function runCommand(program: string, args: string[], opts: RunOptions): Promise<CommandRun> {
  const started = performance.now();
  const r = await execa(program, args, {
    reject: false,
    timeout: opts.timeoutMs,
    killSignal: "SIGTERM",
    forceKillAfterDelay: 5000,
    cwd: opts.cwd,
    // An SSH node's work reaches its engine whatever the command asks (engine-env.ts).
    env: { ...opts.env, ...engineEnv() },
    extendEnv: true,
    stdin: "ignore",
    stripFinalNewline: false,
    maxBuffer: 8 * 1024 * 1024,
    ...(opts.signal ? { cancelSignal: opts.signal } : {}),
  });
  const notFound = (r as { code?: string }).code === "ENOENT";
  const clean = (s: unknown) => {
    const text = scrub(typeof s === "string" ? s : "", opts.secrets ?? []);
    return opts.uncapped ? text : cap(text);
  };
  return {
    program,
    // What is reported of the command: an argument may carry a secret (an image reference that interpolates one).
    args: opts.secrets?.length ? args.map((a) => scrub(a, opts.secrets!)) : args,
    exitCode: typeof r.exitCode === "number" ? r.exitCode : -1,
    stdout: clean(r.stdout),
    stderr: notFound ? `${program}: not found` : clean(r.stderr),
    timedOut: r.timedOut === true,
    notFound,
    cancelled: (r as { isCanceled?: boolean }).isCanceled === true,
    durationMs: Math.round(performance.now() - started),
  };
}

/**
 * The agent's own secrets (its node token, any secret-named variable it was started with), as
 * variables to remove from a child's environment: a command or a compose file run on an order's
 * behalf could otherwise print or interpolate them. (Node's spawn leaves out a variable whose
 * value is undefined.)
 */
export function withoutAgentSecrets(): Record<string, undefined> {
  const hidden: Record<string, undefined> = {};
  for (const k of Object.keys(process.env)) if (k.startsWith("SKIPPY_") || isSecretKey(k)) hidden[k] = undefined;
  return hidden;
}

/** Replaces each secret value (of 4+ characters) with a marker. */
export function scrub(text: string, secrets: string[]): string {
  let out = text;
  for (const s of secrets) if (s.length >= 4) out = out.split(s).join("[REDACTED]");
  return out;
}

function cap(s: string): string {
  if (Buffer.byteLength(s) <= OUTPUT_CAP_BYTES) return s;
  const tail = Buffer.from(s).subarray(-OUTPUT_CAP_BYTES).toString("utf8");
  return `[… ${Buffer.byteLength(s) - OUTPUT_CAP_BYTES} bytes cut]\n${tail}`;
}
