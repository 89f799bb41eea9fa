// A deploy under way (Deploy): what its order asks, where its files go and what the steps of
// deploy-service.ts's plan found so far; and what every step uses to run Compose for it and to
// end it with an outcome (cancelled, stopped before the project changed, a file Compose rejected).
import { rm } from "node:fs/promises";
import type { VersionSticker } from "../../gen/skipper/v1/order_action_pb.js";
import type { ProcessSpec } from "../../gen/skipper/v1/process_pb.js";
import type { ComposeProject, ProcessObservation } from "../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder, WorkOrderDesiredState } from "../../gen/skipper/v1/work_order_pb.js";
import type { ComposeCli } from "../engine/docker-host.js";
import type { ProjectContainers } from "../engine/project-containers.js";
import { composeEnvironment, type ProjectSecrets } from "../engine/project-secrets.js";
import type { VolumeRemoval } from "../engine/project-volumes.js";
import { runCommand, type CommandRun } from "../engine/run-command.js";
import { composeComplaint, ENGINE_DOWN, lastLine } from "./compose-output.js";
import { outcome, type DeployContext, type DeployOutcome, type Parts } from "./deploy-context.js";
import { abortReason } from "./executor.js";
import type { ProjectFiles } from "./project-files.js";
import type { UpdatePlan } from "./update-plan.js";

/** One step of a deploy: it ends the deploy with an outcome, or returns nothing and the next step runs. */
export interface DeployStep {
  name: string;
  run: (d: Deploy) => Promise<DeployOutcome | undefined>;
}

/** A deploy under way: what the order asks, where its files go, and what the steps found so far. */
export interface Deploy {
  readonly order: WorkOrder;
  readonly ctx: DeployContext;
  /** performance.now() when the deploy began (results carry their duration). */
  readonly started: number;
  readonly ds: WorkOrderDesiredState;
  readonly project: ComposeProject;
  readonly tenantId: string;
  readonly projectName: string;
  readonly env: Record<string, string>;
  /** Compose on this host; undefined only for a deploy of process modules alone (no compose file). */
  readonly compose?: ComposeCli;
  /** The order carries no compose file, only process modules: nothing asks the engine. */
  readonly processesOnly: boolean;
  readonly files: ProjectFiles;
  /** Values blanked from command output: secret-shaped env values, then the secret values. */
  readonly hidden: string[];
  /** Deploys an order (deployService itself: a rollback is a deploy of the restored spec). */
  readonly redeploy: (order: WorkOrder, ctx: DeployContext) => Promise<DeployOutcome>;
  // Found by the steps, each set by the step named.
  /** get the secrets: the project's secret values, when it uses any. */
  secrets?: ProjectSecrets;
  /** check the files: the services `up` starts. */
  services: string[];
  /** check the files: `up` is Compose's check of the files (no pre-deploy hooks, a plain file). */
  checkedByUp: boolean;
  /** lock the images: image reference -> the digest it resolved to (the spec's lock on this node). */
  imageLock?: Record<string, string>;
  /** lock the images: image reference -> id, of images that exist on this host only (no registry digest). */
  localImages?: Record<string, string>;
  /** lock the images: images whose registry could not be asked, run from the local copy. */
  imageNotes?: string[];
  /** promote: the project's containers before `up`. */
  before?: ProjectContainers;
  /** plan the updates: which changing services are started first (their containers `up` leaves alone), and why. */
  updatePlan?: UpdatePlan;
  /** compose up: its run. */
  up?: CommandRun;
  /** run the processes: each module of the order, the version that runs and the module as it is now. */
  processes: { spec: ProcessSpec; version: string; observed: ProcessObservation }[];
  /** run the processes: modules the previous spec declared and this one does not, stopped. */
  stopped: string[];
  /** health gate: what the deploy observed and changed. */
  parts?: Parts;
  changed: string[];
  /** record the spec: when the spec applied. */
  appliedAt: string;
  /** write the sticker: the sticker written. */
  sticker?: VersionSticker;
  /** delete volumes: which went. */
  removal?: VolumeRemoval;
}

/** The deploy's outcome `code` with `message`; nothing observed unless `extra` says. */
export function end(d: Deploy, code: string, message: string, extra: Partial<Parts> = {}): DeployOutcome {
  return outcome(code, message, d.started, { composePath: "", services: [], ...extra });
}

/** Whether the tenant has pre-deploy hooks (Compose then checks the files in a step of their own). */
export function hasPreDeployHooks(d: Deploy): boolean {
  return (d.ds.safety?.preDeploy.length ?? 0) > 0;
}

// The plan with a compose file only runs once checkOrder found Compose on this host.
function composeOf(d: Deploy): ComposeCli {
  if (!d.compose) throw new Error("no Compose implementation for a step that runs Compose");
  return d.compose;
}

/** Compose's arguments for the project with files `yml` and `envFile`, then `rest`. */
export function composeArgs(d: Deploy, yml: string, envFile: string, ...rest: string[]): string[] {
  return [
    ...composeOf(d).baseArgs,
    "--project-name",
    d.projectName,
    "--file",
    yml,
    "--env-file",
    envFile,
    "--project-directory",
    d.files.dir,
    ...rest,
  ];
}

/** Runs Compose in the project's directory, stopped by the order's signal, its secret values blanked. */
export function runCompose(d: Deploy, args: string[]): Promise<CommandRun> {
  return runCommand(composeOf(d).program, args, {
    timeoutMs: d.ctx.composeTimeoutMs,
    cwd: d.files.dir,
    secrets: d.hidden,
    signal: d.ctx.signal,
    env: composeEnvironment(d.env, d.files.secretDir, d.secrets),
  });
}

// An admin's cancel, the order's timeout or a lost lease.
function why(d: Deploy): string {
  return (d.ctx.signal ? abortReason(d.ctx.signal) : "") || "no reason given";
}

/** Stopped after the project changed. */
export function cancelled(d: Deploy, command?: CommandRun): DeployOutcome {
  return end(d, "CANCELLED", `stopped: ${why(d)}`, { command, composePath: d.files.composePath });
}

/** Stopped before the project changed: the staged files go. */
export async function stoppedEarly(d: Deploy, command?: CommandRun): Promise<DeployOutcome> {
  await rm(d.files.staging, { recursive: true, force: true });
  return end(d, "CANCELLED", `stopped before the project changed: ${why(d)}`, { command });
}

/** Compose refused the file (`config` failed): why, as the order's result. */
export function rejected(d: Deploy, check: CommandRun, path: string): DeployOutcome {
  if (ENGINE_DOWN.test(check.stderr)) return end(d, "DOCKER_UNAVAILABLE", lastLine(check.stderr), { command: check });
  if (check.timedOut) return end(d, "TIMEOUT", `compose config did not finish within ${d.ctx.composeTimeoutMs} ms`, { command: check });
  return end(d, "COMPOSE_INVALID", `compose rejected the file: ${composeComplaint(check.stderr, path)}`, { command: check });
}
