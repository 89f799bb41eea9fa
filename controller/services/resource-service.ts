// ResourceService: list, read, create, update (whole or by field mask) and delete resources.
// Create is idempotent (the same resource posted twice is returned unchanged); update honours a
// resource_version precondition and only writes when something actually changes; delete leaves
// a tombstone and refuses while live resources still reference the target (unless cascade).
// Every mutation records its event with the store revision it produced and tells the
// reconciler.
import type { ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { DeletionSchema, MetadataSchema, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { callInfo, responseMeta, SCHEMA_VERSION } from "../context.js";
import { conflict, invalid, notFound } from "../errors.js";
import { type ResourceType } from "../../common/ids.js";
import { checkId, checkResourceType } from "../id-checks.js";
import { checkReferences, checkSpecKind, isEmptyStatus, sameSpec } from "../resources/resource-rules.js";
import { tenantOf } from "../store/tenant-of.js";
import { parseLabelSelector } from "../store/label-selector.js";
import { applyMask, planMask } from "../resources/field-mask.js";
import { cascadeOf, checkReferencesExist, dependentsOf, refKey } from "../resources/references.js";
import { recordEvents, type EventInput } from "../events/event-recorder.js";
import type { CallInfo } from "../context.js";
import { explainResource } from "../reconcile/explain.js";
import type { ServiceDeps } from "./deps.js";

// Kinds an admin creates through this service; nodes come from RegisterNode, deployments from
// the reconciler.
const CREATABLE = new Set<ResourceType>(["tenant", "service", "resource_limits", "network", "volume"]);

/** Resource CRUD implementation. */
export function resourceService(deps: ServiceDeps): Partial<ServiceImpl<typeof ResourceService>> {
  const { store } = deps;
  // A node's stored last_heartbeat_at is written at most every minute when nothing else changes;
  // what the API shows is the last beat this controller saw.
  const withLastBeat = (r: Resource): Resource => {
    const st = r.resourceType === "node" && r.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined;
    const live = st ? deps.lastHeartbeat?.(r.id) : undefined;
    if (st && live && (!st.lastHeartbeatAt || timestampDate(st.lastHeartbeatAt) < live)) st.lastHeartbeatAt = timestampFromDate(live);
    return r;
  };
  return {
    async listResources(req, ctx) {
      const resourceType = req.resourceType === "" ? undefined : checkResourceType(req.resourceType);
      const tenantId = req.tenantId === "" ? undefined : checkId(req.tenantId, "tenant_id");
      if (req.sinceRevision < 0n) throw invalid("since_revision must not be negative", { field: "since_revision" });
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
      return { meta: responseMeta(ctx), resources: page.items.map(withLastBeat), nextPageToken: page.nextPageToken, revision };
    },

    async getResource(req, ctx) {
      const type = checkResourceType(req.resourceType);
      const id = checkId(req.id, "id");
      const resource = await store.getResource(type, id, { includeDeleted: req.includeDeleted });
      if (!resource) throw notFound(type, id);
      return { meta: responseMeta(ctx), resource: withLastBeat(resource) };
    },

    async createResource(req, ctx) {
      const call = callInfo(ctx);
      const body = req.resource;
      if (!body) throw invalid("request must carry a resource", { field: "resource" });
      const type = checkResourceType(req.resourceType || body.resourceType);
      if (body.resourceType !== "" && body.resourceType !== type) {
        throw invalid(`resource_type '${body.resourceType}' in the body does not match '${type}' in the path`, {
          field: "resource.resource_type",
        });
      }
      if (body.schemaVersion !== "" && body.schemaVersion !== SCHEMA_VERSION) {
        throw invalid(`schema_version must be '${SCHEMA_VERSION}'`, { field: "resource.schema_version" });
      }
      const id = checkId(body.id, "resource.id");
      if (!CREATABLE.has(type)) {
        throw invalid(type === "node" ? "nodes are created by RegisterNode (POST /v1/nodes)" : "deployments are created by the reconciler and Apply", { field: "resource_type" });
      }
      const spec = checkSpecKind(type, body.desiredState, "resource.desired_state");
      checkReferences(spec);
      if (!isEmptyStatus(body.currentState) || (body.lastAppliedState && body.lastAppliedState.kind.case)) {
        throw invalid("current_state and last_applied_state are reported by agents and cannot be set", {
          field: "resource.current_state",
        });
      }
      const labels = body.metadata?.labels ?? {};
      const annotations = body.metadata?.annotations ?? {};
      const existing = await store.getResource(type, id);
      if (existing) return { meta: responseMeta(ctx), resource: sameAsExisting(existing, body) };
      await checkReferencesExist(store, create(ResourceSchema, { id, resourceType: type, desiredState: spec }));
      const now = timestampFromDate(deps.now());
      const resource = create(ResourceSchema, {
        id,
        resourceType: type,
        schemaVersion: SCHEMA_VERSION,
        desiredState: spec,
        metadata: create(MetadataSchema, {
          labels,
          annotations,
          requestId: call.requestId,
          correlationId: call.correlationId,
        }),
        createdAt: now,
        updatedAt: now,
      });
      let stored: Resource;
      try {
        stored = await store.createResource(resource);
      } catch (e) {
        // A concurrent identical create is still a success for this caller.
        const raced = await store.getResource(type, id);
        if (raced) return { meta: responseMeta(ctx), resource: sameAsExisting(raced, body) };
        throw e;
      }
      await recordEvents(store, [
        {
          type: "resource_created",
          requestId: call.requestId,
          correlationId: call.correlationId,
          resourceType: type,
          resourceId: id,
          tenantId: tenantOf(stored),
          data: { resource_version: stored.metadata?.resourceVersion ?? "" },
          revision: stored.metadata?.resourceVersion,
        },
      ]);
      deps.onResourceChanged?.(stored);
      call.logger.info({ action: "resource_created", result: "ok", tenant_id: tenantOf(stored), metadata: { resource_type: type, resource_id: id } }, "resource created");
      return { meta: responseMeta(ctx), resource: stored };
    },

    async updateResource(req, ctx) {
      const call = callInfo(ctx);
      const type = checkResourceType(req.resourceType);
      const id = checkId(req.id, "id");
      const before = await store.getResource(type, id);
      if (!before) throw notFound(type, id);
      const mask = req.updateMask && req.updateMask.paths.length > 0 ? planMask(type, req.updateMask.paths) : undefined;
      const desired = mask ? applyMask(before.desiredState, req.desiredState, mask.specPaths) : req.desiredState;
      const spec = checkSpecKind(type, desired, "desired_state");
      checkReferences(spec);
      if (!sameSpec(before.desiredState, spec)) await checkReferencesExist(store, create(ResourceSchema, { id, resourceType: type, desiredState: spec }));
      let desiredChanged = false;
      let changed = false;
      const updated = await store.updateResource(
        type,
        id,
        (cur) => {
          if (cur.deletion) throw notFound(type, id);
          desiredChanged = !sameSpec(cur.desiredState, spec);
          const pick = (given: Record<string, string>, masked: boolean | undefined, stored: Record<string, string>) =>
            mask ? (masked ? given : stored) : Object.keys(given).length > 0 ? given : stored;
          const labels = pick(req.labels, mask?.labels, cur.metadata?.labels ?? {});
          const annotations = pick(req.annotations, mask?.annotations, cur.metadata?.annotations ?? {});
          const metaChanged =
            !sameMap(labels, cur.metadata?.labels ?? {}) || !sameMap(annotations, cur.metadata?.annotations ?? {});
          changed = desiredChanged || metaChanged;
          if (!changed) return cur;
          cur.desiredState = spec;
          cur.metadata = create(MetadataSchema, {
            resourceVersion: cur.metadata?.resourceVersion ?? "",
            labels,
            annotations,
            requestId: call.requestId,
            correlationId: call.correlationId,
          });
          cur.updatedAt = timestampFromDate(deps.now());
          return cur;
        },
        req.resourceVersion === "" ? undefined : req.resourceVersion,
      );
      if (changed) {
        const revision = updated.metadata?.resourceVersion ?? "";
        const base = { requestId: call.requestId, correlationId: call.correlationId, resourceType: type, resourceId: id, tenantId: tenantOf(updated), revision };
        const data = { resource_version: revision, ...(mask ? { update_mask: req.updateMask!.paths } : {}) };
        await recordEvents(store, [
          { type: "resource_updated", ...base, data },
          ...(desiredChanged ? [{ type: "desired_state_changed" as const, ...base, data }] : []),
        ]);
        deps.onResourceChanged?.(updated);
      }
      return { meta: responseMeta(ctx), resource: updated };
    },

    async explainResource(req, ctx) {
      const type = checkResourceType(req.resourceType);
      const id = checkId(req.id, "id");
      const resource = await store.getResource(type, id, { includeDeleted: true });
      if (!resource) throw notFound(type, id);
      const why = await explainResource(store, resource);
      return { meta: responseMeta(ctx), resource, ...why };
    },

    async deleteResource(req, ctx) {
      const call = callInfo(ctx);
      const type = checkResourceType(req.resourceType);
      const id = checkId(req.id, "id");
      const current = await store.getResource(type, id, { includeDeleted: true });
      if (!current) throw notFound(type, id);
      if (current.deletion) return { meta: responseMeta(ctx), resource: current, cascaded: [] };
      if (req.resourceVersion !== "" && req.resourceVersion !== current.metadata?.resourceVersion) {
        throw conflict(`${type} ${id} was modified: resource_version is ${current.metadata?.resourceVersion ?? ""}, not ${req.resourceVersion}`, {
          current_version: current.metadata?.resourceVersion ?? "",
        });
      }
      let cascade: Resource[] = [];
      if (req.cascade) {
        cascade = await cascadeOf(store, type, id);
      } else {
        const direct = await dependentsOf(store, type, id);
        if (direct.length > 0) {
          throw conflict(`${type} ${id} is still referenced by ${direct.map(refKey).join(", ")}; delete those first or pass cascade=true`, {
            resource_type: type,
            resource_id: id,
            referenced_by: direct.map(refKey),
          });
        }
      }
      for (const dep of cascade) await tombstone(call, dep, req.deleteData, refKey(current));
      const resource = await tombstone(call, current, req.deleteData, "");
      return { meta: responseMeta(ctx), resource, cascaded: cascade.map(refKey) };
    },
  };

  // Marks one resource deleted (idempotent: an existing tombstone is returned as it is).
  // Where a deleted service's or volume's data is to be removed: the nodes its tenant ran it on.
  async function dataNodes(r: Resource): Promise<string[]> {
    const tenantId = tenantOf(r);
    const t = tenantId ? await store.getResource("tenant", tenantId, { includeDeleted: true }) : undefined;
    const targets = t?.currentState?.kind.case === "tenant" ? t.currentState.kind.value.targets : [];
    return targets.filter((x) => r.resourceType === "volume" || x.serviceIds.includes(r.id)).map((x) => x.nodeId).sort();
  }

  async function tombstone(call: CallInfo, r: Resource, deleteData: boolean, cascadedFrom: string): Promise<Resource> {
    const type = r.resourceType as ResourceType;
    const pendingOn = deleteData && (type === "service" || type === "volume") ? await dataNodes(r) : [];
    let wrote = false;
    const updated = await store.updateResource(type, r.id, (cur) => {
      if (cur.deletion) return cur;
      wrote = true;
      cur.deletion = create(DeletionSchema, {
        deletedAt: timestampFromDate(deps.now()),
        requestId: call.requestId,
        correlationId: call.correlationId,
        deleteData,
        cascadedFrom,
        dataPendingOnNodes: pendingOn,
      });
      cur.updatedAt = timestampFromDate(deps.now());
      return cur;
    });
    if (!wrote) return updated;
    const revision = updated.metadata?.resourceVersion ?? "";
    const events: EventInput[] = [
      {
        type: "resource_deleted",
        requestId: call.requestId,
        correlationId: call.correlationId,
        resourceType: type,
        resourceId: r.id,
        tenantId: tenantOf(updated),
        nodeId: type === "node" ? r.id : undefined,
        revision,
        data: { resource_version: revision, delete_data: deleteData, ...(cascadedFrom ? { cascaded_from: cascadedFrom } : {}), ...(pendingOn.length > 0 ? { data_pending_on_nodes: pendingOn } : {}) },
      },
    ];
    await recordEvents(store, events);
    deps.onResourceChanged?.(updated);
    call.logger.info({ action: "resource_deleted", result: "ok", tenant_id: tenantOf(updated), metadata: { resource_type: type, resource_id: r.id, cascaded_from: cascadedFrom || undefined } }, "resource deleted");
    return updated;
  }
}

// An idempotent create: the same desired state and labels return the stored resource; anything
// different is a conflict that points the caller at update.
function sameAsExisting(existing: Resource, body: Resource): Resource {
  const same =
    sameSpec(existing.desiredState, body.desiredState) &&
    sameMap(existing.metadata?.labels ?? {}, body.metadata?.labels ?? {}) &&
    sameMap(existing.metadata?.annotations ?? {}, body.metadata?.annotations ?? {});
  if (same) return existing;
  throw conflict(`${existing.resourceType} ${existing.id} already exists with a different spec; use UpdateResource (PUT) to change it`, {
    resource_type: existing.resourceType,
    resource_id: existing.id,
    resource_version: existing.metadata?.resourceVersion ?? "",
  });
}

function sameMap(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => a[k] === b[k]);
}

