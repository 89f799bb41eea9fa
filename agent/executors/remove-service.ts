// The remove_service executor: brings a tenant's compose project down on this host.
//   1. check the order (tenant id usable as a directory, project name)      -> REMOVE_INVALID
//   2. the engine answers                                                   -> DOCKER_UNAVAILABLE
//   3. with the project's files: `compose down --remove-orphans` (plus -v when the order asks
//      for the data to go); without them: remove the project's containers by label
//                                                             -> COMPOSE_FAILED, TIMEOUT
//   4. no container of the project is left                    -> REMOVE_FAILED otherwise; then
//      the volumes whose data a deletion asked to remove (delete_volumes), best effort
//   5. the project's files and state record are removed; REMOVE_OK. Removing a project that is
//      not there is REMOVE_OK too (idempotent).
// The tenant's process modules (those the order names and those its applied spec declared) are
// stopped first; their installed versions stay. A project of process modules alone (no compose
// file on disk, and its applied spec had none, or none is recorded and the order names modules)
// skips steps 2-4: its removal needs no Docker.
import type { HostProxy } from "../proxy/host-proxy.js";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { CommandResultSchema, WorkOrderResultSchema, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { ID_PATTERN } from "../../common/ids.js";
import type { DockerHost } from "../engine/docker-host.js";
import { runCommand, type CommandRun } from "../engine/run-command.js";
import { EngineError, readProjectContainers } from "../engine/project-containers.js";
import { describeRemoval, removeProjectVolumes, type VolumeRemoval } from "../engine/project-volumes.js";
import { pathExists } from "../engine/durable-file.js";
import { readAppliedSpec } from "../engine/applied-spec.js";
import type { DeployOutcome } from "./deploy-context.js";
import { stopModules } from "./deploy-processes.js";
import type { ProcessExecutorOptions } from "./process-result.js";

const PROJECT_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/;

export interface RemoveContext {
  workDir: string;
  docker: DockerHost;
  composeTimeoutMs: number;
  /** How process modules are stopped (default: 10 s before SIGKILL). */
  process?: ProcessExecutorOptions;
  /** The host's proxy (--proxy-*): the tenant's routes leave it before its containers go. */
  proxy?: HostProxy;
}

/** Brings the tenant's project down on this host and removes its files (the steps above). */
export async function removeService(order: WorkOrder, ctx: RemoveContext): Promise<DeployOutcome> {
  const started = performance.now();
  const ds = order.desiredState;
  const tenantId = ds?.tenantId ?? "";
  const projectName = ds?.composeProject?.projectName || tenantId;
  const done = (code: string, message: string, command?: CommandRun, volumesDeleted: string[] = []): DeployOutcome => ({
    result: create(WorkOrderResultSchema, {
      success: code === "REMOVE_OK",
      retriable: code === "DOCKER_UNAVAILABLE" || code === "TIMEOUT" || code === "COMPOSE_FAILED" || code === "REMOVE_FAILED",
      code,
      message,
      details: {
        durationMs: BigInt(Math.round(performance.now() - started)),
        command:
          command &&
          create(CommandResultSchema, {
            program: command.program,
            args: command.args,
            exitCode: command.exitCode,
            stdout: command.stdout,
            stderr: command.stderr,
            timedOut: command.timedOut,
          }),
        volumesDeleted,
      },
    }),
    services: [],
    composePath: "",
  });
  if (!ID_PATTERN.test(tenantId)) return done("REMOVE_INVALID", `tenant id ${JSON.stringify(tenantId)} cannot name a directory`);
  if (!PROJECT_NAME.test(projectName)) return done("REMOVE_INVALID", `compose project name ${JSON.stringify(projectName)} is not valid`);
  const dir = join(ctx.workDir, "tenants", tenantId);
  const file = join(dir, "docker-compose.yml");
  let command: CommandRun | undefined;
  let volumes: VolumeRemoval = { deleted: [], failed: [] };
  // Its routes first: the proxy stops sending it requests before its containers stop.
  // Alone on the tenant's routes, as a deploy's traffic switch is: the sync at agent start must not
  // put back backends removed here.
  const proxy = ctx.proxy;
  if (proxy) {
    try {
      await proxy.exclusive(tenantId, async () => {
        if (await proxy.routesOf(tenantId)) await proxy.setRoutes({ tenantId, routes: [], servers: new Map() });
      });
    } catch (e) {
      return done("REMOVE_FAILED", `the host's proxy still routes to project ${projectName}: ${(e as Error).message}`);
    }
  }
  const applied = await readAppliedSpec(ctx.workDir, tenantId);
  const modules = [...(ds?.processes ?? []), ...(applied?.processes ?? [])].map((p) => p.module);
  const stopped = await stopModules(ctx.workDir, tenantId, modules, ctx.process);
  const processes = stopped.length > 0 ? `; stopped process modules ${stopped.join(", ")}` : "";
  const composeless = applied ? applied.compose_file.trim() === "" : (ds?.processes.length ?? 0) > 0;
  if (composeless && !(await pathExists(file))) {
    await rm(dir, { recursive: true, force: true });
    return done("REMOVE_OK", `project ${projectName} removed${processes}`);
  }
  try {
    if (ctx.docker.compose && (await pathExists(file))) {
      const c = ctx.docker.compose;
      const args = [...c.baseArgs, "--project-name", projectName, "--file", file, "--project-directory", dir];
      if (await pathExists(join(dir, ".env"))) args.push("--env-file", join(dir, ".env"));
      // No --timeout: it would override each service's stop_grace_period (compose's default is 10 s).
      args.push("down", "--remove-orphans", ...(ds?.removeVolumes ? ["--volumes"] : []));
      command = await runCommand(c.program, args, { timeoutMs: ctx.composeTimeoutMs, cwd: dir });
      if (command.timedOut) return done("TIMEOUT", `compose down did not finish within ${ctx.composeTimeoutMs} ms`, command);
      if (command.exitCode !== 0) return done("COMPOSE_FAILED", `compose down failed (exit ${command.exitCode})`, command);
    } else {
      const seen = await readProjectContainers(projectName);
      const ids = [...seen.byService.values()].flat().map((c) => c.containerId);
      if (ids.length > 0) {
        command = await runCommand("docker", ["rm", "--force", ...(ds?.removeVolumes ? ["--volumes"] : []), ...ids], {
          timeoutMs: ctx.composeTimeoutMs,
        });
        if (command.exitCode !== 0) return done("COMPOSE_FAILED", `docker rm failed (exit ${command.exitCode})`, command);
      }
    }
    const left = await readProjectContainers(projectName);
    if (left.byService.size > 0)
      return done("REMOVE_FAILED", `containers of ${projectName} are still there: ${[...left.byService.keys()].join(", ")}`, command);
    if (!ds?.removeVolumes && (ds?.deleteVolumes.length ?? 0) > 0) volumes = await removeProjectVolumes(projectName, ds!.deleteVolumes);
  } catch (e) {
    if (e instanceof EngineError) return done("DOCKER_UNAVAILABLE", e.message, e.run);
    throw e;
  }
  await rm(dir, { recursive: true, force: true });
  return done(
    "REMOVE_OK",
    `project ${projectName} removed${ds?.removeVolumes ? " with its volumes" : ""}${describeRemoval(volumes)}${processes}`,
    command,
    volumes.deleted,
  );
}
