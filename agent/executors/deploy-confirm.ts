// The steps of a deploy after `compose up` (deploy-service.ts has the plan): confirm it (images
// pinned by digest run by that digest; the health gate: containers running and healthy, the
// gate's probes, the post-deploy hooks; a failed gate restores the last spec that applied here,
// deploy-safety.ts), then record it (the spec to restore, the project's state, the version
// sticker) and delete the volumes a deletion asked to remove.
import { create } from "@bufbuild/protobuf";
import { durationMs, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { VersionStickerSchema, type VersionSticker } from "../../gen/skipper/v1/order_action_pb.js";
import type { SecretKeyRef } from "../../gen/skipper/v1/secret_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { appliedProcess, writeAppliedSpec } from "../engine/applied-spec.js";
import { digestMismatches, digestOf, projectImages } from "../engine/images.js";
import { EngineError } from "../engine/project-containers.js";
import { keepAppliedSecrets } from "../engine/project-secrets.js";
import { writeProjectState } from "../engine/project-state.js";
import { recordLock } from "../engine/image-lock-history.js";
import { removeProjectVolumes } from "../engine/project-volumes.js";
import { asResourceIds, containerChanges } from "./container-changes.js";
import type { DeployOutcome } from "./deploy-context.js";
import { rollBack, runHooks } from "./deploy-safety.js";
import { cancelled, end, type Deploy } from "./deploy-state.js";
import { awaitHealthy } from "./health-gate.js";
import { writeStickerFile } from "./sticker.js";
import { runningLockMismatches } from "./image-lock.js";

/**
 * check pinned digests: images pinned by digest must run by that digest (the engine records the
 * repo digest it pulled), and every image the lock step resolved must run as locked (Compose may
 * have pulled again since); a mismatch is rolled back as a failed gate is.
 */
export async function checkPinnedDigests(d: Deploy): Promise<DeployOutcome | undefined> {
  const pinned = d.project.composeFile.includes("@sha256:");
  const lock = { ...(d.localImages ?? {}), ...(d.imageLock ?? {}) };
  if (!pinned && Object.keys(lock).length === 0) return undefined;
  const images = await projectImages(d.projectName);
  const wrong = [...(pinned ? digestMismatches(images) : []), ...runningLockMismatches(images, lock)];
  if (wrong.length === 0) return undefined;
  return rollBack(d.order, d.ctx, {
    failure: `image digest mismatch: ${wrong.join("; ")}`,
    code: "DIGEST_MISMATCH",
    parts: { command: d.up, composePath: d.files.composePath, services: [] },
    started: d.started,
    redeploy: d.redeploy,
  });
}

/**
 * health gate: honest success waits for the containers (and the gate's probes, then the
 * post-deploy hooks), not just the exit code. Failed without a gate it is reported as such; with
 * one, the last spec that applied here is restored.
 */
export async function healthGate(d: Deploy): Promise<DeployOutcome | undefined> {
  const { ds, ctx, up } = d;
  const safety = ds.safety;
  const gate = safety?.healthGate;
  const verdict = await awaitHealthy(d.projectName, d.services, {
    deadlineMs: gate?.deadline ? durationMs(gate.deadline) : ctx.readyTimeoutMs,
    probes: gate?.probes ?? [],
    signal: ctx.signal,
    containers: !d.processesOnly,
  });
  // Cancelled while the gate decides: with a gate the unproven spec does not stay.
  if (verdict.cancelled && !gate) return cancelled(d, up);
  const { changed, unchanged } = containerChanges(d.before?.byService ?? new Map(), verdict.containers.byService);
  const parts = {
    command: up,
    composePath: d.processesOnly ? "" : d.files.composePath,
    services: verdict.observed,
    changed: asResourceIds(changed, ds.composeServices ?? {}),
    unchanged: asResourceIds(unchanged, ds.composeServices ?? {}),
    probes: verdict.probes,
  };
  d.parts = parts;
  d.changed = changed;
  let failure = verdict.failure;
  if (!failure && safety && safety.postDeploy.length > 0) {
    const post = await runHooks(safety.postDeploy, "post-deploy", ctx, d.files.dir);
    if (post) {
      failure = post.message;
      parts.command = post.run ?? parts.command;
    }
  }
  if (failure && !gate) return end(d, verdict.failure ? "SERVICES_NOT_RUNNING" : "POST_DEPLOY_FAILED", failure, parts);
  if (failure)
    return rollBack(d.order, ctx, {
      failure,
      code: verdict.cancelled ? "CANCELLED" : undefined,
      parts,
      started: d.started,
      redeploy: d.redeploy,
    });
  return undefined;
}

/**
 * record the spec: kept as the spec to restore should a later deploy fail its gate, then for
 * heartbeats, which report the project as the engine shows it from now on (a crash in between
 * leaves the restore point current and the state record one apply behind, which the next apply
 * fixes).
 */
export async function recordSpec(d: Deploy): Promise<undefined> {
  const { ds, project, order } = d;
  const appliedAt = new Date().toISOString();
  d.appliedAt = appliedAt;
  // The values first, tagged with the spec they ran with: a restore refuses values of another spec.
  await keepAppliedSecrets(d.files.dir, ds.specHash ?? "");
  // Then the lock it ran with, before the spec becomes the restore point: a crash in between must
  // not leave a restore point whose images a registry-less restore cannot find by digest.
  await recordLock(d.files.dir, ds.specHash ?? "", { ...d.localImages, ...d.imageLock });
  await writeAppliedSpec(d.ctx.workDir, {
    schema_version: "v1",
    tenant_id: d.tenantId,
    project_name: d.projectName,
    spec_hash: ds.specHash ?? "",
    work_order_id: order.id,
    compose_file: project.composeFile,
    env: { ...d.env },
    secret_env: refsOf(project.secretEnv),
    secret_files: refsOf(project.secretFiles),
    registry_secret_ids: [...(ds.registrySecretIds ?? [])],
    compose_services: { ...ds.composeServices },
    service_ids: [...(ds.serviceIds ?? [])],
    processes: d.processes.map((p) => appliedProcess(p.spec, p.version)),
    applied_at: appliedAt,
  });
  await writeProjectState(d.ctx.workDir, {
    schema_version: "v1",
    project_name: d.projectName,
    tenant_id: d.tenantId,
    spec_hash: ds.specHash ?? "",
    work_order_id: order.id,
    services: d.services,
    applied_at: appliedAt,
  });
  return undefined;
}

/** write the sticker: what runs here, readable on the node without the controller. */
export async function writeSticker(d: Deploy): Promise<undefined> {
  d.sticker = await stickerOf(d.order, d.tenantId, d.projectName, d.appliedAt, !d.processesOnly);
  await writeStickerFile(d.ctx.workDir, d.sticker);
  return undefined;
}

/**
 * delete volumes: data a deletion asked to remove, of volumes the project does not use (best
 * effort: the engine refuses a volume a container still uses; the result says which went).
 */
export async function deleteVolumes(d: Deploy): Promise<undefined> {
  d.removal = await removeProjectVolumes(d.projectName, d.ds.deleteVolumes ?? []);
  return undefined;
}

// The sticker of a deploy: the spec (release), its deployment, and each service's image digest
// as the engine knows it (none when the engine does not say: the deploy has succeeded already;
// none asked for a project of process modules alone).
async function stickerOf(
  order: WorkOrder,
  tenantId: string,
  projectName: string,
  appliedAt: string,
  engine: boolean,
): Promise<VersionSticker> {
  const ds = order.desiredState;
  const images = !engine
    ? []
    : await projectImages(projectName).catch((e: unknown) => {
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

function refsOf(refs: Record<string, SecretKeyRef>): Record<string, { secret_id: string; key: string }> {
  return Object.fromEntries(Object.entries(refs).map(([name, r]) => [name, { secret_id: r.secretId, key: r.key }]));
}
