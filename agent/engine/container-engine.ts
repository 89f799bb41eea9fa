// The engine calls of the container executor (agent/executors/deploy-container.ts): single
// containers by name, their images by digest, through the `docker` CLI like the rest of the agent.
// Reads return what the engine says; writes throw EngineError (the engine's own words) when it
// refuses, and each write is one that may be repeated after an interruption where that is how the
// executor uses it (stop of a stopped container, rm of a missing one).
import { chmod, mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { EngineError } from "./project-containers.js";
import { runCommand, type CommandRun } from "./run-command.js";

const ENGINE_TIMEOUT_MS = 60_000;
const PULL_TIMEOUT_MS = 15 * 60_000;

/** A container as the executor reads it from `docker container inspect`. */
export interface ContainerFacts {
  id: string;
  name: string;
  /** The image id it runs (sha256:…). */
  imageId: string;
  labels: Record<string, string>;
  running: boolean;
  /** "" without a healthcheck, else starting | healthy | unhealthy. */
  health: string;
  restartCount: number;
  startedAt: string;
  exitCode: number;
  status: string;
}

/** An image as the executor reads it. */
export interface ImageFacts {
  id: string;
  repoDigests: string[];
}

/** The container named `name`, or undefined when there is none. Throws EngineError when the engine does not answer. */
export async function inspectContainer(name: string): Promise<ContainerFacts | undefined> {
  const run = await docker(["container", "inspect", "--", name], { allowMissing: true });
  if (!run) return undefined;
  const [c] = JSON.parse(run.stdout) as RawContainer[];
  if (!c) return undefined;
  return {
    id: c.Id,
    name: c.Name.replace(/^\//, ""),
    imageId: c.Image,
    labels: c.Config?.Labels ?? {},
    running: c.State?.Running === true,
    health: c.State?.Health?.Status ?? "",
    restartCount: c.RestartCount ?? 0,
    startedAt: c.State?.StartedAt ?? "",
    exitCode: c.State?.ExitCode ?? 0,
    status: c.State?.Status ?? "",
  };
}

interface RawContainer {
  Id: string;
  Name: string;
  Image: string;
  RestartCount?: number;
  Config?: { Labels?: Record<string, string> | null };
  State?: { Running?: boolean; Status?: string; ExitCode?: number; StartedAt?: string; Health?: { Status?: string } };
}

/** The image `ref` (a reference or an image id), or undefined when the engine does not have it. */
export async function inspectImage(ref: string): Promise<ImageFacts | undefined> {
  const run = await docker(["image", "inspect", "--", ref], { allowMissing: true });
  if (!run) return undefined;
  const [i] = JSON.parse(run.stdout) as { Id: string; RepoDigests?: string[] | null }[];
  return i ? { id: i.Id, repoDigests: i.RepoDigests ?? [] } : undefined;
}

/** Pulls `ref`; the run as it went (the caller decides what a failure means). */
export function pullImage(ref: string, signal: AbortSignal): Promise<CommandRun> {
  return runCommand("docker", ["pull", "--quiet", "--", ref], { timeoutMs: PULL_TIMEOUT_MS, signal });
}

export async function stopContainer(name: string, timeoutSeconds: number): Promise<void> {
  await docker(["container", "stop", "-t", String(timeoutSeconds), "--", name], { timeoutMs: (timeoutSeconds + 30) * 1000 });
}

export async function startContainer(name: string): Promise<void> {
  await docker(["container", "start", "--", name]);
}

export async function renameContainer(from: string, to: string): Promise<void> {
  await docker(["container", "rename", "--", from, to]);
}

/** Removes the container (stopped or not); nothing when it is already gone. */
export async function removeContainer(name: string): Promise<void> {
  await docker(["container", "rm", "--force", "--", name], { allowMissing: true });
}

/** Where createContainer keeps its env files: in the agent's work directory, never /tmp. */
export const ENV_DIR = ".container-env";

/**
 * `docker container create OPTIONS -- IMAGE ARGS...` with `env` written to an env file readable by this user alone and removed right after, so values
 * never appear on a command line or in a reported command. The file lives under `<workDir>/.container-env/` (0700),
 * which sweepEnvFiles empties when the agent starts: an agent killed between the write and the removal leaves no
 * secret behind in a shared temporary directory. Returns the new container's id.
 */
export async function createContainer(
  workDir: string,
  options: string[],
  image: string,
  args: readonly string[],
  env: Record<string, string>,
  secrets: string[],
): Promise<string> {
  const parent = join(workDir, ENV_DIR);
  await mkdir(parent, { recursive: true, mode: 0o700 });
  const dir = await mkdtemp(join(parent, "create-"));
  try {
    const file = join(dir, "env");
    const lines = Object.entries(env).map(([k, v]) => `${k}=${v}\n`);
    await writeFile(file, lines.join(""), { mode: 0o600 });
    await chmod(file, 0o600);
    const run = await docker(["container", "create", ...options, "--env-file", file, "--", image, ...args], { secrets });
    return run!.stdout.trim();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Removes env files a killed run left behind. Called once at agent start, before any order runs. */
export async function sweepEnvFiles(workDir: string): Promise<number> {
  const parent = join(workDir, ENV_DIR);
  const left = await readdir(parent).catch(() => [] as string[]);
  for (const name of left) await rm(join(parent, name), { recursive: true, force: true });
  return left.length;
}

async function docker(
  args: string[],
  opts: { allowMissing?: boolean; timeoutMs?: number; secrets?: string[] } = {},
): Promise<CommandRun | undefined> {
  const run = await runCommand("docker", args, { timeoutMs: opts.timeoutMs ?? ENGINE_TIMEOUT_MS, uncapped: true, secrets: opts.secrets });
  if (run.exitCode === 0) return run;
  if (opts.allowMissing && /no such (container|image|object)/i.test(run.stderr)) return undefined;
  throw new EngineError(run);
}
