// DeliveryService: artifact versions (CI posts them; operators mark them bad) and operators'
// decisions about environments (approve, reject, veto, pin, unpin), and the delivery matrix. Thin:
// decode, authorize, one domain call (controller/delivery/), encode. Artifacts and their versions
// are their tenant's; environments and deliveries the fleet's (a caller whose scope is every tenant).
import { create } from "@bufbuild/protobuf";
import { timestampFromDate, timestampMs } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { VersionOrigin } from "../../gen/skipper/v1/delivery_pb.js";
import type { DeliveryService } from "../../gen/skipper/v1/delivery_service_pb.js";
import { RolloutActorSchema, type RolloutActor } from "../../gen/skipper/v1/rollout_pb.js";
import { actorLabel } from "../auth/actor.js";
import { callInfo, responseMeta, traceOf, type CallInfo } from "../base/context.js";
import { conflict, invalid, notFound } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import {
  createArtifactVersion,
  requireArtifact,
  setVersionBad,
  versionId,
  versionOf,
  versionStatusOf,
} from "../delivery/artifact-versions.js";
import { deliveryMatrix } from "../delivery/delivery-matrix.js";
import { compareNewestFirst } from "../delivery/version-order.js";
import { knownReleases, type EnvironmentCommand } from "../delivery/environment-commands.js";
import { EnvironmentRecords, environmentOf, environmentStatusOf } from "../delivery/environment-records.js";
import { allResources, scannedResources } from "../store/each-page.js";
import type { ServiceDeps } from "./deps.js";

const MAX_REASON = 1024;
const PAGE = 100;
const MAX_PAGE = 1000;

/** DeliveryService implementation. */
export function deliveryService(deps: ServiceDeps): ServiceImpl<typeof DeliveryService> {
  const environments = new EnvironmentRecords(deps.store, deps.now);
  const actor = (call: CallInfo, reason: string, required: boolean): RolloutActor => {
    if (required && reason.trim() === "") throw invalid("reason is required: say why", { field: "reason" });
    if (reason.length > MAX_REASON) throw invalid(`reason must be at most ${MAX_REASON} characters`, { field: "reason" });
    const trace = traceOf(call);
    return create(RolloutActorSchema, {
      actor: actorLabel(call.actor),
      at: timestampFromDate(deps.now()),
      reason,
      requestId: trace.requestId,
      correlationId: trace.correlationId,
    });
  };
  // An artifact's tenant must be in the caller's scope.
  const artifactInScope = async (ctx: HandlerContext, artifactId: string) => {
    const artifact = await requireArtifact(deps.store, artifactId);
    await callInfo(ctx).tenants.require(artifact.tenantId);
    return artifact;
  };
  const command = async (ctx: HandlerContext, id: string, reason: string, cmd: EnvironmentCommand, reasonRequired: boolean) => {
    const call = callInfo(ctx);
    const envId = checkId(id, "id");
    await call.tenants.require(undefined);
    const by = actor(call, reason, reasonRequired);
    const environment = await environments.command(envId, cmd, by, traceOf(call));
    deps.promotion.environmentDecided();
    call.audit.target = `environment/${envId}`;
    call.logger.info({ action: `environment_${cmd.kind}`, result: "ok", metadata: { environment_id: envId } }, `environment ${cmd.kind}`);
    return { meta: responseMeta(ctx), environment };
  };
  const badVersion = async (ctx: HandlerContext, req: { artifactId: string; version: string; reason: string }, bad: boolean) => {
    await artifactInScope(ctx, req.artifactId);
    const call = callInfo(ctx);
    const version = await setVersionBad(deps.store, req.artifactId, req.version, actor(call, req.reason, true), bad, traceOf(call));
    deps.promotion.versionChanged();
    call.audit.target = `artifact_version/${version.id}`;
    call.logger.info(
      { action: bad ? "version_marked_bad" : "version_unmarked_bad", result: "ok", metadata: { version_id: version.id } },
      bad ? "version marked bad" : "version mark taken back",
    );
    return { meta: responseMeta(ctx), version };
  };
  return {
    async createArtifactVersion(req, ctx) {
      const artifact = await artifactInScope(ctx, req.artifactId);
      const call = callInfo(ctx);
      const out = await createArtifactVersion(
        deps.store,
        { artifactId: req.artifactId, version: req.version, digest: req.digest, metadata: req.metadata, origin: VersionOrigin.POSTED },
        traceOf(call),
        deps.now(),
      );
      if (out.created) deps.promotion.versionChanged();
      call.audit.target = `artifact_version/${out.resource.id}`;
      call.audit.tenantId = artifact.tenantId;
      if (out.created)
        call.logger.info(
          { action: "version_created", result: "ok", tenant_id: artifact.tenantId, metadata: { version_id: out.resource.id } },
          "version recorded",
        );
      return { meta: responseMeta(ctx), version: out.resource, created: out.created };
    },
    async listArtifactVersions(req, ctx) {
      await artifactInScope(ctx, req.artifactId);
      return { meta: responseMeta(ctx), ...(await versionsPage(deps, req)) };
    },
    markVersionBad: (req, ctx) => badVersion(ctx, req, true),
    unmarkVersionBad: (req, ctx) => badVersion(ctx, req, false),
    async getDeliveryStatus(req, ctx) {
      const id = checkId(req.id, "id");
      const delivery = await deps.store.getResource("delivery", id);
      if (!delivery || delivery.deletion) throw notFound("delivery", id);
      const envs = (await scannedResources(deps.store, { resourceType: "environment" }))
        .filter((e) => environmentOf(e)?.deliveryId === id)
        .map((e) => ({ id: e.id, spec: environmentOf(e)!, status: environmentStatusOf(e) }));
      const artifacts = new Set(envs.flatMap((e) => e.spec.artifactIds));
      const bad = new Set<string>();
      for (const a of artifacts)
        for (const v of await scannedResources(deps.store, { resourceType: "artifact_version", idPrefix: `${a}.` }))
          if (versionStatusOf(v)?.markedBad) bad.add(v.id);
      return { meta: responseMeta(ctx), matrix: deliveryMatrix(id, envs, bad) };
    },
    approveRelease: (req, ctx) => command(ctx, req.id, req.reason, { kind: "approve", releaseId: checkRelease(req.releaseId) }, false),
    rejectRelease: (req, ctx) => command(ctx, req.id, req.reason, { kind: "reject", releaseId: checkRelease(req.releaseId) }, true),
    async vetoVersion(req, ctx) {
      await requireArtifact(deps.store, req.artifactId);
      const vid = versionId(req.artifactId, req.version);
      const v = await deps.store.getResource("artifact_version", checkId(vid, "version"));
      if (!v || v.deletion) throw notFound("artifact_version", vid, `artifact ${req.artifactId} has no version ${req.version}`);
      return command(ctx, req.id, req.reason, { kind: "veto", versionId: vid }, true);
    },
    async pinEnvironment(req, ctx) {
      const releaseId = checkRelease(req.releaseId);
      await refuseBadPin(deps, checkId(req.id, "id"), releaseId);
      return command(ctx, req.id, req.reason, { kind: "pin", releaseId }, true);
    },
    unpinEnvironment: (req, ctx) => command(ctx, req.id, req.reason, { kind: "unpin" }, true),
  };
}

// One page of an artifact's versions, newest first (an artifact keeps a few hundred at most).
async function versionsPage(deps: ServiceDeps, req: { artifactId: string; includeBad: boolean; pageSize: number; pageToken: string }) {
  if (req.pageSize < 0) throw invalid("page_size must not be negative", { field: "page_size" });
  const size = Math.min(req.pageSize || PAGE, MAX_PAGE);
  const all = (await allResources(deps.store, { resourceType: "artifact_version", idPrefix: `${req.artifactId}.` }))
    .filter((v) => req.includeBad || !versionStatusOf(v)?.markedBad)
    .map((v) => ({ v, id: v.id, version: versionOf(v)?.version ?? "", createdAtMs: v.createdAt ? timestampMs(v.createdAt) : 0 }))
    .sort(compareNewestFirst)
    .map((o) => o.v);
  let from = 0;
  if (req.pageToken !== "") {
    from = all.findIndex((v) => v.id === req.pageToken) + 1;
    if (from === 0) throw invalid("page_token is not a version of this listing", { field: "page_token" });
  }
  const versions = all.slice(from, from + size);
  const more = from + size < all.length;
  return { versions, nextPageToken: more ? (versions[versions.length - 1]?.id ?? "") : "" };
}

// A pin to a release holding a version marked bad is refused (it would be a return to a known bad state).
async function refuseBadPin(deps: ServiceDeps, envId: string, releaseId: string): Promise<void> {
  const env = await deps.store.getResource("environment", envId);
  if (!environmentOf(env)) throw notFound("environment", envId);
  const release = knownReleases(environmentStatusOf(env)).find((r) => r.id === releaseId);
  const bad: string[] = [];
  for (const v of release?.versions ?? []) {
    const stored = await deps.store.getResource("artifact_version", versionId(v.artifactId, v.version));
    if (versionStatusOf(stored)?.markedBad) bad.push(`${v.artifactId} ${v.version}`);
  }
  if (bad.length > 0) throw conflict(`release ${releaseId} holds versions marked bad: ${bad.join(", ")}`, { bad_versions: bad });
}

function checkRelease(id: string): string {
  if (!/^rel-[0-9a-f]{20}$/.test(id)) throw invalid('release_id must be "rel-" and 20 hex digits', { field: "release_id" });
  return id;
}
