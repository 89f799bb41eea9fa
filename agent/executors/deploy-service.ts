// The deploy_service executor: makes a tenant's compose project on this host match the order.
//
//   1. check the order (tenant id usable as a directory, project name, env) -> COMPOSE_INVALID
//   2. the engine and Compose answer                                       -> DOCKER_UNAVAILABLE
//   3. write docker-compose.yml and .env (0600) to a staging directory and have Compose parse
//      them (`config --services`); a file it rejects never replaces the live one -> COMPOSE_INVALID
//   4. move the files into <work_dir>/tenants/<tenant>/ and run `up -d --remove-orphans`
//                                                      -> COMPOSE_FAILED, TIMEOUT, DOCKER_UNAVAILABLE
//   5. wait until every service has its containers running (and healthy where a healthcheck is
//      defined); otherwise                                                  -> SERVICES_NOT_RUNNING
//   6. APPLY_OK, with the services whose containers changed, from the engine before and after.
//
// Every command is an argument array run through execa with a timeout; output is capped and the
// values of secret-shaped env keys are blanked from it.
import { mkdir, rename, rm, writeFile, open } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import {
  CommandResultSchema,
  WorkOrderResultSchema,
  type WorkOrder,
  type WorkOrderResult,
} from "../../gen/skipper/v1/work_order_pb.js";
import type { ServiceObservation } from "../../gen/skipper/v1/resource_pb.js";
import { ID_PATTERN } from "../../controller/ids.js";
import { isSecretKey } from "../../controller/logging/redact.js";
import type { DockerHost } from "../engine/docker-host.js";
import { runCommand, type CommandRun } from "../engine/run-command.js";
import { EngineError, observeServices, readProjectContainers, type ProjectContainers } from "../engine/project-containers.js";
import { containerChanges } from "./container-changes.js";
import { writeProjectState } from "../engine/project-state.js";
import type { Logger } from "pino";

export interface DeployContext {
  workDir: string;
  docker: DockerHost;
  composeTimeoutMs: number;
  readyTimeoutMs: number;
  log: Logger;
  /** Aborts when the order is cancelled: the running command is stopped, the result is CANCELLED. */
  signal?: AbortSignal;
}

export interface DeployOutcome {
  result: WorkOrderResult;
  /** Observed services after the apply (empty when it never got that far). */
  services: ServiceObservation[];
  composePath: string;
}

// Compose project names: lowercase letters, digits, dashes and underscores, starting alphanumeric.
const PROJECT_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const READY_POLL_MS = 500;
// Failures that may pass on their own: the controller retries the order while it has attempts.
const RETRIABLE = new Set(["DOCKER_UNAVAILABLE", "TIMEOUT", "COMPOSE_FAILED", "SERVICES_NOT_RUNNING"]);
// What the CLIs print when they cannot reach the engine.
const ENGINE_DOWN = /Cannot connect to the Docker daemon|Couldn't connect to Docker daemon|error during connect|Is the docker daemon running|connection refused.*docker\.sock/i;

export async function deployService(order: WorkOrder, ctx: DeployContext): Promise<DeployOutcome> {
  const started = performance.now();
  const ds = order.desiredState;
  const project = ds?.composeProject;
  const tenantId = ds?.tenantId ?? "";
  const done = (code: string, message: string, extra: Partial<Parts> = {}): DeployOutcome =>
    outcome(code, message, started, { composePath: "", services: [], ...extra });

  // 1. The order itself.
  if (!ID_PATTERN.test(tenantId)) return done("COMPOSE_INVALID", `tenant id ${JSON.stringify(tenantId)} cannot name a directory`);
  const projectName = project?.projectName || tenantId;
  if (!PROJECT_NAME.test(projectName)) {
    return done("COMPOSE_INVALID", `compose project name ${JSON.stringify(projectName)} must be lowercase letters, digits, '-' or '_', starting with a letter or digit`);
  }
  if (!project || project.composeFile.trim() === "") return done("COMPOSE_INVALID", "the order carries no compose file");
  const env = project.env;
  for (const [k, v] of Object.entries(env)) {
    if (!ENV_KEY.test(k)) return done("COMPOSE_INVALID", `env key ${JSON.stringify(k)} is not a valid variable name`);
    if (/[\r\n\0]/.test(v)) return done("COMPOSE_INVALID", `env value of ${k} contains a line break or NUL`);
  }
  const secrets = Object.entries(env).filter(([k]) => isSecretKey(k)).map(([, v]) => v);

  // 2. Engine and Compose.
  const compose = ctx.docker.compose;
  if (!compose) return done("DOCKER_UNAVAILABLE", ctx.docker.capabilities.message || "no Compose implementation found");
  const engine = await runCommand("docker", ["version", "--format", "{{.Server.Version}}"], { timeoutMs: 15_000 });
  if (engine.exitCode !== 0) return done("DOCKER_UNAVAILABLE", `docker engine unreachable: ${lastLine(engine.stderr)}`, { command: engine });

  // 3. Stage and validate.
  const dir = join(ctx.workDir, "tenants", tenantId);
  const composePath = join(dir, "docker-compose.yml");
  const envPath = join(dir, ".env");
  const staging = join(dir, `.staging-${order.id}`);
  await mkdir(staging, { recursive: true, mode: 0o700 });
  const stagedYml = join(staging, "docker-compose.yml");
  const stagedEnv = join(staging, ".env");
  await writeDurable(stagedYml, project.composeFile, 0o644);
  await writeDurable(stagedEnv, Object.entries(env).map(([k, v]) => `${k}=${v}\n`).join(""), 0o600);
  const composeArgs = (yml: string, envFile: string, ...rest: string[]) => [
    ...compose.baseArgs,
    "--project-name",
    projectName,
    "--file",
    yml,
    "--env-file",
    envFile,
    "--project-directory",
    dir,
    ...rest,
  ];
  const run = (args: string[], timeoutMs: number) => runCommand(compose.program, args, { timeoutMs, cwd: dir, secrets, signal: ctx.signal });
  const cancelled = (command?: CommandRun) =>
    done("CANCELLED", `cancelled by an admin: ${String(ctx.signal?.reason ?? "").slice(0, 200) || "no reason given"}`, { command, composePath });
  const check = await run(composeArgs(stagedYml, stagedEnv, "config", "--services"), ctx.composeTimeoutMs);
  if (check.cancelled || ctx.signal?.aborted) {
    await rm(staging, { recursive: true, force: true });
    return done("CANCELLED", "cancelled by an admin before the project changed", { command: check });
  }
  if (check.exitCode !== 0 || check.timedOut) {
    await rm(staging, { recursive: true, force: true });
    if (ENGINE_DOWN.test(check.stderr)) return done("DOCKER_UNAVAILABLE", lastLine(check.stderr), { command: check });
    if (check.timedOut) return done("TIMEOUT", `compose config did not finish within ${ctx.composeTimeoutMs} ms`, { command: check });
    return done("COMPOSE_INVALID", `compose rejected the file: ${lastLine(check.stderr)}`, { command: check });
  }
  const services = check.stdout.split("\n").map((s) => s.trim()).filter(Boolean).sort();

  // 4. Promote and apply. .env first: a crash in between leaves the old file with new variables,
  // which the next apply of this order (journal replay) overwrites anyway.
  await rename(stagedEnv, envPath);
  await rename(stagedYml, composePath);
  await rm(staging, { recursive: true, force: true });
  let before: ProjectContainers;
  try {
    before = await readProjectContainers(projectName);
  } catch (e) {
    if (e instanceof EngineError) return done("DOCKER_UNAVAILABLE", e.message, { command: e.run, composePath });
    throw e;
  }
  const up = await run(composeArgs(composePath, envPath, "up", "-d", "--remove-orphans"), ctx.composeTimeoutMs);
  if (up.cancelled) return cancelled(up);
  if (up.timedOut) return done("TIMEOUT", `compose up did not finish within ${ctx.composeTimeoutMs} ms`, { command: up, composePath });
  if (up.exitCode !== 0) {
    const code = ENGINE_DOWN.test(up.stderr) ? "DOCKER_UNAVAILABLE" : "COMPOSE_FAILED";
    const seen = await readProjectContainers(projectName).catch(() => undefined);
    return done(code, `compose up failed (exit ${up.exitCode}): ${lastLine(up.stderr)}`, {
      command: up,
      composePath,
      services: seen ? observeServices(services, seen) : [],
    });
  }

  // 5. Honest success: wait for the containers, not just the exit code.
  const deadline = Date.now() + ctx.readyTimeoutMs;
  let after = await readProjectContainers(projectName);
  let observed = observeServices(services, after);
  while (!observed.every((s) => s.state === "running") && Date.now() < deadline) {
    if (ctx.signal?.aborted) return cancelled(up);
    await new Promise((r) => setTimeout(r, READY_POLL_MS));
    after = await readProjectContainers(projectName);
    observed = observeServices(services, after);
  }
  const { changed, unchanged } = containerChanges(before.byService, after.byService);
  const parts = { command: up, composePath, services: observed, changed, unchanged };
  const notReady = observed.filter((s) => s.state !== "running");
  if (notReady.length > 0) {
    const list = notReady.map((s) => `${s.service}: ${s.state}`).join(", ");
    return done("SERVICES_NOT_RUNNING", `not running after ${ctx.readyTimeoutMs} ms: ${list}`, parts);
  }
  // 6. Recorded for heartbeats, which report the project as the engine shows it from now on.
  await writeProjectState(ctx.workDir, {
    schema_version: "v1",
    project_name: projectName,
    tenant_id: tenantId,
    spec_hash: ds?.specHash ?? "",
    work_order_id: order.id,
    services,
    applied_at: new Date().toISOString(),
  });
  return outcome("APPLY_OK", `${services.length} service(s) running; changed: ${changed.join(", ") || "none"}`, started, parts);
}

interface Parts {
  command?: CommandRun;
  composePath: string;
  services: ServiceObservation[];
  changed?: string[];
  unchanged?: string[];
}

function outcome(code: string, message: string, started: number, p: Parts): DeployOutcome {
  const result = create(WorkOrderResultSchema, {
    success: code === "APPLY_OK",
    retriable: RETRIABLE.has(code),
    code,
    message,
    details: {
      durationMs: BigInt(Math.round(performance.now() - started)),
      composePath: p.composePath,
      changedResources: p.changed ?? [],
      unchangedResources: p.unchanged ?? [],
      services: p.services,
      command: p.command
        ? create(CommandResultSchema, {
            program: p.command.program,
            args: p.command.args,
            exitCode: p.command.exitCode,
            stdout: p.command.stdout,
            stderr: p.command.stderr,
            timedOut: p.command.timedOut,
          })
        : undefined,
    },
  });
  return { result, services: p.services, composePath: p.composePath };
}

async function writeDurable(path: string, data: string, mode: number): Promise<void> {
  await writeFile(path, data, { mode });
  const fh = await open(path, "r+");
  try {
    await fh.chmod(mode);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

function lastLine(s: string): string {
  const lines = s.trim().split("\n").filter((l) => l.trim() !== "");
  return lines[lines.length - 1] ?? "";
}
