// The engine's images by reference: what one is (its id and the digests it was pulled by), a
// pull, and a tag moved onto an image. The deploy's lock step (executors/deploy-images.ts) uses
// them; nothing here decides anything.
import { runCommand, type CommandRun } from "./run-command.js";

export interface EngineImage {
  id: string;
  repoDigests: string[];
}

export interface ImageCommandOptions {
  /** The environment of the project's Compose runs (its registry logins: DOCKER_CONFIG). */
  env?: Record<string, string | undefined>;
  signal?: AbortSignal;
  timeoutMs: number;
  /** Values blanked from every output (a project's secrets: a reference may interpolate one). */
  secrets?: string[];
}

/** The image `ref` names (a reference, `repo@digest` or an id), or undefined when the engine has none. */
export async function findImage(ref: string, opts: ImageCommandOptions): Promise<EngineImage | undefined> {
  const run = await runCommand("docker", ["image", "inspect", "--format", "{{json .Id}} {{json .RepoDigests}}", ref], {
    ...opts,
    timeoutMs: Math.min(opts.timeoutMs, 30_000),
    uncapped: true,
  });
  if (run.exitCode !== 0) {
    if (/no such image|not found/i.test(run.stderr)) return undefined;
    throw new ImageCommandError(run);
  }
  const line = run.stdout.trim().split("\n")[0] ?? "";
  const space = line.indexOf(" ");
  const id = JSON.parse(line.slice(0, space)) as string;
  const digests = (JSON.parse(line.slice(space + 1)) as string[] | null) ?? [];
  return { id, repoDigests: digests };
}

/** `docker pull ref`, as run (the caller reads a failure). */
export function pullImage(ref: string, opts: ImageCommandOptions): Promise<CommandRun> {
  return runCommand("docker", ["pull", "--quiet", ref], opts);
}

/** Points tag `ref` at image `id` (the engine's own records only: no registry is asked). */
export async function tagImage(id: string, ref: string, opts: ImageCommandOptions): Promise<void> {
  const run = await runCommand("docker", ["tag", id, ref], { ...opts, timeoutMs: Math.min(opts.timeoutMs, 30_000) });
  if (run.exitCode !== 0) throw new ImageCommandError(run);
}

/** An image command that failed for another reason than a missing image (the engine, mostly). */
export class ImageCommandError extends Error {
  override name = "ImageCommandError";
  constructor(readonly run: CommandRun) {
    super(`docker ${run.args.join(" ")} failed (exit ${run.exitCode}): ${run.stderr.trim().split("\n").at(-1) ?? ""}`);
  }
}
