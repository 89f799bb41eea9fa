// Manifests: resource documents in texts, YAML or JSON, one or many per text (YAML documents
// separated by `---`, or a JSON array), in the shape the REST API takes (the seed's:
// examples/*.json). Each is mapped to the contract's canonical form by the same code the
// controller's REST routes use (seed-documents.ts) and parsed as a Resource, so a mistake is found,
// with its file and document, before anything is written. Fields the controller sets (states,
// convergence, times, versions) are dropped: what `skipper get -o yaml` prints can be applied again.
// Pure: shared by `skipper apply` (cli/manifests.ts reads the files) and the controller's Git sync
// (controller/promotion/, which reads them from a mirror).
import { fromJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { parseAllDocuments } from "yaml";
import { type Resource, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { isValidId } from "./ids.js";
import { API_WRITE_ORDER, RESOURCE_TYPES, type ResourceType, specCase } from "./resource-kinds.js";
import { canonicalResource, isSeedDocumentError } from "./seed-documents.js";

/** One resource document, ready to write. */
export interface Manifest {
  /** Where it came from: `dir/app.yaml` or `dir/app.yaml#2` (the second document). */
  source: string;
  type: ResourceType;
  id: string;
  /** id, resource_type, desired_state and the labels/annotations it gives. */
  resource: Resource;
  /** Whether it states labels (absent: the stored ones are left as they are); likewise annotations. */
  labelsGiven: boolean;
  annotationsGiven: boolean;
}

/** A document that cannot be applied: where (`source`), which field when one is to blame, and why. */
export class ManifestError extends Error {
  override readonly name = "ManifestError";
  constructor(
    message: string,
    readonly source: string,
    readonly problem: string,
    readonly field: string | undefined,
    readonly hint?: string,
  ) {
    super(message);
  }
}

/** Type guard for ManifestError (works across module copies). */
export function isManifestError(e: unknown): e is ManifestError {
  return e instanceof Error && e.name === "ManifestError" && typeof (e as ManifestError).source === "string";
}

/** The error in one line as a status records it: "apps/web.yaml#2: desired_state.service.image: problem". */
export function manifestErrorLine(e: ManifestError): string {
  return e.field ? `${e.source}: ${e.field}: ${e.problem}` : `${e.source}: ${e.problem}`;
}

/** The order resources are written in: what others name comes first (a service names its tenant). */
export const APPLY_ORDER: readonly ResourceType[] = API_WRITE_ORDER;
/** The file names manifests are read from (in a directory, or a Git tree). */
export const MANIFEST_EXTENSIONS: readonly string[] = [".yaml", ".yml", ".json"];
const SET_BY_CONTROLLER = [
  "current_state",
  "currentState",
  "last_applied_state",
  "lastAppliedState",
  "convergence",
  "created_at",
  "createdAt",
  "updated_at",
  "updatedAt",
  "deletion",
];
const METADATA_SET_BY_CONTROLLER = ["resource_version", "resourceVersion", "request_id", "requestId", "correlation_id", "correlationId"];

/** Whether `name` is a manifest's file name (.yaml, .yml or .json, any case). */
export function isManifestFile(name: string): boolean {
  const lower = name.toLowerCase();
  return MANIFEST_EXTENSIONS.some((ext) => lower.length > ext.length && lower.endsWith(ext));
}

/** Every resource document in `sources`, checked, in apply order (see APPLY_ORDER); the first bad one throws a ManifestError. */
export function parseManifestDocuments(sources: readonly { source: string; text: string }[]): Manifest[] {
  const manifests: Manifest[] = [];
  for (const { source, text } of sources) {
    const docs = documentsOf(source, text);
    docs.forEach((doc, i) => manifests.push(manifestOf(docs.length > 1 ? `${source}#${i + 1}` : source, doc)));
  }
  const seen = new Map<string, string>();
  for (const m of manifests) {
    const key = `${m.type}/${m.id}`;
    const first = seen.get(key);
    if (first) fail(m.source, `${key} is also in ${first}`, "id", { hint: "keep one document per resource" });
    seen.set(key, m.source);
  }
  const rank = (m: Manifest) => APPLY_ORDER.indexOf(m.type);
  return manifests
    .map((m, i) => ({ m, i }))
    .sort((a, b) => rank(a.m) - rank(b.m) || a.i - b.i)
    .map(({ m }) => m);
}

function fail(source: string, problem: string, field: string | undefined, opts: { hint?: string; message?: string } = {}): never {
  throw new ManifestError(opts.message ?? `${source}: ${problem}`, source, problem, field, opts.hint);
}

function documentsOf(source: string, text: string): JsonValue[] {
  let values: unknown[];
  if (source.toLowerCase().endsWith(".json")) {
    try {
      values = [JSON.parse(text)];
    } catch (e) {
      const problem = `not valid JSON: ${(e as Error).message}`;
      fail(source, problem, undefined, { message: `${source} is ${problem}` });
    }
  } else {
    const docs = parseAllDocuments(text);
    const list = Array.isArray(docs) ? docs : [docs];
    values = [];
    for (const [i, d] of list.entries()) {
      const err = d.errors[0];
      if (err) {
        const at = `${source}${list.length > 1 ? `#${i + 1}` : ""}`;
        const problem = `not valid YAML: ${err.message.split("\n")[0]}`;
        fail(at, problem, undefined, { message: `${at} is ${problem}` });
      }
      values.push(d.toJSON());
    }
  }
  // A list (a JSON array, a YAML sequence) holds documents; empty documents are skipped.
  return values.flatMap((v) => (Array.isArray(v) ? v : [v])).filter((v) => v !== null && v !== undefined) as JsonValue[];
}

/** A resource document's top-level keys (proto and JSON names), as the REST API takes them. */
const RESOURCE_FIELDS = ResourceSchema.fields.map((f) => f.name);
const RESOURCE_KEYS = new Set(ResourceSchema.fields.flatMap((f) => [f.name, f.jsonName]));

/** The field name `key` is likely a typo of (at most two edits away), if any. */
function closest(key: string): string | undefined {
  const distance = (a: string, b: string): number => {
    let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
    for (let i = 1; i <= a.length; i++) {
      const row = [i];
      for (let j = 1; j <= b.length; j++) row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = row;
    }
    return prev[b.length]!;
  };
  return RESOURCE_FIELDS.map((f) => ({ f, d: distance(key.toLowerCase(), f) }))
    .sort((x, y) => x.d - y.d)
    .find((x) => x.d <= 2)?.f;
}

// The document's type and id, checked (what every later message names).
function typeAndId(source: string, body: JsonObject): { type: ResourceType; id: string } {
  const typeName = body.resource_type ?? body.resourceType;
  if (typeof typeName !== "string" || typeName === "") {
    fail(source, "resource_type is missing", "resource_type", { hint: `set it to one of ${RESOURCE_TYPES.join(", ")}` });
  }
  if (!(RESOURCE_TYPES as readonly string[]).includes(typeName)) {
    fail(source, `unknown resource_type ${JSON.stringify(typeName)}`, "resource_type", { hint: `one of ${RESOURCE_TYPES.join(", ")}` });
  }
  const type = typeName as ResourceType;
  if (!APPLY_ORDER.includes(type)) {
    fail(source, `a ${type} is written by the controller and cannot be applied`, "resource_type", {
      hint: type === "rollout" ? "a change of a tenant starts a rollout: steer it with `skipper rollout`" : "apply the tenant instead",
    });
  }
  if (typeof body.id !== "string" || !isValidId(body.id)) {
    fail(source, `id ${body.id === undefined ? "is missing" : `${JSON.stringify(body.id)} is not valid`}`, "id", {
      hint: "1-128 characters of [A-Za-z0-9._-], starting with a letter or digit",
    });
  }
  return { type, id: body.id };
}

function manifestOf(source: string, doc: JsonValue): Manifest {
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) fail(source, "a document must be a mapping (a resource)", undefined);
  const body: JsonObject = { ...doc };
  const { type, id } = typeAndId(source, body);
  const unknown = Object.keys(body).filter((k) => !RESOURCE_KEYS.has(k));
  if (unknown.length > 0) {
    const near = closest(unknown[0]!);
    fail(source, `${type}/${id}: key ${JSON.stringify(unknown[0])} is unknown${near ? ` (did you mean ${near}?)` : ""}`, unknown[0], {
      hint: `a resource document has ${RESOURCE_FIELDS.join(", ")}`,
    });
  }
  if (body.desired_state === undefined && body.desiredState === undefined)
    fail(source, `${type}/${id} has no desired_state`, "desired_state");
  for (const k of SET_BY_CONTROLLER) delete body[k];
  // An empty desired state is the kind's defaults (`desired_state: {}` for a bare tenant).
  for (const k of ["desired_state", "desiredState"]) {
    const v = body[k];
    if (typeof v === "object" && v !== null && !Array.isArray(v) && Object.keys(v).length === 0) body[k] = { [specCase(type)]: {} };
  }
  const meta = body.metadata;
  if (typeof meta === "object" && meta !== null && !Array.isArray(meta)) {
    body.metadata = { ...meta };
    for (const k of METADATA_SET_BY_CONTROLLER) delete body.metadata[k];
  }
  let canonical: JsonObject;
  try {
    canonical = canonicalResource(body, undefined);
  } catch (e) {
    if (isSeedDocumentError(e)) fail(source, e.message, e.field, { message: `${source}: ${e.message} (field ${e.field})` });
    throw e;
  }
  let resource: Resource;
  try {
    resource = fromJson(ResourceSchema, canonical);
  } catch (e) {
    fail(source, `not a valid ${type}: ${(e as Error).message}`, "desired_state");
  }
  if (resource.desiredState?.kind.case !== specCase(type)) {
    fail(source, `desired_state must hold a ${type} (found ${resource.desiredState?.kind.case ?? "nothing"})`, "desired_state");
  }
  const metaOut = canonical.metadata as JsonObject | undefined;
  return {
    source,
    type,
    id: resource.id,
    resource,
    labelsGiven: metaOut?.labels !== undefined,
    annotationsGiven: metaOut?.annotations !== undefined,
  };
}
