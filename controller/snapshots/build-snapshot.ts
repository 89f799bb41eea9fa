// Snapshots: a point-in-time copy of resources plus, per resource, a field-level diff of
// desired_state against last_applied_state (deployable kinds) and of desired against what was
// last observed to run (every kind). Pure; secrets are redacted before anything leaves.
import { create, toJson, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import { ResourceSchema, ResourceSpecSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { SnapshotSchema, StateDiffSchema, type Snapshot, type ResourceDiff, ResourceDiffSchema } from "../../gen/skipper/v1/snapshot_pb.js";
import { redact } from "../../common/logging/redact.js";
import { redactMessage } from "../../common/logging/redact-message.js";
import { publicSecret } from "../resources/secret-values.js";
import { SCHEMA_VERSION } from "../../common/schema-version.js";

const JSON_OPTS = { useProtoFieldName: true } as const;
// Kinds whose desired state an agent applies; other kinds are enforced by the controller itself.
const DEPLOYABLE = new Set(["tenant", "service", "deployment"]);

export interface SnapshotInput {
  snapshotId: string;
  scope: "system" | "tenant";
  tenantId?: string;
  resources: Resource[];
  requestId: string;
  correlationId: string;
  now: Date;
}

/** Builds a snapshot of `resources` with redacted states and desired-vs-applied diffs. */
export function buildSnapshot(input: SnapshotInput): Snapshot {
  return assembleSnapshot(input, input.resources.map(snapshotEntry));
}

/** One resource's part of a snapshot: its redacted copy and its diffs. */
export interface SnapshotEntry {
  resource: Resource;
  diff: ResourceDiff;
}

/** The part of a snapshot that one resource contributes (the costly step, done per resource). */
export function snapshotEntry(r: Resource): SnapshotEntry {
  const d = DEPLOYABLE.has(r.resourceType)
    ? diffResource(r)
    : create(ResourceDiffSchema, { resourceType: r.resourceType, resourceId: r.id, inSync: true });
  d.currentChanges = currentDiff(r).map(([path, desired, current]) =>
    create(StateDiffSchema, { path, desired: fromJson(ValueSchema, desired), current: fromJson(ValueSchema, current) }),
  );
  d.convergence = r.convergence;
  return { resource: redactResource(r), diff: d };
}

/** The snapshot made of entries built by snapshotEntry, in the order given. */
export function assembleSnapshot(input: Omit<SnapshotInput, "resources">, entries: SnapshotEntry[]): Snapshot {
  return create(SnapshotSchema, {
    snapshotId: input.snapshotId,
    scope: input.scope,
    tenantId: input.tenantId ?? "",
    schemaVersion: SCHEMA_VERSION,
    createdAt: timestampFromDate(input.now),
    requestId: input.requestId,
    correlationId: input.correlationId,
    resources: entries.map((e) => e.resource),
    diffs: entries.map((e) => e.diff),
  });
}

/** Where what was last observed differs from what is desired: [path, desired, current]. */
export function currentDiff(r: Resource): [string, JsonValue, JsonValue][] {
  const out: [string, JsonValue, JsonValue][] = [];
  const st = r.currentState?.kind;
  const spec = r.desiredState?.kind;
  if (r.deletion) return out;
  if (st?.case === "tenant") {
    for (const t of st.value.targets) {
      if (t.desiredHash !== t.appliedHash) out.push([`targets.${t.nodeId}.spec_hash`, t.desiredHash || null, t.appliedHash || null]);
    }
  } else if (spec?.case === "service" && st?.case === "service") {
    for (const c of st.value.containers) {
      if (c.state !== "running") out.push([`containers.${c.name}.state`, "running", c.state]);
      if (spec.value.image !== "" && c.image !== "" && c.image !== spec.value.image)
        out.push([`containers.${c.name}.image`, spec.value.image, c.image]);
    }
    if (st.value.containers.length === 0 && st.value.state !== "") out.push(["state", "running", st.value.state]);
  } else if (spec?.case === "node" && st?.case === "node") {
    const liveness = ["unknown", "online", "degraded", "offline"][st.value.liveness] ?? "unknown";
    if (!spec.value.disabled && liveness !== "online") out.push(["liveness", "online", liveness]);
  } else if (r.resourceType === "deployment" && st?.case === "deployment") {
    const phase = ["unspecified", "pending", "running", "succeeded", "failed"][st.value.phase] ?? "unspecified";
    if (phase !== "succeeded") out.push(["phase", "succeeded", phase]);
  }
  return out;
}

/** Field-level diff of a resource's desired_state against its last_applied_state. */
export function diffResource(r: Resource): ResourceDiff {
  const desired = r.desiredState ? (toJson(ResourceSpecSchema, r.desiredState, JSON_OPTS) as JsonValue) : {};
  const applied = r.lastAppliedState ? (toJson(ResourceSpecSchema, r.lastAppliedState, JSON_OPTS) as JsonValue) : {};
  const changes = diffJson(redact(desired), redact(applied), "");
  return create(ResourceDiffSchema, {
    resourceType: r.resourceType,
    resourceId: r.id,
    inSync: changes.length === 0,
    changes: changes.map(([path, d, a]) => ({
      path,
      desired: fromJson(ValueSchema, d ?? null),
      lastApplied: fromJson(ValueSchema, a ?? null),
    })),
  });
}

type Change = [string, JsonValue | undefined, JsonValue | undefined];

/** Leaf-level differences between two JSON values; paths are dotted. */
export function diffJson(a: JsonValue | undefined, b: JsonValue | undefined, path: string): Change[] {
  if (isObject(a) && isObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => diffJson(a[k], b[k], path === "" ? k : `${path}.${k}`));
  }
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  return [[path === "" ? "." : path, a, b]];
}

function isObject(v: JsonValue | undefined): v is { [k: string]: JsonValue } {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function redactResource(r: Resource): Resource {
  return redactMessage(ResourceSchema, publicSecret(r));
}
