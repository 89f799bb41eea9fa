// Real processes for end-to-end tests: the built controller (dist/controller/main.js) and agent
// (dist/agent/main.js), as users run them. `npm test` builds dist/ first.
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, mkdirSync } from "node:fs";
import { mkdtemp, readFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { execa } from "execa";
import type { DescService } from "@bufbuild/protobuf";

const DIST = fileURLToPath(new URL("../../dist/", import.meta.url));
export const E2E_ADMIN_TOKEN = "e2e-admin-token-0123456789";

/**
 * A suffix for the names a test gives to what it creates on a Docker engine (tenant ids, which
 * are the Compose project names): test runs that share an engine (two checkouts tested at once)
 * must not remove or recreate each other's containers.
 */
export const RUN_ID = Math.random().toString(36).slice(2, 8);

/** Removes what a test's Compose project left on an engine: its containers and its networks (names are per run, so nothing else cleans them). */
export async function removeComposeProject(dockerHost: string, project: string): Promise<void> {
  const env = { ...process.env, DOCKER_HOST: dockerHost };
  const filter = ["--filter", `label=com.docker.compose.project=${project}`];
  const list = async (args: string[]) =>
    (await execa("docker", [...args, ...filter], { env, reject: false })).stdout.split("\n").filter(Boolean);
  const containers = await list(["ps", "-aq"]);
  if (containers.length > 0) await execa("docker", ["rm", "-f", ...containers], { env, reject: false });
  const networks = await list(["network", "ls", "-q"]);
  if (networks.length > 0) await execa("docker", ["network", "rm", ...networks], { env, reject: false });
}

export interface ControllerProcess {
  child: ChildProcess;
  url: string;
  dataDir: string;
  ca: string;
  caFile: string;
  admin<S extends DescService>(service: S): Client<S>;
  stop(): Promise<void>;
}

/**
 * Starts the controller with a fresh (or given) data dir on a free port (or `port`, to restart
 * one where its agents expect it); stdout goes to <dataDir>/../controller.out.
 */
export async function startControllerProcess(
  opts: { dataDir?: string; port?: number; extraArgs?: string[]; env?: Record<string, string> } = {},
): Promise<ControllerProcess> {
  const dataDir = opts.dataDir ?? join(await mkdtemp(join(tmpdir(), "skipper-e2e-")), "data");
  const args = [
    join(DIST, "controller", "main.js"),
    "--data-dir",
    dataDir,
    "--listen",
    `127.0.0.1:${opts.port ?? 0}`,
    ...(opts.extraArgs ?? []),
  ];
  const child = spawn(process.execPath, args, {
    env: { ...process.env, SKIPPER_ADMIN_TOKEN: E2E_ADMIN_TOKEN, ...opts.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const out = createWriteStream(join(dataDir, "..", "controller.out"), { flags: "a" });
  child.stderr!.pipe(out);
  // The last lines it wrote, for the error when it exits before listening (a port taken, a lock held).
  const tail: string[] = [];
  const keep = (line: string) => {
    tail.push(line.slice(0, 500));
    if (tail.length > 5) tail.shift();
  };
  child.stderr!.on("data", (d: Buffer) => keep(d.toString("utf8").trim()));
  const url = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    child.once("exit", (code) => reject(new Error(`controller exited with ${code}; last output:\n${tail.join("\n")}`)));
    lines.on("line", (line) => {
      keep(line);
      out.write(`${line}\n`);
      try {
        const l = JSON.parse(line) as { action?: string; metadata?: { url?: string } };
        if (l.action === "listen" && l.metadata?.url) resolve(l.metadata.url);
      } catch {
        // not a log line
      }
    });
  });
  const caFile = join(dataDir, "tls", "ca.crt");
  const ca = await readFile(caFile, "utf8");
  const auth: Interceptor = (next) => (req) => {
    req.header.set("x-admin-token", E2E_ADMIN_TOKEN);
    return next(req);
  };
  const transport = createConnectTransport({ baseUrl: `${url}/v1`, httpVersion: "2", nodeOptions: { ca }, interceptors: [auth] });
  return {
    child,
    url,
    dataDir,
    ca,
    caFile,
    admin: (service) => createClient(service, transport),
    stop: () => stopProcess(child),
  };
}

export interface AgentProcess {
  child: ChildProcess;
  logFile: string;
  stop(): Promise<void>;
  kill(): Promise<void>;
}

/** Starts skippy for `nodeId`; its log goes to <stateDir>/agent.log. */
export function startAgentProcess(opts: {
  controller: ControllerProcess;
  nodeId: string;
  token: string;
  stateDir: string;
  workDir: string;
  dockerHost: string;
  pollInterval?: string;
  extraArgs?: string[];
  env?: Record<string, string>;
  /**
   * How the agent talks to the controller (--transport): its default session, unless the run sets
   * SKIPPER_TEST_AGENT_TRANSPORT; "poll" for a test of the unary path itself.
   */
  transport?: "session" | "poll" | "auto";
  /** A command that runs the agent for it (e.g. nsenter into a namespace where systemd is PID 1). */
  launcher?: string[];
}): AgentProcess {
  const logFile = join(opts.stateDir, "..", `agent-${opts.nodeId}.log`);
  mkdirSync(dirname(logFile), { recursive: true });
  const [program, ...before] = [...(opts.launcher ?? []), process.execPath];
  const child = spawn(
    program!,
    [
      ...before,
      join(DIST, "agent", "main.js"),
      "--controller",
      opts.controller.url,
      "--node-id",
      opts.nodeId,
      "--ca-file",
      opts.controller.caFile,
      "--state-dir",
      opts.stateDir,
      "--work-dir",
      opts.workDir,
      "--poll-interval",
      opts.pollInterval ?? "200ms",
      ...(opts.extraArgs ?? []),
    ],
    {
      // On a session, skippy's default way (not "auto", so a session that cannot be had fails
      // the test instead of falling back unseen), unless the test asks for polling or the run sets
      // SKIPPER_TEST_AGENT_TRANSPORT (=poll runs every e2e suite's agents on the unary calls).
      env: {
        ...process.env,
        SKIPPY_TRANSPORT: opts.transport ?? process.env.SKIPPER_TEST_AGENT_TRANSPORT ?? "session",
        SKIPPY_NODE_TOKEN: opts.token,
        DOCKER_HOST: opts.dockerHost,
        ...opts.env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  const out = createWriteStream(logFile, { flags: "a" });
  child.stdout!.pipe(out);
  child.stderr!.pipe(out);
  return {
    child,
    logFile,
    stop: () => stopProcess(child),
    kill: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGKILL");
      await exited;
    },
  };
}

export async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Polls `fn` until it returns a value that is not undefined, or fails after `timeoutMs`. */
export async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 60_000, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ""}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
