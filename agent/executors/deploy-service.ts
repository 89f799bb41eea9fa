// The deploy_service executor: makes a tenant's compose project and process modules on this host
// match the order. It is a plan of named steps (DEPLOY_PLAN), run in order over one deploy under
// way (Deploy, deploy-state.ts) once the order is checked; the first step that ends the deploy
// gives its outcome, and a deploy that passes them all is APPLY_OK. The steps up to `compose up`
// are in deploy-apply.ts, those after it in deploy-confirm.ts, the process modules' in
// deploy-processes.ts. Each, with the codes it can end with:
//
//   check the order        tenant id usable as a directory, project name, env      -> COMPOSE_INVALID
//                          a compose file or process modules (or both)            -> COMPOSE_INVALID
//                          each process spec (as deploy_process checks it), one
//                          per module                                              -> PROCESS_INVALID
//                          each process source under --allow-process-source        -> PROCESS_SOURCE_NOT_ALLOWED
//                          the tenant's compose policy, when the order carries one -> COMPOSE_POLICY_VIOLATION
//                          a Compose implementation on this host (with a compose file) -> DOCKER_UNAVAILABLE
//   reach the engine       `docker version` answers                                -> DOCKER_UNAVAILABLE
//   get the secrets        the project's secret values, when it uses any, asked of the controller
//                          under the order's claim (engine/project-secrets.ts)     -> SECRETS_UNAVAILABLE, COMPOSE_INVALID
//   stage the files        docker-compose.yml, .env (0600) and the secret directory (0700) written
//                          to a staging directory (project-files.ts)
//   check the files        with pre-deploy hooks, or a file too odd to read, Compose parses them
//                          (`config --services`); otherwise `up` is the check      -> COMPOSE_INVALID, CANCELLED
//   lock the images        each image reference resolved to a digest (deploy-images.ts): the
//                          order's lock for its spec (or the one recorded here when the spec
//                          last applied) found on the host by digest, or pulled and compared;
//                          unlocked tags pulled (a moving tag does not run a stale copy)
//                                  -> DIGEST_MISMATCH, IMAGE_PULL_FAILED, IMAGE_NOT_FOUND, DOCKER_UNAVAILABLE, CANCELLED
//                          (nothing changed: the staged files go)
//   pre-deploy hooks       the tenant's hooks, after Compose accepted the files     -> PRE_DEPLOY_FAILED, CANCELLED
//   promote                the files moved into <work_dir>/tenants/<tenant>/ (checked by `up`: the
//                          live ones kept aside until Compose accepts the new ones) -> DOCKER_UNAVAILABLE
//   compose up             `up -d --remove-orphans`; when `up` was the check and failed, `config`
//                          says whether the file was the problem, and the live files come back
//                                                 -> COMPOSE_INVALID, COMPOSE_FAILED, PULL_*, TIMEOUT, CANCELLED
//   check pinned digests   images pinned by digest run by that digest              -> DIGEST_MISMATCH (rolled back)
//   run the processes      each process module, under its lock: its version installed (or
//                          downloaded, sha256 checked), made active and running past the settle
//                          time (else its previous version runs again); modules the spec applied
//                          before declared and this one does not are stopped
//                            -> SOURCE_UNAVAILABLE, CHECKSUM_MISMATCH, PROCESS_EXITED, PROCESS_FAILED, CANCELLED
//   health gate            every service's containers running (and healthy where a healthcheck is
//                          defined); with a gate its probes, then post-deploy hooks; a failed gate
//                          restores the last spec that applied here, its process modules too
//                          (deploy-safety.ts)
//                                  -> SERVICES_NOT_RUNNING, POST_DEPLOY_FAILED, ROLLED_BACK, HEALTH_GATE_FAILED, ...
//   record the spec        the spec kept as the one to restore (with the versions its process
//                          modules ran, and its image lock), and the project's state record
//   write the sticker      the version sticker (.skipper-sticker.json: spec, deployment, image
//                          digests), returned in details.sticker
//   delete volumes         the volumes a deletion asked to remove (delete_volumes), best effort:
//                          details.volumes_deleted says which went, the message which could not
//
// Without a compose file (process modules alone: PROCESS_PLAN) nothing asks Docker: project
// directory (a compose project an earlier spec ran here is taken down: the one case that needs
// Compose -> DOCKER_UNAVAILABLE, COMPOSE_FAILED), pre-deploy hooks, run the processes, health gate
// (probes and hooks, no containers), record the spec, write the sticker (no image digests).
//
// Either way a file Compose rejects never stays in place of the live one. Every command is an
// argument array run through execa with a timeout; output is capped and the values of
// secret-shaped env keys are blanked from it.
import { create, toJson } from "@bufbuild/protobuf";
import { ComposeProjectSchema, ProcessObservationSchema } from "../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { composeViolations } from "../../common/compose-policy.js";
import { ID_PATTERN } from "../../common/ids.js";
import { isSecretKey } from "../../common/logging/redact.js";
import { describeRemoval } from "../engine/project-volumes.js";
import { checkFiles, composeUp, getSecrets, preDeployHooks, promote, reachEngine, stageFiles } from "./deploy-apply.js";
import { checkPinnedDigests, deleteVolumes, healthGate, recordSpec, writeSticker } from "./deploy-confirm.js";
import { outcome, type DeployContext, type DeployOutcome } from "./deploy-context.js";
import { describeProcesses, processesProblem, projectDirectory, runProcesses } from "./deploy-processes.js";
import type { Deploy, DeployStep } from "./deploy-state.js";
import { projectFiles } from "./project-files.js";
import { lockImages } from "./deploy-images.js";
import { planTheUpdates, switchTraffic } from "./deploy-traffic.js";

/** The steps of a deploy with a compose file, in order (the top of this file). */
const DEPLOY_PLAN: readonly DeployStep[] = [
  { name: "reach the engine", run: reachEngine },
  { name: "get the secrets", run: getSecrets },
  { name: "stage the files", run: stageFiles },
  { name: "check the files", run: checkFiles },
  { name: "lock the images", run: lockImages },
  { name: "pre-deploy hooks", run: preDeployHooks },
  { name: "promote", run: promote },
  { name: "plan the updates", run: planTheUpdates },
  { name: "compose up", run: composeUp },
  { name: "switch the traffic", run: switchTraffic },
  { name: "check pinned digests", run: checkPinnedDigests },
  { name: "run the processes", run: runProcesses },
  { name: "health gate", run: healthGate },
  { name: "record the spec", run: recordSpec },
  { name: "write the sticker", run: writeSticker },
  { name: "delete volumes", run: deleteVolumes },
];

/** The steps of a deploy of process modules alone (no compose file): none needs Docker. */
const PROCESS_PLAN: readonly DeployStep[] = [
  { name: "project directory", run: projectDirectory },
  { name: "pre-deploy hooks", run: preDeployHooks },
  { name: "run the processes", run: runProcesses },
  { name: "health gate", run: healthGate },
  { name: "record the spec", run: recordSpec },
  { name: "write the sticker", run: writeSticker },
];

/** Makes the order's tenant project on this host match its desired state (the steps above). */
export async function deployService(order: WorkOrder, ctx: DeployContext): Promise<DeployOutcome> {
  const d = checkOrder(order, ctx, performance.now());
  if ("result" in d) return d;
  for (const step of d.processesOnly ? PROCESS_PLAN : DEPLOY_PLAN) {
    const ended = await step.run(d);
    if (ended) return ended;
  }
  const removal = d.removal ?? { deleted: [], failed: [] };
  const compose = d.processesOnly
    ? ""
    : `${d.services.length} service(s) running; changed: ${d.changed.join(", ") || "none"}${describeRemoval(removal)}`;
  const message = [compose, describeProcesses(d), ...(d.imageNotes ?? [])].filter(Boolean).join("; ");
  const processes = d.processes.map((p) => toJson(ProcessObservationSchema, p.observed));
  const extra = processes.length > 0 ? { extra: { processes } } : {};
  const updates = d.updatePlan?.updates ?? [];
  return outcome("APPLY_OK", message, d.started, d.parts!, {
    volumesDeleted: removal.deleted,
    sticker: d.sticker,
    updates,
    imageLock: d.imageLock ?? {},
    ...extra,
  });
}

// Compose project names: lowercase letters, digits, dashes and underscores, starting alphanumeric.
const PROJECT_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

/** check the order: the deploy it asks for, or why it cannot be run. */
function checkOrder(order: WorkOrder, ctx: DeployContext, started: number): Deploy | DeployOutcome {
  const ds = order.desiredState;
  const project = ds?.composeProject;
  const tenantId = ds?.tenantId ?? "";
  const invalid = (message: string) => outcome("COMPOSE_INVALID", message, started, { composePath: "", services: [] });
  if (!ID_PATTERN.test(tenantId)) return invalid(`tenant id ${JSON.stringify(tenantId)} cannot name a directory`);
  const projectName = project?.projectName || tenantId;
  if (!PROJECT_NAME.test(projectName)) {
    return invalid(
      `compose project name ${JSON.stringify(projectName)} must be lowercase letters, digits, '-' or '_', starting with a letter or digit`,
    );
  }
  const processes = ds?.processes ?? [];
  const processesOnly = (project?.composeFile.trim() ?? "") === "";
  if (!ds || (processesOnly && processes.length === 0)) return invalid("the order carries no compose file and no process modules");
  // Routes need the host's proxy: refused before anything runs rather than deployed without the
  // traffic the tenant asked for.
  if (ds.routes.length > 0 && !ctx.proxy)
    return outcome(
      "PROXY_UNAVAILABLE",
      "the order has proxy routes, and this agent drives no proxy (skippy's --proxy-runtime and --proxy-master or --proxy-reload-command)",
      started,
      { composePath: "", services: [] },
    );
  if (ds.routes.length > 0 && processesOnly) return invalid("proxy routes name compose services, and the order has no compose file");
  const refused = processesProblem(processes, ctx.allowProcessSources ?? []);
  if (refused) return outcome(refused.code, refused.message, started, { composePath: "", services: [] });
  // Checked here again, before anything is written or run: the controller checked it when the
  // tenant was written, and a node enforces what it is asked to run.
  const policy = ds.composePolicy;
  if (policy && project && !processesOnly) {
    const violations = composeViolations(project.composeFile, { level: policy.level, allowedHostPaths: policy.allowedHostPaths });
    if (violations.length > 0) {
      const message = `the project breaks the tenant's compose policy: ${violations[0]!.message}`;
      const extra = { violations: violations.map((v) => `${v.path}: ${v.rule}`) };
      return outcome("COMPOSE_POLICY_VIOLATION", message, started, { composePath: "", services: [] }, { extra });
    }
  }
  const env = project?.env ?? {};
  for (const [k, v] of Object.entries(env)) {
    if (!ENV_KEY.test(k)) return invalid(`env key ${JSON.stringify(k)} is not a valid variable name`);
    if (/[\r\n\0]/.test(v)) return invalid(`env value of ${k} contains a line break or NUL`);
  }
  const hidden = Object.entries(env)
    .filter(([k]) => isSecretKey(k))
    .map(([, v]) => v);
  const compose = ctx.docker.compose;
  if (!compose && !processesOnly) {
    const message = ctx.docker.capabilities.message || "no Compose implementation found";
    return outcome("DOCKER_UNAVAILABLE", message, started, { composePath: "", services: [] });
  }
  const files = projectFiles(ctx.workDir, tenantId, order.id);
  return {
    order,
    ctx,
    started,
    ds,
    project: project ?? create(ComposeProjectSchema, { projectName }),
    tenantId,
    projectName,
    env,
    compose,
    processesOnly,
    files,
    hidden,
    redeploy: deployService,
    services: [],
    checkedByUp: false,
    processes: [],
    stopped: [],
    changed: [],
    appliedAt: "",
  };
}
