// lock the images: the deploy step (deploy-service.ts has the plan) that makes every image the
// project runs the one its lock names, before anything changes on the host (the files are only
// staged). Per image reference (image-lock.ts reads them from the compose file):
//   locked (the order's lock for its spec, else the lock this node recorded when the spec last
//   applied here: a restore's), and the engine has that digest   -> used as it is; the tag is
//                                                                   pointed at it; nothing pulled
//   locked, not here    -> pulled; the digest the registry now serves must be the locked one,
//                          else DIGEST_MISMATCH (the tag moved), the node's own tag put back
//                          where it pointed (a tag the node did not have stays as pulled)
//   not locked, a tag that came from a registry (or is absent) -> pulled, so a moving tag does not
//                          run a stale copy; a registry that cannot be reached leaves a local
//                          copy in use (said in the result), no copy is IMAGE_PULL_FAILED/NOT_FOUND
//   not locked, an image that exists here only (built or loaded: no registry digest) -> used;
//                          its id is kept for this node's restores, not sent as a lock (another
//                          host's copy of it has another id)
//   pull_policy never/build: left to Compose; missing/if_not_present: pulled only when absent
// What each resolved to is the deploy's lock (d.imageLock), reported with its result and recorded
// for the spec when it applies (image-lock-history.ts).
import { rm } from "node:fs/promises";
import { failureCause } from "../../common/failure-cause.js";
import { type EngineImage, findImage, ImageCommandError, pullImage, tagImage, type ImageCommandOptions } from "../engine/image-store.js";
import { recordedLock } from "../engine/image-lock-history.js";
import { composeEnvironment } from "../engine/project-secrets.js";
import { pullFailure, pullMessage } from "../engine/pull-failure.js";
import { scrub, type CommandRun } from "../engine/run-command.js";
import { outcome, type DeployOutcome } from "./deploy-context.js";
import { composeArgs, end, rejected, runCompose, type Deploy } from "./deploy-state.js";
import {
  imageUses,
  lockDigestOf,
  lockMismatches,
  matchesLock,
  orderLock,
  registryDigest,
  repositoryOf,
  type ImageUse,
} from "./image-lock.js";

/** lock the images: each image the project runs resolved to its digest, checked against the lock. */
export async function lockImages(d: Deploy): Promise<DeployOutcome | undefined> {
  const vars = { ...d.env, ...(d.secrets?.env ?? {}) };
  const uses = imageUses(d.project.composeFile, d.services, vars);
  d.imageLock = {};
  d.localImages = {};
  if (uses.length === 0) return undefined;
  const locked = orderLock(d.ds.imageLock, d.ds.specHash) ?? (await recordedLock(d.files.dir, d.ds.specHash)) ?? {};
  const opts: ImageCommandOptions = {
    env: composeEnvironment(d.env, d.files.stagedSecrets, d.secrets),
    signal: d.ctx.signal,
    timeoutMs: d.ctx.composeTimeoutMs,
    secrets: d.hidden,
  };
  const notes: string[] = [];
  try {
    for (const use of uses) {
      const want = locked[use.reference];
      const ended =
        want !== undefined && use.policy !== "never" ? await checkLocked(d, use, want, opts) : await resolveTag(d, use, opts, notes);
      if (ended) return refuse(d, ended);
    }
  } catch (e) {
    if (!(e instanceof ImageCommandError)) throw e;
    // A cancel (or the order's timeout) ends an image command too: that is no engine failure.
    if (e.run.cancelled || d.ctx.signal?.aborted)
      return refuse(d, end(d, "CANCELLED", "stopped while locking the images, before the project changed", { command: e.run }));
    return refuse(d, end(d, "DOCKER_UNAVAILABLE", e.message, { command: e.run }));
  }
  notes.splice(0, notes.length, ...notes.map((n) => scrub(n, d.hidden)));
  for (const n of notes) d.ctx.log.warn({ action: "image_lock", result: "local_copy", metadata: { message: n } }, n);
  d.imageNotes = notes;
  return undefined;
}

// A locked reference: the locked image if the engine has it, else a pull that must serve it.
async function checkLocked(d: Deploy, use: ImageUse, want: string, opts: ImageCommandOptions): Promise<DeployOutcome | undefined> {
  const ref = use.reference;
  const here = await lockedImage(ref, want, opts);
  if (here) {
    const tagged = await findImage(ref, opts);
    if (tagged?.id !== here.id) await tagImage(here.id, ref, opts);
    note(d, ref, here);
    return undefined;
  }
  const before = await findImage(ref, opts);
  const pull = await pullImage(ref, opts);
  if (pull.exitCode !== 0) return await pulled(d, use, pull);
  const now = await findImage(ref, opts);
  const got = now ? lockDigestOf(ref, now) : "";
  if (!holdsSecret(d, ref)) d.imageLock![ref] = got;
  if (now && matchesLock(ref, now, want)) return undefined;
  // The tag moved: put the node's tag back where it was, so nothing here runs the new image.
  if (before) await tagImage(before.id, ref, opts);
  const wrong = lockMismatches({ [ref]: want }, { [ref]: got });
  const message = `${wrong.join("; ")} (service ${use.services.join(", ")}): the tag moved since the spec's first node resolved it; refused before anything changed (pin the image by digest, or change the spec, to deploy what it names now)`;
  return outcome(
    "DIGEST_MISMATCH",
    scrub(message, d.hidden),
    d.started,
    { composePath: "", services: [], command: pull },
    { imageLock: d.imageLock },
  );
}

// The image the engine has for `ref` at `digest` (a registry digest, or an image id for a local one).
async function lockedImage(ref: string, digest: string, opts: ImageCommandOptions) {
  const byDigest = await findImage(`${repositoryOf(ref)}@${digest}`, opts).catch((e: unknown) => {
    // A reference the engine cannot parse with a digest (an id as digest is fine): try the id.
    if (e instanceof ImageCommandError && /invalid reference|invalid/i.test(e.run.stderr)) return undefined;
    throw e;
  });
  if (byDigest) return byDigest;
  const byId = await findImage(digest, opts);
  return byId && byId.id === digest ? byId : undefined;
}

// An unlocked reference: pulled when it is a registry's tag (or absent), its digest read.
async function resolveTag(d: Deploy, use: ImageUse, opts: ImageCommandOptions, notes: string[]): Promise<DeployOutcome | undefined> {
  const ref = use.reference;
  const local = await findImage(ref, opts);
  const fromRegistry = local !== undefined && registryDigest(ref, local) !== undefined;
  if (use.policy === "never" || (local && (!fromRegistry || use.policy === "missing"))) {
    if (local) note(d, ref, local);
    return undefined;
  }
  const pull = await pullImage(ref, opts);
  if (pull.exitCode !== 0) {
    if (!local || pull.cancelled) return await pulled(d, use, pull);
    // The registry could not be asked: the copy here runs, as before there was a lock.
    notes.push(
      `image ${ref} could not be pulled (${failureCause(pull.stderr).line || "no answer"}); the local copy ${lockDigestOf(ref, local)} runs`,
    );
    note(d, ref, local);
    return undefined;
  }
  const now = await findImage(ref, opts);
  if (now) note(d, ref, now);
  return undefined;
}

// What `ref` resolved to: a registry digest goes in the lock every node shares; the id of an image
// that exists on this host only (built or imported here: another host's copy has another id) is
// kept for this host's own restores, never sent as a lock.
function note(d: Deploy, ref: string, image: EngineImage): void {
  if (holdsSecret(d, ref)) return;
  const digest = registryDigest(ref, image);
  if (digest) d.imageLock![ref] = digest;
  else d.localImages![ref] = image.id;
}

// A pull that failed: cancelled, a file Compose refuses (when `up` was to be its check, Compose
// judges it now: a failed deploy only pays for it), or the image named with what the registry said.
async function pulled(d: Deploy, use: ImageUse, pull: CommandRun): Promise<DeployOutcome> {
  if (pull.cancelled) return end(d, "CANCELLED", "stopped while pulling images, before the project changed", { command: pull });
  if (d.checkedByUp) {
    const check = await runCompose(d, composeArgs(d, d.files.stagedYml, d.files.stagedEnv, "config", "--services"));
    if (check.exitCode !== 0 && !check.cancelled) return rejected(d, check, d.files.staging);
  }
  const images = new Map(use.services.map((s) => [s, use.reference]));
  const f = pullFailure(pull.stderr, images) ?? {
    code: "IMAGE_PULL_FAILED" as const,
    image: use.reference,
    service: use.services[0]!,
    reason: "",
  };
  const cause = failureCause(pull.stderr);
  const message = pullMessage(
    { ...f, image: scrub(use.reference, d.hidden), service: use.services[0] ?? "", reason: f.reason || cause.line || pull.stderr.trim() },
    d.secrets?.registries.map((r) => r.registry),
    cause.reason,
  );
  return end(d, f.code, message, { command: pull });
}

// A reference that interpolates a secret value is never reported or recorded as a lock (its
// digest is still checked on this deploy): results, records and logs never hold a secret.
function holdsSecret(d: Deploy, ref: string): boolean {
  return scrub(ref, d.hidden) !== ref;
}

// Ended before promote: the staged files go, the live ones were never touched.
async function refuse(d: Deploy, ended: DeployOutcome): Promise<DeployOutcome> {
  await rm(d.files.staging, { recursive: true, force: true });
  return ended;
}
