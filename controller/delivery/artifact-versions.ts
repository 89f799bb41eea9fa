// Artifact versions: immutable records (resource type artifact_version, id "<artifact>.<version>")
// that CI posts or the registry watch finds, and the one thing said of them afterwards: marked
// bad (or, by an admin, unmarked). Each write carries its event in the same store write; a repeat
// writes nothing and tells nothing.
import { clone, create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  ArtifactVersionSpecSchema,
  ArtifactVersionStatusSchema,
  type ArtifactSpec,
  type ArtifactVersionSpec,
  type ArtifactVersionStatus,
  VersionOrigin,
} from "../../gen/skipper/v1/delivery_pb.js";
import { RolloutActorSchema, type RolloutActor } from "../../gen/skipper/v1/rollout_pb.js";
import { ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { SCHEMA_VERSION } from "../../common/schema-version.js";
import type { Trace } from "../base/context.js";
import { conflict, invalid, isSkipperError, notFound } from "../base/errors.js";
import { buildEvent, type DeliveryEventType } from "../events/event-recorder.js";
import { ARTIFACT_ID, VERSION } from "../resources/delivery-rules.js";
import { MODULE_VERSION } from "../../common/action-rules.js";
import { archiveReference } from "../domain/process-archive.js";
import type { Store } from "../store/store.js";

const DIGEST = /^sha256:[0-9a-f]{64}$/;
const META_KEY = /^[A-Za-z0-9_.-]{1,63}$/;
const MAX_META = 16;
const MAX_META_VALUE = 1024;
const MAX_REASON = 1024;

/** A version as posted (or found by the watch). */
export interface NewVersion {
  artifactId: string;
  version: string;
  digest: string;
  metadata: Record<string, string>;
  origin: VersionOrigin;
}

/** The id of an artifact's version. */
export function versionId(artifactId: string, version: string): string {
  return `${artifactId}.${version}`;
}

/** The version spec a stored artifact_version holds. */
export function versionOf(r: Resource | undefined): ArtifactVersionSpec | undefined {
  return r?.desiredState?.kind.case === "artifactVersion" ? r.desiredState.kind.value : undefined;
}

/** What operators said of a stored version. */
export function versionStatusOf(r: Resource | undefined): ArtifactVersionStatus | undefined {
  return r?.currentState?.kind.case === "artifactVersion" ? r.currentState.kind.value : undefined;
}

/** The artifact spec a stored artifact holds. */
export function artifactOf(r: Resource | undefined): ArtifactSpec | undefined {
  return r?.desiredState?.kind.case === "artifact" && !r.deletion ? r.desiredState.kind.value : undefined;
}

/** Reads a live artifact or throws RESOURCE_NOT_FOUND. */
export async function requireArtifact(store: Pick<Store, "getResource">, artifactId: string): Promise<ArtifactSpec> {
  if (!ARTIFACT_ID.test(artifactId)) throw invalid("artifact_id must be 1-40 characters of [a-z0-9-]", { field: "artifact_id" });
  const a = artifactOf(await store.getResource("artifact", artifactId));
  if (!a) throw notFound("artifact", artifactId);
  return a;
}

/** Checks a posted version's fields (INVALID_REQUEST naming the field). */
export function checkNewVersion(v: NewVersion): void {
  if (!VERSION.test(v.version) || v.version.includes(".."))
    throw invalid("version must be 1-87 characters of [A-Za-z0-9_.-], starting with a letter, digit or '_', without '..'", {
      field: "version",
    });
  if (!DIGEST.test(v.digest)) throw invalid('digest must be "sha256:" and 64 lowercase hex digits', { field: "digest" });
  const keys = Object.keys(v.metadata);
  if (keys.length > MAX_META) throw invalid(`metadata may hold at most ${MAX_META} keys`, { field: "metadata" });
  for (const k of keys) {
    if (!META_KEY.test(k))
      throw invalid(`metadata key ${JSON.stringify(k.slice(0, 64))} must be 1-63 of [A-Za-z0-9_.-]`, { field: "metadata" });
    if ((v.metadata[k] ?? "").length > MAX_META_VALUE)
      throw invalid(`metadata.${k} must be at most ${MAX_META_VALUE} characters`, { field: `metadata.${k}` });
  }
}

// What runs: an image by digest, or the archive at the template's URL (or path) for this version,
// which a node may only take under a version name it can install.
function referenceOf(artifact: ArtifactSpec, v: NewVersion): string {
  if (artifact.source.case !== "processArchive")
    return `${artifact.source.case === "image" ? artifact.source.value.repository : ""}@${v.digest}`;
  if (!MODULE_VERSION.test(v.version) || v.version === "latest" || v.version === "active")
    throw invalid(
      `version ${JSON.stringify(v.version)} cannot name a process module's version: 1-64 of [A-Za-z0-9._+-], starting with a letter or digit, not "latest" or "active"`,
      { field: "version" },
    );
  return archiveReference(artifact.source.value.urlTemplate, v.version);
}

/** Records a version; the same version and digest again is `created: false` with the stored one. */
export async function createArtifactVersion(
  store: Store,
  v: NewVersion,
  trace: Trace,
  now: Date,
): Promise<{ resource: Resource; created: boolean }> {
  const artifact = await requireArtifact(store, v.artifactId);
  checkNewVersion(v);
  const id = versionId(v.artifactId, v.version);
  const spec = create(ArtifactVersionSpecSchema, {
    artifactId: v.artifactId,
    tenantId: artifact.tenantId,
    version: v.version,
    digest: v.digest,
    reference: referenceOf(artifact, v),
    metadata: v.metadata,
    origin: v.origin,
  });
  const existing = await store.getResource("artifact_version", id);
  if (existing && !existing.deletion) return { resource: same(existing, spec), created: false };
  const at = timestampFromDate(now);
  const resource = create(ResourceSchema, {
    id,
    resourceType: "artifact_version",
    schemaVersion: SCHEMA_VERSION,
    desiredState: { kind: { case: "artifactVersion", value: spec } },
    metadata: { requestId: trace.requestId, correlationId: trace.correlationId, traceparent: trace.traceparent ?? "" },
    createdAt: at,
    updatedAt: at,
  });
  const data = { artifact_id: v.artifactId, version: v.version, digest: v.digest, origin: VersionOrigin[v.origin]?.toLowerCase() ?? "" };
  try {
    const stored = await store.createResource(resource, (written) => [eventOf("delivery_version_discovered", written, trace, data)]);
    return { resource: stored, created: true };
  } catch (e) {
    // Posted twice at once: the other write is this one's answer (or its conflict).
    if (!(isSkipperError(e) && e.code === "CONFLICT")) throw e;
    const raced = await store.getResource("artifact_version", id);
    if (!raced) throw e;
    return { resource: same(raced, spec), created: false };
  }
}

// The stored version, when it is the one posted; CONFLICT when the digest differs.
function same(stored: Resource, spec: ArtifactVersionSpec): Resource {
  const was = versionOf(stored);
  if (was && was.digest !== spec.digest)
    throw conflict(`version ${spec.version} of artifact ${spec.artifactId} is recorded with another digest: versions are immutable`, {
      existing_digest: was.digest,
    });
  return stored;
}

/** Marks a version bad (`bad`) or takes the mark back; a repeat changes nothing. */
export async function setVersionBad(
  store: Store,
  artifactId: string,
  version: string,
  by: RolloutActor,
  bad: boolean,
  trace: Trace,
): Promise<Resource> {
  if (by.reason.trim() === "") throw invalid("reason is required: say why", { field: "reason" });
  if (by.reason.length > MAX_REASON) throw invalid(`reason must be at most ${MAX_REASON} characters`, { field: "reason" });
  await requireArtifact(store, artifactId);
  if (!VERSION.test(version)) throw invalid("version is not a version of this artifact's grammar", { field: "version" });
  const id = versionId(artifactId, version);
  const type: DeliveryEventType = bad ? "delivery_version_marked_bad" : "delivery_version_unmarked_bad";
  let changed = false;
  try {
    return await store.updateResource(
      "artifact_version",
      id,
      (cur) => {
        if (cur.deletion) throw notFound("artifact_version", id);
        const status = versionStatusOf(cur);
        if ((status?.markedBad !== undefined) === bad) return cur;
        changed = true;
        cur.currentState = {
          $typeName: "skipper.v1.ResourceStatus",
          kind: {
            case: "artifactVersion",
            value: create(ArtifactVersionStatusSchema, { markedBad: bad ? clone(RolloutActorSchema, by) : undefined }),
          },
        };
        cur.updatedAt = by.at;
        return cur;
      },
      undefined,
      (written) => (changed ? [eventOf(type, written, trace, { artifact_id: artifactId, version, reason: by.reason, by: by.actor })] : []),
    );
  } catch (e) {
    if (isSkipperError(e) && e.code === "RESOURCE_NOT_FOUND")
      throw notFound("artifact_version", id, `artifact ${artifactId} has no version ${version}`);
    throw e;
  }
}

function eventOf(type: DeliveryEventType, r: Resource, trace: Trace, data: Record<string, string>) {
  return buildEvent({
    type,
    ...trace,
    resourceType: "artifact_version",
    resourceId: r.id,
    tenantId: versionOf(r)?.tenantId,
    revision: r.metadata?.resourceVersion,
    data,
  });
}
