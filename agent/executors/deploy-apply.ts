// The steps of a deploy up to `compose up` (deploy-service.ts has the plan): reach the engine,
// get the secret values, stage the files, have Compose check them, run the pre-deploy hooks,
// promote the files, and run `up`. A file Compose rejects never stays in place of the live one.
import { mkdir, rename, rm } from "node:fs/promises";
import { basename } from "node:path";
import { removeStaleTemps, writeFileAtomic } from "../engine/durable-file.js";
import { EngineError, observeServices, readProjectContainers } from "../engine/project-containers.js";
import { namedInOrder, secretValues, secretsProblem, usesSecrets, writeSecretDir, type ProjectSecrets } from "../engine/project-secrets.js";
import { failureCause } from "../../common/failure-cause.js";
import { pullFailure, pullMessage } from "../engine/pull-failure.js";
import { runCommand, type CommandRun } from "../engine/run-command.js";
import { ENGINE_DOWN, imagesOf, lastLine, servicesInFile } from "./compose-output.js";
import type { DeployOutcome } from "./deploy-context.js";
import { runHooks } from "./deploy-safety.js";
import { cancelled, composeArgs, end, hasPreDeployHooks, rejected, runCompose, stoppedEarly, type Deploy } from "./deploy-state.js";
import { keepLive, liveFiles, removeOtherStaging, replaceDir, restoreLive } from "./project-files.js";

/** reach the engine: `docker version` answers. */
export async function reachEngine(d: Deploy): Promise<DeployOutcome | undefined> {
  const engine = await runCommand("docker", ["version", "--format", "{{.Server.Version}}"], { timeoutMs: 15_000 });
  if (engine.exitCode !== 0)
    return end(d, "DOCKER_UNAVAILABLE", `docker engine unreachable: ${lastLine(engine.stderr)}`, { command: engine });
  return undefined;
}

/** get the secrets: the project's secret values, asked for under this order's claim (never in the order). */
export async function getSecrets(d: Deploy): Promise<DeployOutcome | undefined> {
  const { ds, ctx } = d;
  if (!usesSecrets(ds)) return undefined;
  if (!ctx.secrets) return end(d, "SECRETS_UNAVAILABLE", "the order's project uses secrets and this run has no way to get them");
  let secrets: ProjectSecrets;
  try {
    secrets = await ctx.secrets();
  } catch (e) {
    return end(d, "SECRETS_UNAVAILABLE", `could not get the project's secret values: ${(e as Error).message}`);
  }
  const problem = secretsProblem(ds, secrets);
  if (problem) return end(d, "COMPOSE_INVALID", problem);
  secrets = namedInOrder(ds, secrets);
  d.secrets = secrets;
  for (const v of secretValues(secrets)) d.hidden.push(v);
  if (Object.keys(secrets.env).some((k) => k in d.env)) return end(d, "COMPOSE_INVALID", "a variable is set both in env and from a secret");
  return undefined;
}

/** stage the files: the compose file, .env and secret directory, written to the order's staging directory. */
export async function stageFiles(d: Deploy): Promise<undefined> {
  const f = d.files;
  await mkdir(f.staging, { recursive: true, mode: 0o700 });
  // A state record or restore point half-written when the agent died (the env may hold secrets),
  // and what other orders staged and never promoted (an order whose lease was lost, or that was
  // not taken up after a restart): their secret directories hold values. The agent runs one order
  // at a time; this order's own staging (a replay's) is kept.
  await removeStaleTemps(f.dir);
  await removeOtherStaging(f.dir, basename(f.staging));
  if (d.secrets) await writeSecretDir(f.stagedSecrets, d.secrets);
  await writeFileAtomic(f.stagedYml, d.project.composeFile, { mode: 0o644 });
  await writeFileAtomic(
    f.stagedEnv,
    Object.entries(d.env)
      .map(([k, v]) => `${k}=${v}\n`)
      .join(""),
    { mode: 0o600 },
  );
  return undefined;
}

/**
 * check the files: Compose checks the file before anything runs. With pre-deploy hooks that is a
 * step of its own (no hook runs for a file Compose rejects); otherwise `up` checks it itself, one
 * Compose run fewer (Compose v1 costs a Python start per run, about as long as the rest of a small
 * deploy), and the live files are kept aside until Compose has accepted the new ones.
 */
export async function checkFiles(d: Deploy): Promise<DeployOutcome | undefined> {
  const f = d.files;
  const fromFile = hasPreDeployHooks(d) ? undefined : servicesInFile(d.project.composeFile);
  d.checkedByUp = fromFile !== undefined;
  if (fromFile !== undefined) {
    d.services = fromFile;
    return undefined;
  }
  const check = await runCompose(d, composeArgs(d, f.stagedYml, f.stagedEnv, "config", "--services"));
  if (check.cancelled || d.ctx.signal?.aborted) return stoppedEarly(d, check);
  if (check.exitCode !== 0 || check.timedOut) {
    await rm(f.staging, { recursive: true, force: true });
    return rejected(d, check, f.staging);
  }
  d.services = check.stdout
    .split("\n")
    .map((s) => s.trim())
    .filter(Boolean)
    .sort();
  return undefined;
}

/** pre-deploy hooks: the tenant's, in order; the first that fails ends the deploy with nothing changed. */
export async function preDeployHooks(d: Deploy): Promise<DeployOutcome | undefined> {
  const safety = d.ds.safety;
  if (hasPreDeployHooks(d) && safety) {
    const pre = await runHooks(safety.preDeploy, "pre-deploy", d.ctx, d.files.dir);
    if (pre) {
      await rm(d.files.staging, { recursive: true, force: true });
      return end(d, "PRE_DEPLOY_FAILED", `${pre.message}; nothing was changed`, { command: pre.run });
    }
  }
  // Stopped meanwhile: the live files stay as they were.
  if (d.ctx.signal?.aborted) return stoppedEarly(d);
  return undefined;
}

/**
 * promote: the staged files become the live ones. .env first: a crash in between leaves the old
 * file with new variables, which the next apply of this order (journal replay) overwrites anyway.
 * Then the containers as they are before `up`.
 */
export async function promote(d: Deploy): Promise<DeployOutcome | undefined> {
  const f = d.files;
  if (d.checkedByUp) await keepLive(f.staging, liveFiles(f));
  await rename(f.stagedEnv, f.envPath);
  await replaceDir(f.stagedSecrets, f.secretDir);
  await rename(f.stagedYml, f.composePath);
  if (!d.checkedByUp) await rm(f.staging, { recursive: true, force: true });
  try {
    d.before = await readProjectContainers(d.projectName);
  } catch (e) {
    if (d.checkedByUp) await restoreLive(f.staging, liveFiles(f));
    if (e instanceof EngineError) return end(d, "DOCKER_UNAVAILABLE", e.message, { command: e.run, composePath: f.composePath });
    throw e;
  }
  return undefined;
}

/**
 * compose up: `up -d --remove-orphans` (of the services not started first, or `--no-recreate` when
 * every changing one is), and why it failed when it did.
 */
export async function composeUp(d: Deploy): Promise<DeployOutcome | undefined> {
  const { files: f, ctx } = d;
  // Services replaced start-first keep their containers through this `up` (switchTraffic replaces
  // them); the others are listed, without their dependencies, so that none pulls them in.
  const skip = new Set(d.updatePlan?.startFirst ?? []);
  const only = skip.size === 0 ? [] : ["--no-deps", ...d.services.filter((s) => !skip.has(s))];
  const up =
    skip.size > 0 && only.length === 1
      ? await runCompose(d, composeArgs(d, f.composePath, f.envPath, "up", "-d", "--remove-orphans", "--no-recreate"))
      : await runCompose(d, composeArgs(d, f.composePath, f.envPath, "up", "-d", "--remove-orphans", ...only));
  d.up = up;
  if (d.checkedByUp) {
    // Failed: was it the file? Compose's own check says (a failed deploy only pays for it).
    const check =
      up.exitCode !== 0 && !up.cancelled && !up.timedOut && !ENGINE_DOWN.test(up.stderr)
        ? await runCompose(d, composeArgs(d, f.composePath, f.envPath, "config", "--services"))
        : undefined;
    if (check && check.exitCode !== 0 && !check.cancelled && !check.timedOut && !ENGINE_DOWN.test(check.stderr)) {
      await restoreLive(f.staging, liveFiles(f));
      return rejected(d, check, f.dir);
    }
    await rm(f.staging, { recursive: true, force: true });
  }
  if (up.cancelled) return cancelled(d, up);
  if (up.timedOut)
    return end(d, "TIMEOUT", `compose up did not finish within ${ctx.composeTimeoutMs} ms`, { command: up, composePath: f.composePath });
  if (up.exitCode !== 0) return upFailed(d, up);
  return undefined;
}

/** The outcome of an `up` that exited non-zero: the engine down, a pull that failed, or the line of Compose's output that says why. */
async function upFailed(d: Deploy, up: CommandRun): Promise<DeployOutcome> {
  const pull = ENGINE_DOWN.test(up.stderr) ? undefined : pullFailure(up.stderr, imagesOf(d.project.composeFile));
  const code = ENGINE_DOWN.test(up.stderr) ? "DOCKER_UNAVAILABLE" : (pull?.code ?? "COMPOSE_FAILED");
  const seen = await readProjectContainers(d.projectName).catch(() => undefined);
  const cause = failureCause(up.stderr);
  const message = pull
    ? pullMessage(
        pull,
        d.secrets?.registries.map((r) => r.registry),
        cause.reason,
      )
    : `compose up failed (exit ${up.exitCode}): ${cause.line || lastLine(up.stderr)}`;
  return end(d, code, message, {
    command: up,
    composePath: d.files.composePath,
    services: seen ? observeServices(d.services, seen) : [],
  });
}
