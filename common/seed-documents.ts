// Resource documents as the seed writes them, accepted on the REST routes and turned into the
// contract's canonical JSON before it is parsed. The seed's example documents differ from the
// canonical form in four ways, each mapped here and nowhere else:
//   - `desired_state` (and a state) holds the kind's fields directly ({"display_name": …}) instead
//     of under the kind ({"tenant": {"display_name": …}}): wrapped under the resource's type;
//   - a tenant's `compose.tenant_id` repeats the tenant's id: dropped when it does, refused when
//     it names another tenant;
//   - a service's image may name an artifact, `image: {artifact: web}`: it becomes `artifact_id`
//     (the image is then the artifact's version its tenant's environment has promoted);
//   - `metadata` is free-form: keys other than the contract's become annotations (a string as it
//     is, any other value as its JSON text).
// A PUT may carry the whole document too: its metadata becomes the request's labels, annotations
// and resource_version. The rules the service applies afterwards (ids, references, states that
// only agents report) are unchanged; what cannot be mapped is a SeedDocumentError naming the field
// (the controller's REST layer answers it as INVALID_REQUEST). Shared: the controller maps request
// bodies with it, the CLI the manifests it applies through the typed client.
import { ResourceSpecSchema } from "../gen/skipper/v1/resource_pb.js";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { RESOURCE_TYPES, specCase } from "./resource-kinds.js";
import { SCHEMA_VERSION } from "./schema-version.js";

/** A document that cannot be mapped to the canonical form; `field` names where. */
export class SeedDocumentError extends Error {
  override readonly name = "SeedDocumentError";
  constructor(
    message: string,
    readonly field: string,
  ) {
    super(message);
  }
}

/** Type guard for SeedDocumentError (works across module copies). */
export function isSeedDocumentError(e: unknown): e is SeedDocumentError {
  return e instanceof Error && e.name === "SeedDocumentError" && typeof (e as SeedDocumentError).field === "string";
}

const invalid = (message: string, details: { field: string }) => new SeedDocumentError(message, details.field);

// The members of ResourceSpec's oneof, by their proto names (a kind's member is named as its
// resource type) and their JSON names (resourceLimits).
const KIND_KEYS = new Set<string>([...RESOURCE_TYPES, ...RESOURCE_TYPES.map(specCase)]);
// Metadata's own fields (proto and JSON names); anything else in a seed document's metadata is free-form.
const METADATA_FIELDS = new Set([
  "labels",
  "annotations",
  "resource_version",
  "resourceVersion",
  "request_id",
  "requestId",
  "correlation_id",
  "correlationId",
]);
// Top-level keys that mark a PUT body as a whole document rather than an UpdateResourceRequest.
const DOCUMENT_ONLY = [
  "schema_version",
  "schemaVersion",
  "metadata",
  "current_state",
  "currentState",
  "last_applied_state",
  "lastAppliedState",
];

/** A CreateResource body (a Resource document) in canonical form; `pathType` is the route's resource_type. */
export function canonicalResource(body: JsonObject, pathType: string | undefined): JsonObject {
  const type =
    pathType ??
    (typeof body.resource_type === "string" ? body.resource_type : typeof body.resourceType === "string" ? body.resourceType : "");
  const out: JsonObject = { ...body };
  const id = typeof body.id === "string" ? body.id : "";
  // States take the same shape (ResourceStatus's members are named as ResourceSpec's): wrapped,
  // a set state is then refused by the service as one only agents report.
  for (const key of ["desired_state", "desiredState", "current_state", "currentState", "last_applied_state", "lastAppliedState"]) {
    if (out[key] !== undefined) out[key] = canonicalSpec(out[key], type, id, `resource.${key}`);
  }
  if (out.metadata !== undefined) out.metadata = canonicalMetadata(out.metadata, "resource.metadata");
  return out;
}

/** An UpdateResource body (PUT, body "*"): a seed document is turned into the request's fields. */
export function canonicalUpdate(body: JsonObject, pathType: string | undefined, pathId: string | undefined): JsonObject {
  const type = pathType ?? (typeof body.resource_type === "string" ? body.resource_type : "");
  const id = pathId ?? (typeof body.id === "string" ? body.id : "");
  const out: JsonObject = { ...body };
  for (const key of ["desired_state", "desiredState"]) {
    if (out[key] !== undefined) out[key] = canonicalSpec(out[key], type, id, key);
  }
  if (!DOCUMENT_ONLY.some((k) => k in body)) return out;
  for (const k of ["schema_version", "schemaVersion"]) {
    if (!(k in out)) continue;
    if (out[k] !== SCHEMA_VERSION && out[k] !== "") throw invalid(`schema_version must be '${SCHEMA_VERSION}'`, { field: k });
    delete out[k];
  }
  for (const k of ["current_state", "currentState", "last_applied_state", "lastAppliedState"]) {
    if (!(k in out)) continue;
    if (!isEmpty(out[k])) throw invalid("current_state and last_applied_state are reported by agents and cannot be set", { field: k });
    delete out[k];
  }
  if (out.metadata !== undefined) {
    const meta = canonicalMetadata(out.metadata, "metadata") as JsonObject;
    delete out.metadata;
    for (const [from, to] of [
      ["labels", "labels"],
      ["annotations", "annotations"],
      ["resource_version", "resource_version"],
      ["resourceVersion", "resource_version"],
    ] as const) {
      if (meta[from] === undefined) continue;
      if (out[to] !== undefined) throw invalid(`${to} is given both at the top level and in metadata`, { field: to });
      out[to] = meta[from];
    }
  }
  return out;
}

/** A desired state in canonical form: a flat spec is wrapped under the type's kind. */
function canonicalSpec(spec: JsonValue, type: string, id: string, field: string): JsonValue {
  if (!isObject(spec) || Object.keys(spec).length === 0) return spec;
  const keys = Object.keys(spec);
  const kind = (RESOURCE_TYPES as readonly string[]).includes(type) ? type : undefined;
  let wrapped: JsonObject = spec;
  // Wrapped is one member of the kind oneof: the type's own (a tenant's spec also has a field
  // named like a kind, `rollout`, which is no sign of wrapping), or any kind when the type is unknown.
  const isWrapped = keys.length === 1 && KIND_KEYS.has(keys[0]!) && !(kind !== undefined && fieldsOf(kind).has(keys[0]!));
  if (!isWrapped) {
    // Flat: the kind's fields directly. Without a known type there is nothing to wrap it in.
    if (kind === undefined) return spec;
    wrapped = { [kind]: spec };
  }
  const tenant = wrapped.tenant;
  if (type === "tenant" && isObject(tenant) && isObject(tenant.compose)) {
    const compose = tenant.compose;
    for (const k of ["tenant_id", "tenantId"]) {
      if (!(k in compose)) continue;
      if (compose[k] !== id && compose[k] !== "")
        throw invalid(`compose.${k} names tenant ${JSON.stringify(compose[k])}, not this tenant (${JSON.stringify(id)})`, {
          field: `${field}.tenant.compose.${k}`,
        });
      const rest = { ...compose };
      delete rest[k];
      wrapped = { ...wrapped, tenant: { ...tenant, compose: rest } };
    }
  }
  if (isObject(wrapped.service)) wrapped = { ...wrapped, service: artifactImage(wrapped.service, `${field}.service`) };
  return wrapped;
}

// `image: {artifact: web}` -> `artifact_id: web`; anything else in that object is refused.
function artifactImage(service: JsonObject, field: string): JsonObject {
  const image = service.image;
  if (!isObject(image)) return service;
  const keys = Object.keys(image);
  if (keys.length !== 1 || keys[0] !== "artifact" || typeof image.artifact !== "string")
    throw invalid("image must be an image reference or {artifact: <artifact id>}", { field: `${field}.image` });
  if ((service.artifact_id ?? service.artifactId ?? "") !== "")
    throw invalid("image.artifact and artifact_id are both given: name the artifact once", { field: `${field}.image` });
  const rest: JsonObject = { ...service, artifact_id: image.artifact };
  delete rest.image;
  delete rest.artifactId;
  return rest;
}

/** Metadata in canonical form: free-form keys become annotations. */
function canonicalMetadata(meta: JsonValue, field: string): JsonValue {
  if (!isObject(meta)) return meta;
  const extra = Object.keys(meta).filter((k) => !METADATA_FIELDS.has(k));
  if (extra.length === 0) return meta;
  const given = meta.annotations;
  if (given !== undefined && !isObject(given)) return meta; // the parser names the bad type
  const annotations: JsonObject = { ...(given ?? {}) };
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(meta)) {
    if (METADATA_FIELDS.has(k)) {
      if (k !== "annotations") out[k] = v;
      continue;
    }
    if (k in annotations) throw invalid(`metadata.${k} is also an annotation`, { field: `${field}.${k}` });
    annotations[k] = typeof v === "string" ? v : JSON.stringify(v);
  }
  out.annotations = annotations;
  return out;
}

function isObject(v: JsonValue | undefined): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isEmpty(v: JsonValue | undefined): boolean {
  return v === null || v === undefined || (isObject(v) && Object.keys(v).length === 0);
}

// The field names (proto and JSON) of the spec message a kind holds: a flat spec may have a field
// named like a kind (a tenant's `rollout`).
function fieldsOf(kind: string): Set<string> {
  const member = ResourceSpecSchema.fields.find((f) => f.name === kind || f.jsonName === kind);
  const message = member?.message;
  return new Set(message ? message.fields.flatMap((f) => [f.name, f.jsonName]) : []);
}
