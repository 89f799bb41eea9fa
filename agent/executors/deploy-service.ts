// The deploy_service executor: makes a tenant's compose project on this host match the order.
//
//   1. check the order (tenant id usable as a directory, project name, env) -> COMPOSE_INVALID
//      and the project against the tenant's compose policy, when the order carries one
//                                                      -> COMPOSE_POLICY_VIOLATION (not retried)
//   2. the engine and Compose answer                                       -> DOCKER_UNAVAILABLE
//      the project's secret values, when it uses any, asked of the controller under the
//      order's claim (engine/project-secrets.ts)                -> SECRETS_UNAVAILABLE
//   3. write docker-compose.yml, .env (0600) and the secret directory (0700) to a staging
//      directory; with pre-deploy hooks,
//      have Compose parse them (`config --services`) and then run the hooks
//                                                      -> COMPOSE_INVALID, PRE_DEPLOY_FAILED
//   4. move the files into <work_dir>/tenants/<tenant>/ and run `up -d --remove-orphans`
//                                                      -> COMPOSE_FAILED, TIMEOUT, DOCKER_UNAVAILABLE
//      without hooks `up` is Compose's check: the live files wait in staging until it has
//      accepted the new ones, and come back if `config` then says the file was the problem
//                                                      -> COMPOSE_INVALID
//      either way a file Compose rejects never stays in place of the live one
//   5. wait until every service has its containers running (and healthy where a healthcheck is
//      defined) and, with a health gate, its probes and post-deploy hooks pass; otherwise
//      SERVICES_NOT_RUNNING, or with a gate: the last spec that applied here is restored
//      (ROLLED_BACK, both specs in details) or, with none to restore, HEALTH_GATE_FAILED
//   6. APPLY_OK, with the service resources whose containers changed, from the engine before and
//      after; the spec is recorded as the one to restore if a later deploy fails its gate, and
//      the tenant's version sticker (.skipper-sticker.json: spec, deployment, image digests) is
//      written and returned in details.sticker.
//   7. then the volumes whose data a deletion asked to remove (delete_volumes) are removed, best
//      effort: details.volumes_deleted says which went, the message which could not.
//
// Every command is an argument array run through execa with a timeout; output is capped and the
// values of secret-shaped env keys are blanked from it.
import { mkdir, readdir, readFile, rename, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { durationMs, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { VersionStickerSchema, type VersionSticker } from "../../gen/skipper/v1/order_action_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { ID_PATTERN } from "../../common/ids.js";
import { isSecretKey } from "../../common/logging/redact.js";
import { writeAppliedSpec } from "../engine/applied-spec.js";
import { pathExists, removeStaleTemps, writeFileAtomic } from "../engine/durable-file.js";
import { digestMismatches, digestOf, projectImages } from "../engine/images.js";
import { EngineError, observeServices, readProjectContainers, type ProjectContainers } from "../engine/project-containers.js";
import { writeProjectState } from "../engine/project-state.js";
import { describeRemoval, removeProjectVolumes } from "../engine/project-volumes.js";
import { runCommand, type CommandRun } from "../engine/run-command.js";
import {
  composeEnvironment,
  keepAppliedSecrets,
  namedInOrder,
  SECRET_DIR,
  secretValues,
  secretsProblem,
  usesSecrets,
  writeSecretDir,
  type ProjectSecrets,
} from "../engine/project-secrets.js";
import type { SecretKeyRef } from "../../gen/skipper/v1/secret_pb.js";
import { pullFailure, pullMessage } from "../engine/pull-failure.js";
import { parse } from "yaml";
import { asResourceIds, containerChanges } from "./container-changes.js";
import { composeViolations } from "../../common/compose-policy.js";
import { writeStickerFile } from "./sticker.js";
import { abortReason } from "./executor.js";
import { outcome, type DeployContext, type DeployOutcome, type Parts } from "./deploy-context.js";
import { rollBack, runHooks } from "./deploy-safety.js";
import { awaitHealthy } from "./health-gate.js";

// Compose project names: lowercase letters, digits, dashes and underscores, starting alphanumeric.
const PROJECT_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
// What the CLIs print when they cannot reach the engine.
const ENGINE_DOWN =
  /Cannot connect to the Docker daemon|Couldn't connect to Docker daemon|error during connect|Is the docker daemon running|connection refused.*docker\.sock/i;

/** Makes the order's tenant project on this host match its desired state (the steps above). */
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
    return done(
      "COMPOSE_INVALID",
      `compose project name ${JSON.stringify(projectName)} must be lowercase letters, digits, '-' or '_', starting with a letter or digit`,
    );
  }
  if (!project || project.composeFile.trim() === "") return done("COMPOSE_INVALID", "the order carries no compose file");
  // Checked here again, before anything is written or run: the controller checked it when the
  // tenant was written, and a node enforces what it is asked to run.
  const policy = ds?.composePolicy;
  if (policy) {
    const violations = composeViolations(project.composeFile, { level: policy.level, allowedHostPaths: policy.allowedHostPaths });
    if (violations.length > 0) {
      const message = `the project breaks the tenant's compose policy: ${violations[0]!.message}`;
      return outcome(
        "COMPOSE_POLICY_VIOLATION",
        message,
        started,
        { composePath: "", services: [] },
        {
          extra: { violations: violations.map((v) => `${v.path}: ${v.rule}`) },
        },
      );
    }
  }
  const env = project.env;
  for (const [k, v] of Object.entries(env)) {
    if (!ENV_KEY.test(k)) return done("COMPOSE_INVALID", `env key ${JSON.stringify(k)} is not a valid variable name`);
    if (/[\r\n\0]/.test(v)) return done("COMPOSE_INVALID", `env value of ${k} contains a line break or NUL`);
  }
  const hidden = Object.entries(env)
    .filter(([k]) => isSecretKey(k))
    .map(([, v]) => v);

  // 2. Engine and Compose.
  const compose = ctx.docker.compose;
  if (!compose) return done("DOCKER_UNAVAILABLE", ctx.docker.capabilities.message || "no Compose implementation found");
  const engine = await runCommand("docker", ["version", "--format", "{{.Server.Version}}"], { timeoutMs: 15_000 });
  if (engine.exitCode !== 0)
    return done("DOCKER_UNAVAILABLE", `docker engine unreachable: ${lastLine(engine.stderr)}`, { command: engine });

  // 2b. The project's secret values, asked for under this order's claim (never in the order).
  let secrets: ProjectSecrets | undefined;
  if (usesSecrets(ds)) {
    if (!ctx.secrets) return done("SECRETS_UNAVAILABLE", "the order's project uses secrets and this run has no way to get them");
    try {
      secrets = await ctx.secrets();
    } catch (e) {
      return done("SECRETS_UNAVAILABLE", `could not get the project's secret values: ${(e as Error).message}`);
    }
    const problem = secretsProblem(ds, secrets);
    if (problem) return done("COMPOSE_INVALID", problem);
    secrets = namedInOrder(ds, secrets);
    for (const v of secretValues(secrets)) hidden.push(v);
    if (Object.keys(secrets.env).some((k) => k in env)) return done("COMPOSE_INVALID", "a variable is set both in env and from a secret");
  }

  // 3. Stage and validate.
  const dir = join(ctx.workDir, "tenants", tenantId);
  const composePath = join(dir, "docker-compose.yml");
  const envPath = join(dir, ".env");
  const staging = join(dir, `.staging-${order.id}`);
  await mkdir(staging, { recursive: true, mode: 0o700 });
  // A state record or restore point half-written when the agent died (the env may hold secrets),
  // and what other orders staged and never promoted (an order whose lease was lost, or that was
  // not taken up after a restart): their secret directories hold values. The agent runs one order
  // at a time; this order's own staging (a replay's) is kept.
  await removeStaleTemps(dir);
  await removeOtherStaging(dir, basename(staging));
  const stagedYml = join(staging, "docker-compose.yml");
  const stagedEnv = join(staging, ".env");
  const secretDir = join(dir, SECRET_DIR);
  const stagedSecrets = join(staging, SECRET_DIR);
  if (secrets) await writeSecretDir(stagedSecrets, secrets);
  await writeFileAtomic(stagedYml, project.composeFile, { mode: 0o644 });
  await writeFileAtomic(
    stagedEnv,
    Object.entries(env)
      .map(([k, v]) => `${k}=${v}\n`)
      .join(""),
    { mode: 0o600 },
  );
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
  const run = (args: string[], timeoutMs: number) =>
    runCommand(compose.program, args, {
      timeoutMs,
      cwd: dir,
      secrets: hidden,
      signal: ctx.signal,
      env: composeEnvironment(env, secretDir, secrets),
    });
  // An admin's cancel, the order's timeout or a lost lease.
  const why = () => (ctx.signal ? abortReason(ctx.signal) : "") || "no reason given";
  const cancelled = (command?: CommandRun) => done("CANCELLED", `stopped: ${why()}`, { command, composePath });
  // Compose refused the file (`config` failed): why, as the order's result.
  const rejected = (check: CommandRun, path: string) => {
    if (ENGINE_DOWN.test(check.stderr)) return done("DOCKER_UNAVAILABLE", lastLine(check.stderr), { command: check });
    if (check.timedOut) return done("TIMEOUT", `compose config did not finish within ${ctx.composeTimeoutMs} ms`, { command: check });
    return done("COMPOSE_INVALID", `compose rejected the file: ${composeComplaint(check.stderr, path)}`, { command: check });
  };
  const stoppedEarly = async (command?: CommandRun) => {
    await rm(staging, { recursive: true, force: true });
    return done("CANCELLED", `stopped before the project changed: ${why()}`, { command });
  };
  // Compose checks the file before anything runs. With pre-deploy hooks that is a step of its
  // own (no hook runs for a file Compose rejects); otherwise `up` checks it itself, one Compose
  // run fewer (Compose v1 costs a Python start per run, about as long as the rest of a small
  // deploy), and the live files are kept aside until Compose has accepted the new ones.
  const hooks = (ds?.safety?.preDeploy.length ?? 0) > 0;
  let services = hooks ? undefined : servicesInFile(project.composeFile);
  const checkedByUp = services !== undefined;
  if (services === undefined) {
    const check = await run(composeArgs(stagedYml, stagedEnv, "config", "--services"), ctx.composeTimeoutMs);
    if (check.cancelled || ctx.signal?.aborted) return stoppedEarly(check);
    if (check.exitCode !== 0 || check.timedOut) {
      await rm(staging, { recursive: true, force: true });
      return rejected(check, staging);
    }
    services = check.stdout
      .split("\n")
      .map((s) => s.trim())
      .filter(Boolean)
      .sort();
  }
  if (hooks && ds?.safety) {
    const pre = await runHooks(ds.safety.preDeploy, "pre-deploy", ctx, dir);
    if (pre) {
      await rm(staging, { recursive: true, force: true });
      return done("PRE_DEPLOY_FAILED", `${pre.message}; nothing was changed`, { command: pre.run });
    }
  }
  // Stopped meanwhile: the live files stay as they were.
  if (ctx.signal?.aborted) return stoppedEarly();

  // 4. Promote and apply. .env first: a crash in between leaves the old file with new variables,
  // which the next apply of this order (journal replay) overwrites anyway.
  if (checkedByUp) await keepLive(staging, [composePath, envPath, secretDir]);
  await rename(stagedEnv, envPath);
  await replaceDir(stagedSecrets, secretDir);
  await rename(stagedYml, composePath);
  if (!checkedByUp) await rm(staging, { recursive: true, force: true });
  let before: ProjectContainers;
  try {
    before = await readProjectContainers(projectName);
  } catch (e) {
    if (checkedByUp) await restoreLive(staging, [composePath, envPath, secretDir]);
    if (e instanceof EngineError) return done("DOCKER_UNAVAILABLE", e.message, { command: e.run, composePath });
    throw e;
  }
  const up = await run(composeArgs(composePath, envPath, "up", "-d", "--remove-orphans"), ctx.composeTimeoutMs);
  if (checkedByUp) {
    // Failed: was it the file? Compose's own check says (a failed deploy only pays for it).
    const check =
      up.exitCode !== 0 && !up.cancelled && !up.timedOut && !ENGINE_DOWN.test(up.stderr)
        ? await run(composeArgs(composePath, envPath, "config", "--services"), ctx.composeTimeoutMs)
        : undefined;
    if (check && check.exitCode !== 0 && !check.cancelled && !check.timedOut && !ENGINE_DOWN.test(check.stderr)) {
      await restoreLive(staging, [composePath, envPath, secretDir]);
      return rejected(check, dir);
    }
    await rm(staging, { recursive: true, force: true });
  }
  if (up.cancelled) return cancelled(up);
  if (up.timedOut) return done("TIMEOUT", `compose up did not finish within ${ctx.composeTimeoutMs} ms`, { command: up, composePath });
  if (up.exitCode !== 0) {
    const pull = ENGINE_DOWN.test(up.stderr) ? undefined : pullFailure(up.stderr, imagesOf(project.composeFile));
    const code = ENGINE_DOWN.test(up.stderr) ? "DOCKER_UNAVAILABLE" : (pull?.code ?? "COMPOSE_FAILED");
    const seen = await readProjectContainers(projectName).catch(() => undefined);
    const message = pull
      ? pullMessage(
          pull,
          secrets?.registries.map((r) => r.registry),
        )
      : `compose up failed (exit ${up.exitCode}): ${lastLine(up.stderr)}`;
    return done(code, message, {
      command: up,
      composePath,
      services: seen ? observeServices(services, seen) : [],
    });
  }

  // 5. Honest success: wait for the containers (and the gate), not just the exit code.
  const safety = ds?.safety;
  const pinned = await checkPinnedDigests(projectName, project.composeFile);
  if (pinned)
    return rollBack(order, ctx, {
      failure: pinned,
      code: "DIGEST_MISMATCH",
      parts: { command: up, composePath, services: [] },
      started,
      redeploy: deployService,
    });
  const gate = safety?.healthGate;
  const verdict = await awaitHealthy(projectName, services, {
    deadlineMs: gate?.deadline ? durationMs(gate.deadline) : ctx.readyTimeoutMs,
    probes: gate?.probes ?? [],
    signal: ctx.signal,
  });
  // Cancelled while the gate decides: with a gate the unproven spec does not stay.
  if (verdict.cancelled && !gate) return cancelled(up);
  const { changed, unchanged } = containerChanges(before.byService, verdict.containers.byService);
  const parts = {
    command: up,
    composePath,
    services: verdict.observed,
    changed: asResourceIds(changed, ds?.composeServices ?? {}),
    unchanged: asResourceIds(unchanged, ds?.composeServices ?? {}),
    probes: verdict.probes,
  };
  let failure = verdict.failure;
  if (!failure && safety && safety.postDeploy.length > 0) {
    const post = await runHooks(safety.postDeploy, "post-deploy", ctx, dir);
    if (post) {
      failure = post.message;
      parts.command = post.run ?? parts.command;
    }
  }
  if (failure && !gate) return done(verdict.failure ? "SERVICES_NOT_RUNNING" : "POST_DEPLOY_FAILED", failure, parts);
  if (failure)
    return rollBack(order, ctx, { failure, code: verdict.cancelled ? "CANCELLED" : undefined, parts, started, redeploy: deployService });

  // 6. Recorded as the spec to restore should a later deploy fail its gate, then for heartbeats,
  // which report the project as the engine shows it from now on (a crash in between leaves the
  // restore point current and the state record one apply behind, which the next apply fixes).
  const appliedAt = new Date().toISOString();
  // The values first, tagged with the spec they ran with: a restore refuses values of another spec.
  await keepAppliedSecrets(dir, ds?.specHash ?? "");
  await writeAppliedSpec(ctx.workDir, {
    schema_version: "v1",
    tenant_id: tenantId,
    project_name: projectName,
    spec_hash: ds?.specHash ?? "",
    work_order_id: order.id,
    compose_file: project.composeFile,
    env: { ...env },
    secret_env: refsOf(project.secretEnv),
    secret_files: refsOf(project.secretFiles),
    registry_secret_ids: [...(ds?.registrySecretIds ?? [])],
    compose_services: { ...ds?.composeServices },
    service_ids: [...(ds?.serviceIds ?? [])],
    applied_at: appliedAt,
  });
  await writeProjectState(ctx.workDir, {
    schema_version: "v1",
    project_name: projectName,
    tenant_id: tenantId,
    spec_hash: ds?.specHash ?? "",
    work_order_id: order.id,
    services,
    applied_at: appliedAt,
  });
  // 7. The version sticker: what runs here, readable on the node without the controller.
  const sticker = await stickerOf(order, tenantId, projectName, appliedAt);
  await writeStickerFile(ctx.workDir, sticker);
  // 8. Data a deletion asked to remove, of volumes the project does not use (best effort: the
  // engine refuses a volume a container still uses; the result says which went).
  const gone = await removeProjectVolumes(projectName, ds?.deleteVolumes ?? []);
  return outcome(
    "APPLY_OK",
    `${services.length} service(s) running; changed: ${changed.join(", ") || "none"}${describeRemoval(gone)}`,
    started,
    parts,
    { volumesDeleted: gone.deleted, sticker },
  );
}

// The sticker of a deploy: the spec (release), its deployment, and each service's image digest
// as the engine knows it (none when the engine does not say: the deploy has succeeded already).
async function stickerOf(order: WorkOrder, tenantId: string, projectName: string, appliedAt: string): Promise<VersionSticker> {
  const ds = order.desiredState;
  const images = await projectImages(projectName).catch((e: unknown) => {
    if (e instanceof EngineError) return [];
    throw e;
  });
  return create(VersionStickerSchema, {
    schemaVersion: "v1",
    releaseId: ds?.specHash ?? "",
    deploymentId: ds?.deploymentId ?? "",
    imageDigests: Object.fromEntries(images.map((i) => [i.service, digestOf(i.image)])),
    writtenAt: timestampFromDate(new Date(appliedAt)),
    tenantId,
    nodeId: order.target?.nodeId ?? "",
  });
}

// Images pinned by digest must run by that digest: the engine records the repo digest it pulled.
// Undefined when nothing is pinned or everything matches; the mismatch otherwise.
async function checkPinnedDigests(projectName: string, composeFile: string): Promise<string | undefined> {
  if (!composeFile.includes("@sha256:")) return undefined;
  const wrong = digestMismatches(await projectImages(projectName));
  return wrong.length > 0 ? `image digest mismatch: ${wrong.join("; ")}` : undefined;
}

/** Each service's image as the compose file writes it (variables unresolved), for naming a failed pull. */
function imagesOf(composeFile: string): Map<string, string> {
  const out = new Map<string, string>();
  try {
    const doc = parse(composeFile) as { services?: Record<string, { image?: unknown }> } | null;
    for (const [name, svc] of Object.entries(doc?.services ?? {})) if (typeof svc?.image === "string") out.set(name, svc.image);
  } catch {
    // Compose accepted the file; a file this parser reads differently names no image, that is all.
  }
  return out;
}

/**
 * What Compose said is wrong with a file, as one line: its lines joined, without the staging
 * directory's path and with the "in <file>, line L, column C" lines of Compose v1 turned into one
 * location, so the headline says what and where ("expected ',' or ']' … (line 3, column 12)"),
 * not the last line of a traceback.
 */
export function composeComplaint(stderr: string, staging: string): string {
  let where = "";
  const said: string[] = [];
  for (const raw of stderr.split("\n")) {
    const line = raw.split(`${staging}/`).join("").trim();
    if (line === "") continue;
    const at = /^in "[^"]*", (line \d+, column \d+)$/.exec(line);
    if (at) where ||= at[1]!;
    else said.push(line.replace(/^yaml\.\w+\.\w+Error: /, ""));
  }
  const text = `${said.join("; ")}${where ? ` (${where})` : ""}`;
  return text.length > 500 ? `${text.slice(0, 497)}...` : text;
}

function lastLine(s: string): string {
  const lines = s
    .trim()
    .split("\n")
    .filter((l) => l.trim() !== "");
  return lines[lines.length - 1] ?? "";
}

/**
 * The services `up` starts, read from the file itself: the keys of `services` without a profile.
 * Undefined when the file is not plain enough to tell (Compose's own check then runs first).
 */
export function servicesInFile(composeFile: string): string[] | undefined {
  let doc: unknown;
  try {
    doc = parse(composeFile);
  } catch {
    return undefined;
  }
  const services = (doc as { services?: unknown } | null)?.services;
  if (typeof services !== "object" || services === null || Array.isArray(services)) return undefined;
  const out: string[] = [];
  for (const [name, svc] of Object.entries(services as Record<string, unknown>)) {
    if (typeof svc !== "object" || svc === null || Array.isArray(svc)) return undefined;
    const profiles = (svc as { profiles?: unknown }).profiles;
    if (Array.isArray(profiles) && profiles.length > 0) continue;
    out.push(name);
  }
  return out.length > 0 ? out.sort() : undefined;
}

// The live files moved aside into the order's staging directory while `up` checks the new ones.
// A marker written first says which existed, so a replay of the order after a crash (its new
// files already live) neither keeps those nor loses the ones kept.
const KEPT = "kept.json";

async function keepLive(staging: string, live: string[]): Promise<void> {
  if (await pathExists(join(staging, KEPT))) return;
  const had = await Promise.all(live.map(pathExists));
  await writeFileAtomic(join(staging, KEPT), `${JSON.stringify(Object.fromEntries(live.map((p, i) => [basename(p), had[i]])))}\n`, {
    mode: 0o600,
  });
  for (const [i, p] of live.entries()) if (had[i]) await rename(p, join(staging, `kept-${basename(p)}`));
}

// Puts a staged directory in place of the live one (or removes the live one when none was
// staged). Renames only, so the live path is missing for two renames' time at most, never for a
// copy's or a delete's; a kill in between leaves the old one beside it (.old), which the next
// deploy's replay puts right.
async function replaceDir(staged: string, live: string): Promise<void> {
  const old = `${live}.old`;
  await rm(old, { recursive: true, force: true });
  if (await pathExists(live)) await rename(live, old);
  if (await pathExists(staged)) await rename(staged, live);
  await rm(old, { recursive: true, force: true });
}

async function removeOtherStaging(dir: string, keep: string): Promise<void> {
  for (const name of await readdir(dir).catch(() => [] as string[]))
    if (name.startsWith(".staging-") && name !== keep) await rm(join(dir, name), { recursive: true, force: true });
}

function refsOf(refs: Record<string, SecretKeyRef>): Record<string, { secret_id: string; key: string }> {
  return Object.fromEntries(Object.entries(refs).map(([name, r]) => [name, { secret_id: r.secretId, key: r.key }]));
}

// Puts the kept files back (and removes new ones that had no predecessor), then the staging directory.
async function restoreLive(staging: string, live: string[]): Promise<void> {
  const had = JSON.parse(await readFile(join(staging, KEPT), "utf8")) as Record<string, boolean>;
  for (const p of live) {
    await rm(p, { recursive: true, force: true });
    if (had[basename(p)]) await rename(join(staging, `kept-${basename(p)}`), p);
  }
  await rm(staging, { recursive: true, force: true });
}
