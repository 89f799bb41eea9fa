// ResourceService: list, read, create and replace the desired state of stored resources.
// Create is idempotent (the same resource posted twice is returned unchanged); replace honours a
// resource_version precondition and only writes when something actually changes.
import type { ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { MetadataSchema, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { callInfo, responseMeta, SCHEMA_VERSION } from "../context.js";
import { conflict, invalid, notFound } from "../errors.js";
import { checkId, checkResourceType } from "../ids.js";
import { checkReferences, checkSpecKind, isEmptyStatus, sameSpec, tenantOf } from "../resources/resource-rules.js";
import { recordEvents } from "../events/event-recorder.js";
import type { ServiceDeps } from "./deps.js";

/** Resource CRUD implementation. */
export function resourceService(deps: ServiceDeps): Partial<ServiceImpl<typeof ResourceService>> {
  const { store } = deps;
  return {
    async listResources(req, ctx) {
      const resourceType = req.resourceType === "" ? undefined : checkResourceType(req.resourceType);
      const tenantId = req.tenantId === "" ? undefined : checkId(req.tenantId, "tenant_id");
      const page = await store.listResources({ resourceType, tenantId, pageSize: req.pageSize, pageToken: req.pageToken });
      return { meta: responseMeta(ctx), resources: page.items, nextPageToken: page.nextPageToken };
    },

    async getResource(req, ctx) {
      const type = checkResourceType(req.resourceType);
      const id = checkId(req.id, "id");
      const resource = await store.getResource(type, id);
      if (!resource) throw notFound(type, id);
      return { meta: responseMeta(ctx), resource };
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
        },
      ]);
      call.logger.info({ action: "resource_created", result: "ok", tenant_id: tenantOf(stored), metadata: { resource_type: type, resource_id: id } }, "resource created");
      return { meta: responseMeta(ctx), resource: stored };
    },

    async updateResource(req, ctx) {
      const call = callInfo(ctx);
      const type = checkResourceType(req.resourceType);
      const id = checkId(req.id, "id");
      const spec = checkSpecKind(type, req.desiredState, "desired_state");
      checkReferences(spec);
      let desiredChanged = false;
      let changed = false;
      const before = await store.getResource(type, id);
      if (!before) throw notFound(type, id);
      const updated = await store.updateResource(
        type,
        id,
        (cur) => {
          desiredChanged = !sameSpec(cur.desiredState, spec);
          const labels = Object.keys(req.labels).length > 0 ? req.labels : (cur.metadata?.labels ?? {});
          const annotations = Object.keys(req.annotations).length > 0 ? req.annotations : (cur.metadata?.annotations ?? {});
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
        const base = { requestId: call.requestId, correlationId: call.correlationId, resourceType: type, resourceId: id, tenantId: tenantOf(updated) };
        const data = { resource_version: updated.metadata?.resourceVersion ?? "" };
        await recordEvents(store, [
          { type: "resource_updated", ...base, data },
          ...(desiredChanged ? [{ type: "desired_state_changed" as const, ...base, data }] : []),
        ]);
      }
      return { meta: responseMeta(ctx), resource: updated };
    },
  };
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

