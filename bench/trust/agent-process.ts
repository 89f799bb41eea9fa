// skippy as its own process for the trust probes: dist/agent/main.js for a registered node, with
// its own state and work directories, talking to a controller URL of the probe's choosing (the
// controller itself, or a proxy in front of it). Its JSON log lines are kept in memory, so a probe
// can wait for what the agent says it did, and written to <dir>/agent.log.
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { waitUntil } from "./wait-until.js";

const DIST = resolve(fileURLToPath(new URL(".", import.meta.url)), "..", "..");

/** One line of skippy's log, as far as the probes read it. */
export interface AgentLogLine {
  action?: string;
  result?: string;
  work_order_id?: string;
  message?: string;
  metadata?: Record<string, unknown>;
  /** ISO time the line was written. */
  timestamp?: string;
}

export interface AgentProcess {
  name: string;
  child: ChildProcess;
  pid: number;
  logFile: string;
  /** Every log line so far. */
  lines: AgentLogLine[];
  /** The first log line matching `match` within `timeoutMs`, else undefined. */
  waitForLog(match: (l: AgentLogLine) => boolean, timeoutMs: number): Promise<AgentLogLine | undefined>;
  /** SIGSTOP: the agent stops where it is (the programs it started do not). */
  freeze(): void;
  /** SIGCONT. */
  thaw(): void;
  alive(): boolean;
  /** SIGCONT and SIGTERM (SIGKILL after 10 s), resolved once it has exited. */
  stop(): Promise<void>;
}

export interface AgentOptions {
  /** A name for logs and file names. */
  name: string;
  /** The controller's (or a proxy's) base URL, e.g. https://127.0.0.1:8443. */
  controllerUrl: string;
  caFile: string;
  nodeId: string;
  token: string;
  /** The agent's own directory: state/, work/ and agent.log go in it. */
  dir: string;
  allowCommands?: string[];
  pollInterval?: string;
}

export async function startAgent(opts: AgentOptions): Promise<AgentProcess> {
  const stateDir = join(opts.dir, "state");
  const workDir = join(opts.dir, "work");
  await mkdir(stateDir, { recursive: true });
  await mkdir(workDir, { recursive: true });
  const logFile = join(opts.dir, "agent.log");
  const args = [
    join(DIST, "agent", "main.js"),
    "--controller",
    opts.controllerUrl,
    "--node-id",
    opts.nodeId,
    "--ca-file",
    opts.caFile,
    "--state-dir",
    stateDir,
    "--work-dir",
    workDir,
    "--poll-interval",
    opts.pollInterval ?? "200ms",
    ...(opts.allowCommands ?? []).flatMap((c) => ["--allow-command", c]),
  ];
  // No Docker engine: the probe's orders do not need one, and a socket that is not there makes
  // the agent's engine probe fail at once instead of reaching whatever engine the host has.
  const env = { ...process.env, SKIPPY_NODE_TOKEN: opts.token, DOCKER_HOST: `unix://${join(opts.dir, "no-docker.sock")}` };
  const child = spawn(process.execPath, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  const out = createWriteStream(logFile, { flags: "a" });
  child.stderr!.pipe(out);
  const lines: AgentLogLine[] = [];
  createInterface({ input: child.stdout! }).on("line", (line) => {
    out.write(`${line}\n`);
    try {
      lines.push(JSON.parse(line) as AgentLogLine);
    } catch {
      // not a log line
    }
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const alive = () => child.exitCode === null && child.signalCode === null;
  const signal = (s: NodeJS.Signals) => {
    if (alive()) child.kill(s);
  };
  return {
    name: opts.name,
    child,
    pid: child.pid!,
    logFile,
    lines,
    waitForLog: (match, timeoutMs) => waitUntil(() => lines.find(match), timeoutMs, 50),
    freeze: () => signal("SIGSTOP"),
    thaw: () => signal("SIGCONT"),
    alive,
    stop: async () => {
      signal("SIGCONT");
      signal("SIGTERM");
      const timer = setTimeout(() => signal("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
      out.end();
    },
  };
}
