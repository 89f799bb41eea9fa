// ResourceService: list, read and explain resources; create, update and delete them through
// resources/resource-changes.ts (the rules and events of each change), then tell the reconciler
// (reconcile/triggers.ts) about every resource a change wrote.
import type { ServiceImpl } from "@connectrpc/connect";
import { clone } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { AgentCountersSchema, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { callInfo, responseMeta, traceOf, type CallInfo } from "../base/context.js";
import { checkReadable, checkTenantFilter, checkWritable, seesSecrets, visible } from "../auth/resource-access.js";
import { checkConfinement } from "../resources/tenant-confinement.js";
import { redactMessage } from "../../common/logging/redact-message.js";
import { publicSecret } from "../resources/secret-values.js";
import { tenantOf } from "../../common/resource-kinds.js";
import { invalid, notFound } from "../base/errors.js";
import { checkId, checkResourceType } from "../base/id-checks.js";
import { explainResource } from "../reconcile/explain.js";
import { createResource, deleteResource, updateResource, type ChangeDeps } from "../resources/resource-changes.js";
import { parseLabelSelector } from "../domain/label-selector.js";
import type { ServiceDeps } from "./deps.js";
import { nodeFilter } from "../nodes/node-filter.js";

/**
 * The resources as `call` may see them: a secret's values (and sealed forms) never, and a
 * viewer's copies with every other secret-looking value hidden too.
 */
function forCaller(call: CallInfo, resources: Resource[]): Resource[] {
  const shown = resources.map(publicSecret);
  return seesSecrets(call) ? shown : shown.map((r) => redactMessage(ResourceSchema, r, { inlineEnv: true }));
}

/** Resource CRUD implementation. */
export function resourceService(deps: ServiceDeps): ServiceImpl<typeof ResourceService> {
  const { store } = deps;
  // A node's stored last_heartbeat_at (and agent counters) are written at most every minute when
  // nothing else changes; what the API shows is the last beat this controller saw, and the last
  // counters a beat received here carried.
  const withLastBeat = (r: Resource): Resource => {
    const st = r.resourceType === "node" && r.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined;
    if (!st) return r;
    const live = deps.lastHeartbeat?.(r.id);
    if (live && (!st.lastHeartbeatAt || timestampDate(st.lastHeartbeatAt) < live)) st.lastHeartbeatAt = timestampFromDate(live);
    const heard = deps.metrics.agentCounters(r.id);
    if (heard && (!st.agentCountersAt || timestampDate(st.agentCountersAt) < heard.at)) {
      st.agentCounters = clone(AgentCountersSchema, heard.counters);
      st.agentCountersAt = timestampFromDate(heard.at);
    }
    return r;
  };
  // Every resource a change writes wakes the reconciler for what depends on it.
  const changeDeps = (call: CallInfo): ChangeDeps => ({
    store,
    now: deps.now,
    dataNodes: (r) => deps.records.nodesRunning(r),
    changed: (r) => deps.triggers.resourceChanged(r),
    may: (type, current, next) => checkWritable(call, type, current, next),
    confine: (before, next) => checkConfinement(call, store, before, next),
    keyRing: deps.keyRing,
  });
  // A secret's values are sealed with the ring's newest key: a write must not straddle a key
  // rotation (secret-service.ts holds the same lock), or it could seal with a key then retired.
  const sealing = <T>(type: string | undefined, write: () => Promise<T>) =>
    type === "secret" ? deps.locks.run("secret-keys", write) : write();
  return {
    async listResources(req, ctx) {
      const call = callInfo(ctx);
      const resourceType = req.resourceType === "" ? undefined : checkResourceType(req.resourceType);
      const tenantId = req.tenantId === "" ? undefined : checkId(req.tenantId, "tenant_id");
      await checkTenantFilter(call, req.tenantId);
      if (req.sinceRevision < 0n) throw invalid("since_revision must not be negative", { field: "since_revision" });
      const nodesKept = nodeFilter(req);
      // Read the revision first: anything written during the listing is > revision, so a client
      // that resumes from it misses nothing (it may see a resource twice).
      const revision = await store.currentRevision();
      const page = await store.listResources({
        resourceType,
        tenantId,
        labelSelector: parseLabelSelector(req.labelSelector),
        includeDeleted: req.includeDeleted,
        sinceRevision: req.sinceRevision > 0n ? req.sinceRevision : undefined,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
      });
      // A scoped caller's page holds what it may see: possibly fewer items than asked for.
      const shown = (await visible(call, page.items, tenantOf)).map(withLastBeat).filter(nodesKept);
      return { meta: responseMeta(ctx), resources: forCaller(call, shown), nextPageToken: page.nextPageToken, revision };
    },

    async getResource(req, ctx) {
      const type = checkResourceType(req.resourceType);
      const id = checkId(req.id, "id");
      const resource = await store.getResource(type, id, { includeDeleted: req.includeDeleted });
      if (!resource) throw notFound(type, id);
      const call = callInfo(ctx);
      await checkReadable(call, resource);
      return { meta: responseMeta(ctx), resource: forCaller(call, [withLastBeat(resource)])[0] };
    },

    async createResource(req, ctx) {
      const call = callInfo(ctx);
      call.audit.target = `${req.resourceType || req.resource?.resourceType || ""}/${req.resource?.id ?? ""}`;
      const type = req.resourceType || req.resource?.resourceType;
      const { resource } = await sealing(type, () => createResource(changeDeps(call), req, traceOf(call), call.logger));
      call.audit.tenantId = tenantOf(resource);
      return { meta: responseMeta(ctx), resource: publicSecret(resource) };
    },

    async updateResource(req, ctx) {
      const call = callInfo(ctx);
      const { resource } = await sealing(req.resourceType, () => updateResource(changeDeps(call), req, traceOf(call)));
      // A node's ssh (its relay) may have changed: relayed streams for it ask again.
      if (resource.resourceType === "node") deps.credentialEnds.changed(`node:${resource.id}`);
      call.audit.tenantId = tenantOf(resource);
      return { meta: responseMeta(ctx), resource: publicSecret(resource) };
    },

    async explainResource(req, ctx) {
      const type = checkResourceType(req.resourceType);
      const id = checkId(req.id, "id");
      const resource = await store.getResource(type, id, { includeDeleted: true });
      if (!resource) throw notFound(type, id);
      const call = callInfo(ctx);
      await checkReadable(call, resource);
      // The chain behind a node (or anything of no tenant) runs through every tenant's orders.
      if (tenantOf(resource) === undefined) await call.tenants.require(undefined);
      return { meta: responseMeta(ctx), ...(await explainResource(store, resource)) };
    },

    async deleteResource(req, ctx) {
      const call = callInfo(ctx);
      const { resource, cascaded } = await deleteResource(changeDeps(call), req, traceOf(call), call.logger);
      // A deleted node's credential dies with it: its open streams end now.
      if (resource.resourceType === "node") deps.credentialEnds.changed(`node:${resource.id}`);
      call.audit.tenantId = tenantOf(resource);
      return { meta: responseMeta(ctx), resource: publicSecret(resource), cascaded };
    },
  };
}
