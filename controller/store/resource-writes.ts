// What createResource and updateResource mean, whichever backend stores the result: a tombstone
// may be replaced by a new resource and nothing else may; an update checks the caller's expected
// version, lets `mutate` work on a private copy, keeps identity and creation time the store's, and
// writes nothing when nothing changed. A backend reads the current record, asks these functions
// what to write, and gives what it writes the next store revision as its resource_version.
import { create, equals } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import { DeploymentPhase, MetadataSchema, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { copyMessage } from "../../common/message-copy.js";
import { conflict, notFound, type SkipperError } from "../base/errors.js";
import type { ResourceType } from "../../common/ids.js";
import type { ResourceEdit } from "./step-writes.js";

/** The phases a deployment ends in (pruneDeployments removes those finished long enough ago). */
export const ENDED_DEPLOYMENT_PHASES: readonly DeploymentPhase[] = [
  DeploymentPhase.SUCCEEDED,
  DeploymentPhase.FAILED,
  DeploymentPhase.SUPERSEDED,
];

/** CONFLICT: (type, id) is taken by a resource that is not a tombstone. */
export function resourceExists(type: string, id: string): SkipperError {
  return conflict(`${type} ${id} already exists`, { resource_type: type, resource_id: id });
}

/** Throws CONFLICT unless (type, id) is free: nothing stored, or a tombstone (which the new resource replaces). */
export function checkCreatable(type: string, id: string, existing: { deleted: boolean } | undefined): void {
  if (existing && !existing.deleted) throw resourceExists(type, id);
}

/** The store's own copy of a resource to create, with metadata to take its resource_version. */
export function newResourceRecord(resource: Resource): Resource {
  const stored = copyMessage(ResourceSchema, resource);
  stored.metadata ??= create(MetadataSchema);
  return stored;
}

/** What an update comes to: the resource to answer with and, when it changed, to store. */
export interface ResourceUpdate {
  /** The store's own copy (metadata set) when changed; else the resource as stored. */
  resource: Resource;
  /** False when mutate changed nothing: nothing is written and no revision is taken. */
  changed: boolean;
}

/**
 * updateResource's rules on the `current` record (undefined: RESOURCE_NOT_FOUND): CONFLICT
 * (details: current_version) when `expectedVersion` is given and is not the stored one, without
 * calling mutate; else mutate's result, with the stored identity and creation time.
 */
export function resourceUpdate(
  type: string,
  id: string,
  current: Resource | undefined,
  mutate: (current: Resource) => Resource,
  expectedVersion: string | undefined,
): ResourceUpdate {
  if (!current) throw notFound(type, id);
  const currentVersion = current.metadata?.resourceVersion ?? "";
  if (expectedVersion !== undefined && expectedVersion !== currentVersion) {
    throw conflict(`${type} ${id} was modified: resource_version is ${currentVersion}, not ${expectedVersion}`, {
      current_version: currentVersion,
    });
  }
  // mutate works on a private copy. Returned unchanged (most heartbeats), that copy is the
  // answer; changed, it is compared once and copied again before it is stored, since mutate
  // may have put in it objects its caller still holds.
  const draft = copyMessage(ResourceSchema, current);
  const returned = mutate(draft);
  const next = returned === draft ? draft : copyMessage(ResourceSchema, returned);
  // Identity and creation time belong to the store, whatever mutate did to them.
  next.id = current.id;
  next.resourceType = current.resourceType;
  next.createdAt = current.createdAt && copyMessage(TimestampSchema, current.createdAt);
  if (equals(ResourceSchema, next, current)) return { resource: next, changed: false };
  // What mutate put in its draft may be objects its caller still holds: the store keeps a copy of its own.
  const stored = next === draft ? copyMessage(ResourceSchema, draft) : next;
  stored.metadata ??= create(MetadataSchema);
  return { resource: stored, changed: true };
}

/**
 * What `edits` (store.ts ResourceEdit, written with a work order's step) change, as the records to
 * store: several edits of one resource apply in order, as one update (updateResource's rules);
 * a resource `current` does not know, or edits that change nothing, give none.
 */
export function editedResources(
  edits: readonly ResourceEdit[],
  current: (type: ResourceType, id: string) => Resource | undefined,
): Resource[] {
  const byKey = new Map<string, ResourceEdit[]>();
  for (const e of edits) {
    const key = `${e.resourceType}\0${e.id}`;
    byKey.set(key, [...(byKey.get(key) ?? []), e]);
  }
  const changed: Resource[] = [];
  for (const group of byKey.values()) {
    const { resourceType: type, id } = group[0]!;
    const stored = current(type, id);
    if (!stored) continue;
    const update = resourceUpdate(type, id, stored, (draft) => group.reduce((r, e) => e.mutate(r), draft), undefined);
    if (update.changed) changed.push(update.resource);
  }
  return changed;
}
