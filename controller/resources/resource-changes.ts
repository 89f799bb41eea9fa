// Creating, updating and deleting resources: the rules of each change and its events. A create
// is idempotent (the same resource posted twice returns the stored one); an update honours a
// resource_version precondition and writes only when something changes; a delete leaves a
// tombstone and refuses while live resources still reference the target (unless cascade), and
// with delete_data names the nodes that must remove the data. A resource and the events of its
// change are one write (store.ts EventsOf: a crash keeps both or neither); each resource written
// is told to `changed` right after it, so the reconciler hears of it even if a later step fails.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { CreateResourceRequest, DeleteResourceRequest, UpdateResourceRequest } from "../../gen/skipper/v1/resource_service_pb.js";
import {
  ConvergenceSchema,
  ConvergenceStatus,
  DeletionSchema,
  MetadataSchema,
  ResourceSchema,
  ResourceSpecSchema,
  type Resource,
  type ResourceSpec,
} from "../../gen/skipper/v1/resource_pb.js";
import { controllerOnly, tenantOf, type ResourceType } from "../../common/resource-kinds.js";
import type { Logger } from "../../common/logging/logger.js";
import { SCHEMA_VERSION } from "../../common/schema-version.js";
import type { Trace } from "../base/context.js";
import { conflict, invalid, notFound } from "../base/errors.js";
import { checkId, checkResourceType } from "../base/id-checks.js";
import { buildEvent } from "../events/event-recorder.js";
import type { Store } from "../store/store.js";
import { applyMask, planMask } from "./field-mask.js";
import { cascadeOf, checkReferencesExist, dependentsOf, refKey } from "./references.js";
import { checkTenantRoutesUnclaimed } from "./proxy-rules.js";
import { checkSpecKind, isEmptyStatus, sameSpec } from "./resource-rules.js";
import { checkSpecFields, CONTROLLER_KINDS, referencesOf } from "./kinds.js";
import { checkModulesUnclaimed } from "./process-rules.js";
import { sealSecret } from "./secret-values.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";
import { SecretSpecSchema, type SecretSpec } from "../../gen/skipper/v1/secret_pb.js";

export interface ChangeDeps {
  store: Store;
  now: () => Date;
  /** The nodes a service or volume ran on (its tenant's targets): where delete_data removes its data. */
  dataNodes: (r: Resource) => Promise<string[]>;
  /** Told at once of every resource a change wrote, after its event (the reconciler's triggers). */
  changed: (r: Resource) => void;
  /**
   * Throws unless the caller may change a resource of `type` that is `current` (absent: being
   * created) into `next` (absent: being deleted): tenant scope and node administration.
   */
  may: (type: ResourceType, current?: Resource, next?: Resource) => Promise<void>;
  /** Throws unless the change of `before` (absent: a create) into `next` keeps within its tenant's policy (tenant-confinement.ts). */
  confine: (before: Resource | undefined, next: Resource) => Promise<void>;
  /** Seals secret values (resources of type secret). */
  keyRing: SecretKeyRing;
}

/** A change's answer: the resource as stored. */
export interface Change {
  resource: Resource;
}

/** Creates the resource in `req` (idempotent: the same one again returns the stored one). */
export async function createResource(deps: ChangeDeps, req: CreateResourceRequest, trace: Trace, log: Logger): Promise<Change> {
  const { store } = deps;
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
  refuseControllerKind(type, "created");
  let spec = checkSpecKind(type, body.desiredState, "resource.desired_state");
  checkSpecFields(spec, id);
  if (!isEmptyStatus(body.currentState) || body.lastAppliedState?.kind.case) {
    throw invalid("current_state and last_applied_state are reported by agents and cannot be set", {
      field: "resource.current_state",
    });
  }
  const labels = body.metadata?.labels ?? {};
  const annotations = body.metadata?.annotations ?? {};
  // Before the existing one is looked at: a caller may not learn what lies outside its scope.
  await deps.may(type, undefined, create(ResourceSchema, { id, resourceType: type, desiredState: spec, metadata: { labels } }));
  const existing = await store.getResource(type, id);
  // A secret's values are compared, and stored, sealed: the same values again are the same spec.
  const sealed = (before?: Resource) =>
    spec.kind.case === "secret"
      ? create(ResourceSpecSchema, {
          kind: { case: "secret", value: sealSecret(spec.kind.value, secretOf(before), sealContext(deps, id, trace)) },
        })
      : spec;
  if (existing) return { resource: sameAsExisting(existing, create(ResourceSchema, { ...body, desiredState: sealed(existing) })) };
  spec = sealed();
  await deps.confine(undefined, create(ResourceSchema, { id, resourceType: type, desiredState: spec }));
  await checkReferencesExist(store, create(ResourceSchema, { id, resourceType: type, desiredState: spec }));
  await checkTenantRoutesUnclaimed(store, undefined, create(ResourceSchema, { id, resourceType: type, desiredState: spec }));
  await checkModulesUnclaimed(store, create(ResourceSchema, { id, resourceType: type, desiredState: spec }));
  const now = timestampFromDate(deps.now());
  const resource = create(ResourceSchema, {
    id,
    resourceType: type,
    schemaVersion: SCHEMA_VERSION,
    desiredState: spec,
    metadata: create(MetadataSchema, {
      labels,
      annotations,
      requestId: trace.requestId,
      correlationId: trace.correlationId,
      traceparent: trace.traceparent,
    }),
    createdAt: now,
    updatedAt: now,
  });
  // The resource and its event are one write (store.ts EventsOf).
  const createdEvent = (written: Resource) => {
    const about = changeOf(trace, written);
    return [buildEvent({ type: "resource_created", ...about, data: { resource_version: about.revision } })];
  };
  let stored: Resource;
  try {
    stored = await store.createResource(resource, createdEvent);
  } catch (e) {
    // A concurrent identical create is still a success for this caller.
    const raced = await store.getResource(type, id);
    if (raced) return { resource: sameAsExisting(raced, body) };
    throw e;
  }
  deps.changed(stored);
  log.info(
    { action: "resource_created", result: "ok", tenant_id: tenantOf(stored), metadata: { resource_type: type, resource_id: id } },
    "resource created",
  );
  return { resource: stored };
}

/** Updates desired state, labels and annotations (whole, or the fields of update_mask), at resource_version when given. */
// Kinds the controller alone writes (deployments, rollouts: common/resource-kinds.ts says why)
// are refused whole, before anything else is looked at.
function refuseControllerKind(type: ResourceType, verb: string): void {
  const why = controllerOnly(type);
  if (why) throw invalid(`${why}: they cannot be ${verb} through the API`, { field: "resource_type" });
}

export async function updateResource(deps: ChangeDeps, req: UpdateResourceRequest, trace: Trace): Promise<Change> {
  const { store } = deps;
  const type = checkResourceType(req.resourceType);
  refuseControllerKind(type, "updated");
  const id = checkId(req.id, "id");
  const before = await store.getResource(type, id);
  if (!before) throw notFound(type, id);
  await deps.may(type, before);
  const mask = req.updateMask && req.updateMask.paths.length > 0 ? planMask(type, req.updateMask.paths) : undefined;
  const desired = mask ? applyMask(before.desiredState, req.desiredState, mask.specPaths) : req.desiredState;
  let spec = checkSpecKind(type, desired, "desired_state");
  checkSpecFields(spec, id);
  if (spec.kind.case === "secret") {
    // Its users are of its tenant (checked when they were written): it stays there.
    const from = secretOf(before)?.tenantId ?? "";
    if (spec.kind.value.tenantId !== from) {
      throw invalid(`a secret cannot move to another tenant (secret ${id} is tenant ${from}'s)`, {
        field: "desired_state.secret.tenant_id",
      });
    }
    // Values set or removed by name, the rest kept as stored (the request cannot read them). A
    // masked update merged the stored spec in: its sealed forms and entries are not the caller's.
    const incoming = create(SecretSpecSchema, { ...spec.kind.value, sealed: {}, entries: [] });
    spec = create(ResourceSpecSchema, {
      kind: { case: "secret", value: sealSecret(incoming, secretOf(before), sealContext(deps, id, trace)) },
    });
    await checkValuesInUse(store, id, secretOf(before), spec.kind.value as SecretSpec);
  }
  if (spec.kind.case === "artifact") {
    // Its versions carry its tenant (their scope): it stays there.
    const from = before.desiredState?.kind.case === "artifact" ? before.desiredState.kind.value.tenantId : "";
    if (spec.kind.value.tenantId !== from)
      throw invalid(`an artifact cannot move to another tenant (artifact ${id} is tenant ${from}'s)`, {
        field: "desired_state.artifact.tenant_id",
      });
  }
  // Moving a resource to another tenant, or a tenant to other labels, needs the result in scope too.
  const nextLabels = mask
    ? mask.labels
      ? req.labels
      : before.metadata?.labels
    : Object.keys(req.labels).length > 0
      ? req.labels
      : before.metadata?.labels;
  await deps.may(
    type,
    undefined,
    create(ResourceSchema, { id, resourceType: type, desiredState: spec, metadata: { labels: nextLabels ?? {} } }),
  );
  keepPolicy(before, spec);
  await deps.confine(before, create(ResourceSchema, { id, resourceType: type, desiredState: spec }));
  if (!sameSpec(before.desiredState, spec))
    await checkReferencesExist(store, create(ResourceSchema, { id, resourceType: type, desiredState: spec }));
  await checkTenantRoutesUnclaimed(store, before, create(ResourceSchema, { id, resourceType: type, desiredState: spec }));
  if (!sameSpec(before.desiredState, spec))
    await checkModulesUnclaimed(store, create(ResourceSchema, { id, resourceType: type, desiredState: spec }));
  let desiredChanged = false;
  let changed = false;
  const updated = await store.updateResource(
    type,
    id,
    (cur) => {
      if (cur.deletion) throw notFound(type, id);
      // A secret's new spec was made from the values read before: a write since would be lost.
      if (type === "secret" && cur.metadata?.resourceVersion !== before.metadata?.resourceVersion) {
        throw conflict(`secret ${id} changed meanwhile; send the update again`, { current_version: cur.metadata?.resourceVersion ?? "" });
      }
      desiredChanged = !sameSpec(cur.desiredState, spec);
      const pick = (given: Record<string, string>, masked: boolean | undefined, stored: Record<string, string>) =>
        mask ? (masked ? given : stored) : Object.keys(given).length > 0 ? given : stored;
      const labels = pick(req.labels, mask?.labels, cur.metadata?.labels ?? {});
      const annotations = pick(req.annotations, mask?.annotations, cur.metadata?.annotations ?? {});
      const metaChanged = !sameMap(labels, cur.metadata?.labels ?? {}) || !sameMap(annotations, cur.metadata?.annotations ?? {});
      changed = desiredChanged || metaChanged;
      if (!changed) return cur;
      cur.desiredState = spec;
      // The verdict of the last pass was about the old desired state: until the next pass, the
      // resource is PENDING (the answer to this update says so, not the stale CONVERGED).
      if (desiredChanged && CONTROLLER_KINDS[type].reconciled) {
        cur.convergence = create(ConvergenceSchema, {
          status: ConvergenceStatus.PENDING,
          message: "desired state changed; the reconciler has not passed it yet",
          checkedAt: timestampFromDate(deps.now()),
        });
      }
      cur.metadata = create(MetadataSchema, {
        resourceVersion: cur.metadata?.resourceVersion ?? "",
        labels,
        annotations,
        requestId: trace.requestId,
        correlationId: trace.correlationId,
        traceparent: trace.traceparent,
      });
      cur.updatedAt = timestampFromDate(deps.now());
      return cur;
    },
    req.resourceVersion === "" ? undefined : req.resourceVersion,
    // Written with the change, in the same step (store.ts EventsOf); not called when nothing changed.
    (written) => {
      const base = changeOf(trace, written);
      const data = { resource_version: base.revision, ...(mask ? { update_mask: req.updateMask!.paths } : {}) };
      return [
        buildEvent({ type: "resource_updated", ...base, data }),
        ...(desiredChanged ? [buildEvent({ type: "desired_state_changed", ...base, data })] : []),
      ];
    },
  );
  if (changed) deps.changed(updated);
  return { resource: updated };
}

/** Tombstones the resource (and, with cascade, what references it); returns the names of those cascaded. */
export async function deleteResource(
  deps: ChangeDeps,
  req: DeleteResourceRequest,
  trace: Trace,
  log: Logger,
): Promise<Change & { cascaded: string[] }> {
  const { store } = deps;
  const type = checkResourceType(req.resourceType);
  refuseControllerKind(type, "deleted");
  const id = checkId(req.id, "id");
  const current = await store.getResource(type, id, { includeDeleted: true });
  if (!current) throw notFound(type, id);
  await deps.may(type, current);
  if (current.deletion) return { resource: current, cascaded: [] };
  if (req.resourceVersion !== "" && req.resourceVersion !== current.metadata?.resourceVersion) {
    throw conflict(
      `${type} ${id} was modified: resource_version is ${current.metadata?.resourceVersion ?? ""}, not ${req.resourceVersion}`,
      {
        current_version: current.metadata?.resourceVersion ?? "",
      },
    );
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
  // The reconciler hears of the deletions once all are written: a pass between them would see a
  // tenant whose services are gone but which is not, and redeploy it without them first.
  const written: Resource[] = [];
  for (const dep of cascade) await tombstone(deps, trace, log, dep, req.deleteData, refKey(current), written);
  const resource = await tombstone(deps, trace, log, current, req.deleteData, "", written);
  for (const r of written) deps.changed(r);
  return { resource, cascaded: cascade.map(refKey) };
}

// Marks one resource deleted (idempotent: an existing tombstone is returned as it is); a new
// tombstone goes on `written` for the caller to announce.
async function tombstone(
  deps: ChangeDeps,
  trace: Trace,
  log: Logger,
  r: Resource,
  deleteData: boolean,
  cascadedFrom: string,
  written: Resource[],
): Promise<Resource> {
  const type = r.resourceType as ResourceType;
  const pendingOn = deleteData && CONTROLLER_KINDS[type].holdsData ? await deps.dataNodes(r) : [];
  let wrote = false;
  const deletedEvent = (written: Resource) => {
    const about = changeOf(trace, written);
    return [
      buildEvent({
        type: "resource_deleted",
        ...about,
        nodeId: type === "node" ? r.id : undefined,
        data: {
          resource_version: about.revision,
          delete_data: deleteData,
          ...(cascadedFrom ? { cascaded_from: cascadedFrom } : {}),
          ...(pendingOn.length > 0 ? { data_pending_on_nodes: pendingOn } : {}),
        },
      }),
    ];
  };
  const updated = await deps.store.updateResource(
    type,
    r.id,
    (cur) => {
      if (cur.deletion) return cur;
      wrote = true;
      cur.deletion = create(DeletionSchema, {
        deletedAt: timestampFromDate(deps.now()),
        requestId: trace.requestId,
        correlationId: trace.correlationId,
        deleteData,
        cascadedFrom,
        dataPendingOnNodes: pendingOn,
      });
      cur.updatedAt = timestampFromDate(deps.now());
      return cur;
    },
    undefined,
    deletedEvent,
  );
  if (!wrote) return updated;
  written.push(updated);
  log.info(
    {
      action: "resource_deleted",
      result: "ok",
      tenant_id: tenantOf(updated),
      metadata: { resource_type: type, resource_id: r.id, cascaded_from: cascadedFrom || undefined },
    },
    "resource deleted",
  );
  return updated;
}

// What every event of a change says: who asked (the call's ids and actor), which resource, whose
// (its tenant), and the revision the write gave it.
function changeOf(trace: Trace, written: Resource) {
  const revision = written.metadata?.resourceVersion ?? "";
  return {
    requestId: trace.requestId,
    correlationId: trace.correlationId,
    traceparent: trace.traceparent,
    actor: trace.actor,
    resourceType: written.resourceType,
    resourceId: written.id,
    tenantId: tenantOf(written),
    revision,
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

/** Refuses removing a value that a live tenant or service uses (CONFLICT naming them). */
async function checkValuesInUse(store: Store, id: string, before: SecretSpec | undefined, after: SecretSpec): Promise<void> {
  const kept = new Set(after.entries.map((e) => e.name));
  const gone = (before?.entries ?? []).map((e) => e.name).filter((n) => !kept.has(n));
  if (gone.length === 0) return;
  const users = (await dependentsOf(store, "secret", id)).filter((r) =>
    referencesOf(r).some((ref) => ref.type === "secret" && ref.id === id && ref.key !== undefined && gone.includes(ref.key)),
  );
  if (users.length > 0) {
    throw conflict(`secret ${id}: ${gone.join(", ")} still in use by ${users.map(refKey).join(", ")}`, {
      reason: "SECRET_IN_USE",
      dependents: users.map(refKey),
    });
  }
}

/** The stored secret spec of `r`, when it is a secret. */
function secretOf(r: Resource | undefined): SecretSpec | undefined {
  return r?.desiredState?.kind.case === "secret" ? r.desiredState.kind.value : undefined;
}

function sealContext(deps: ChangeDeps, id: string, trace: Trace) {
  return { ring: deps.keyRing, id, actor: trace.actor, now: deps.now() };
}

// A tenant's policy is an admin's: a write that leaves it out (a manifest applied by CI) keeps the
// stored one; an admin clears it by sending an empty one.
function keepPolicy(before: Resource, spec: ResourceSpec): void {
  if (spec.kind.case !== "tenant" || spec.kind.value.policy !== undefined) return;
  if (before.desiredState?.kind.case === "tenant") spec.kind.value.policy = before.desiredState.kind.value.policy;
}
