// One look of an artifact's version watch, with its I/O: the registry credential opened from the
// artifact tenant's secret (held for the look only), the repository's tags listed, the pure steps
// of registry-watch.ts between, the digests resolved, each new tag recorded as a version (origin
// DISCOVERED, through createArtifactVersion: idempotent by id), and the artifact's status written
// with its delivery_tag_moved events in the same store write. This module alone writes
// ArtifactStatus. A failure becomes the status's watch_error: it names the registry and the
// repository, never a credential.
//
//   secret -> list tags -> planWatch -> digests -> concludeWatch -> versions -> status (+ events)
//                                                      '-> failure: failedWatch -> status
import { writeStatus } from "../resources/status-write.js";
import { equals } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { v4 as uuidv4 } from "uuid";
import { type ArtifactSpec, type ArtifactStatus, ArtifactStatusSchema, VersionOrigin } from "../../gen/skipper/v1/delivery_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import { CONTROLLER_ACTOR } from "../auth/actor.js";
import type { Trace } from "../base/context.js";
import { isSkipperError, notFound } from "../base/errors.js";
import { artifactOf, createArtifactVersion, versionOf } from "../delivery/artifact-versions.js";
import { buildEvent } from "../events/event-recorder.js";
import { openSecretValue } from "../resources/secret-values.js";
import { scannedResources } from "../store/each-page.js";
import type { Store } from "../store/store.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";
import type { RegistryClient, RegistryCredential } from "./registry-client.js";
import { registryEndpoint } from "./registry-endpoint.js";
import { isRegistryError } from "./registry-error.js";
import { concludeWatch, failedWatch, planWatch, type WatchInput, type WatchOutcome } from "./registry-watch.js";

export interface WatchLookDeps {
  store: Store;
  logger: Logger;
  now: () => Date;
  keyRing: SecretKeyRing;
  client: Pick<RegistryClient, "listTags" | "digestOf">;
}

/** What a look did: whether it failed (and whether for a passing reason), and how many versions it recorded. */
export interface LookResult {
  ok: boolean;
  /** Failed for a reason that passes by itself (unreachable, timed out, repository not pushed yet): no backoff. */
  transient?: boolean;
  created: number;
}

/** Failures retried at the plain interval: the registry away for a while, or the repository not pushed yet. */
const TRANSIENT = new Set(["UNREACHABLE", "TIMEOUT", "NOT_FOUND"]);

/** A look that failed for a reason of the watch's own (the secret), with a message safe to store. */
class WatchFailure extends Error {
  override readonly name = "WatchFailure";
}

/** The status a stored artifact holds (undefined when none was written yet). */
export function artifactStatusOf(r: Resource | undefined): ArtifactStatus | undefined {
  return r?.currentState?.kind.case === "artifact" ? r.currentState.kind.value : undefined;
}

/** One look of `artifact` (a stored artifact with a watch and an image source); never throws. */
export async function lookOnce(
  deps: WatchLookDeps,
  artifact: Resource,
  retryInMs: (ok: boolean, transient: boolean) => number,
): Promise<LookResult> {
  const spec = artifactOf(artifact);
  if (spec?.source.case !== "image" || !spec.watch) return { ok: true, created: 0 };
  const repository = spec.source.value.repository;
  const trace = watchTrace();
  const recorded = await recordedVersions(deps.store, artifact.id);
  const input = (listed: readonly string[]): WatchInput => ({
    artifact: spec,
    status: artifactStatusOf(artifact),
    recorded,
    listed,
    now: deps.now().getTime(),
  });
  let outcome: WatchOutcome;
  let created = 0;
  try {
    const credential = await registryCredentialOf(deps.store, deps.keyRing, spec);
    const listed = await deps.client.listTags(repository, { credential });
    const plan = planWatch(input(listed));
    const digests = await resolveDigests(deps, repository, [...plan.newTags, ...plan.recheck], credential);
    outcome = concludeWatch(input(listed), plan, digests);
    for (const v of outcome.create) {
      const { created: made } = await createArtifactVersion(
        deps.store,
        { artifactId: artifact.id, version: v.tag, digest: v.digest, metadata: {}, origin: VersionOrigin.DISCOVERED },
        trace,
        deps.now(),
      );
      if (made) created++;
    }
    outcome.status.nextWatchAt = timestampFromDate(new Date(input([]).now + retryInMs(true, false)));
    await saveStatus(deps, artifact.id, outcome, digests, recorded, trace);
    return { ok: true, created };
  } catch (e) {
    if (isSkipperError(e) && e.code === "RESOURCE_NOT_FOUND") return { ok: true, created };
    const message = failureMessage(deps, e, repository, artifact.id);
    const transient = isRegistryError(e) && TRANSIENT.has(e.code);
    outcome = failedWatch(input([]), message, retryInMs(false, transient));
    await saveStatus(deps, artifact.id, outcome, new Map(), recorded, trace).catch((err) => {
      if (!(isSkipperError(err) && err.code === "RESOURCE_NOT_FOUND"))
        deps.logger.error(
          { action: "registry_watch", result: "error", err, metadata: { artifact: artifact.id } },
          "could not write the watch's status",
        );
    });
    return { ok: false, transient, created };
  }
}

/** The versions recorded of an artifact: version (tag) -> digest. */
async function recordedVersions(store: Store, artifactId: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const r of await scannedResources(store, { resourceType: "artifact_version", idPrefix: `${artifactId}.` })) {
    const v = versionOf(r);
    if (v && !r.deletion && v.artifactId === artifactId) out.set(v.version, v.digest);
  }
  return out;
}

/** Opens the artifact's registry secret (username, password) as the deploy path does for an order's registries. */
export async function registryCredentialOf(
  store: Pick<Store, "getResource">,
  ring: SecretKeyRing,
  spec: ArtifactSpec,
): Promise<RegistryCredential | undefined> {
  const secretId = spec.source.case === "image" ? spec.source.value.registrySecretId : "";
  if (secretId === "") return undefined;
  const r = await store.getResource("secret", secretId);
  if (r?.desiredState?.kind.case !== "secret" || r.deletion || r.desiredState.kind.value.tenantId !== spec.tenantId)
    throw new WatchFailure(`image.registry_secret_id names secret ${secretId}, which tenant ${spec.tenantId} does not have`);
  const secret = r.desiredState.kind.value;
  const username = openSecretValue(ring, r.id, secret, "username");
  const password = openSecretValue(ring, r.id, secret, "password");
  if (username === undefined || password === undefined)
    throw new WatchFailure(`secret ${secretId} does not hold the values username and password`);
  return { username, password };
}

// The digests of `tags`; a tag gone since the listing (NOT_FOUND) is left for a later look.
async function resolveDigests(
  deps: WatchLookDeps,
  repository: string,
  tags: readonly string[],
  credential: RegistryCredential | undefined,
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const tag of new Set(tags)) {
    try {
      out.set(tag, await deps.client.digestOf(repository, tag, { credential }));
    } catch (e) {
      if (!(isRegistryError(e) && e.code === "NOT_FOUND")) throw e;
    }
  }
  return out;
}

// Writes the look's status when it is worth it, or when a tag moved: the events in the same write.
async function saveStatus(
  deps: WatchLookDeps,
  artifactId: string,
  outcome: WatchOutcome,
  digests: ReadonlyMap<string, string>,
  recorded: ReadonlyMap<string, string>,
  trace: Trace,
): Promise<void> {
  if (!outcome.write && outcome.moved.length === 0) return;
  let tenantId = "";
  let moved: string[] = [];
  await deps.store.updateResource(
    "artifact",
    artifactId,
    (cur) => {
      const spec = artifactOf(cur);
      if (!spec) throw notFound("artifact", artifactId);
      tenantId = spec.tenantId;
      const before = artifactStatusOf(cur);
      // Another write told these moves already (a look on a controller that led before).
      moved = outcome.moved.filter((t) => !before?.movedTags.includes(t));
      if (before && equals(ArtifactStatusSchema, before, outcome.status)) return cur;
      return writeStatus(cur, { case: "artifact", value: outcome.status }, trace, timestampFromDate(deps.now()));
    },
    undefined,
    (written) =>
      moved.map((tag) =>
        buildEvent({
          type: "delivery_tag_moved",
          ...trace,
          resourceType: "artifact",
          resourceId: artifactId,
          tenantId,
          revision: written.metadata?.resourceVersion,
          data: { artifact_id: artifactId, tag, recorded_digest: recorded.get(tag) ?? "", registry_digest: digests.get(tag) ?? "" },
        }),
      ),
  );
}

// The failure as the status says it: a RegistryError's message (registry and repository, no
// credential), the watch's own sentence, or a generic one (the error itself goes to the log).
function failureMessage(deps: WatchLookDeps, e: unknown, repository: string, artifactId: string): string {
  if (isRegistryError(e)) return e.message;
  if (e instanceof WatchFailure) return `registry ${registryOf(repository)}, repository ${repository}: ${e.message}`;
  deps.logger.error({ action: "registry_watch", result: "error", err: e, metadata: { artifact: artifactId } }, "registry watch failed");
  return `registry ${registryOf(repository)}, repository ${repository}: the watch failed (see the controller's log)`;
}

function registryOf(repository: string): string {
  try {
    return registryEndpoint(repository).registry;
  } catch {
    return repository.split("/")[0] ?? repository;
  }
}

function watchTrace(): Trace {
  const requestId = uuidv4();
  return { requestId, correlationId: requestId, actor: CONTROLLER_ACTOR };
}
