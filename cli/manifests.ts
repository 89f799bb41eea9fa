// Manifests: resource documents in files, directories or stdin, YAML or JSON, one or many per
// file (YAML documents separated by `---`, or a JSON array), in the shape the REST API takes
// (the seed's: examples/*.json). Each is mapped to the contract's canonical form by the same code
// the controller's REST routes use (common/seed-documents.ts) and parsed as a Resource, so a
// mistake is found, with its file and document, before anything is sent. Fields the controller
// sets (states, convergence, times, versions) are dropped: what `skipper get -o yaml` prints can
// be applied again.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { extname, join } from "node:path";
import { fromJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { parseAllDocuments } from "yaml";
import { ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { isValidId } from "../common/ids.js";
import { API_WRITE_ORDER, RESOURCE_TYPES, specCase, type ResourceType } from "../common/resource-kinds.js";
import { canonicalResource, isSeedDocumentError } from "../common/seed-documents.js";
import { CliError } from "./errors.js";

/** One resource document, ready to send. */
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

/** The order resources are written in: what others name comes first (a service names its tenant). */
export const APPLY_ORDER: readonly ResourceType[] = API_WRITE_ORDER;
const EXTENSIONS = new Set([".yaml", ".yml", ".json"]);
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

/** The texts behind `paths` ("-" is stdin; a directory gives its .yaml, .yml and .json files, sorted). */
export async function readSources(paths: string[], stdin: () => Promise<string>): Promise<{ source: string; text: string }[]> {
  if (paths.length === 0) throw new CliError("no manifest given", { hint: "pass -f FILE, -f DIR or -f - (stdin)" });
  const out: { source: string; text: string }[] = [];
  for (const p of paths) {
    if (p === "-") {
      out.push({ source: "stdin", text: await stdin() });
      continue;
    }
    let isDir: boolean;
    try {
      isDir = statSync(p).isDirectory();
    } catch (e) {
      throw new CliError(`cannot read ${p}: ${(e as Error).message}`);
    }
    const files = isDir
      ? readdirSync(p)
          .filter((f) => EXTENSIONS.has(extname(f).toLowerCase()))
          .sort()
          .map((f) => join(p, f))
      : [p];
    if (isDir && files.length === 0) throw new CliError(`${p} holds no .yaml, .yml or .json file`);
    for (const f of files) out.push({ source: f, text: readFileSync(f, "utf8") });
  }
  return out;
}

/** Every resource document in `sources`, checked, in apply order (see APPLY_ORDER). */
export function parseManifests(sources: { source: string; text: string }[]): Manifest[] {
  const manifests: Manifest[] = [];
  for (const { source, text } of sources) {
    const docs = documentsOf(source, text);
    docs.forEach((doc, i) => manifests.push(manifestOf(docs.length > 1 ? `${source}#${i + 1}` : source, doc)));
  }
  const seen = new Map<string, string>();
  for (const m of manifests) {
    const key = `${m.type}/${m.id}`;
    const first = seen.get(key);
    if (first) throw new CliError(`${m.source}: ${key} is also in ${first}`, { hint: "keep one document per resource" });
    seen.set(key, m.source);
  }
  const rank = (m: Manifest) => APPLY_ORDER.indexOf(m.type);
  return manifests
    .map((m, i) => ({ m, i }))
    .sort((a, b) => rank(a.m) - rank(b.m) || a.i - b.i)
    .map(({ m }) => m);
}

function documentsOf(source: string, text: string): JsonValue[] {
  let values: unknown[];
  if (extname(source).toLowerCase() === ".json") {
    try {
      values = [JSON.parse(text)];
    } catch (e) {
      throw new CliError(`${source} is not valid JSON: ${(e as Error).message}`);
    }
  } else {
    const docs = parseAllDocuments(text);
    const list = Array.isArray(docs) ? docs : [docs];
    values = [];
    for (const [i, d] of list.entries()) {
      const err = d.errors[0];
      if (err) throw new CliError(`${source}${list.length > 1 ? `#${i + 1}` : ""} is not valid YAML: ${err.message.split("\n")[0]}`);
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

function manifestOf(source: string, doc: JsonValue): Manifest {
  if (typeof doc !== "object" || doc === null || Array.isArray(doc))
    throw new CliError(`${source}: a document must be a mapping (a resource)`);
  const body: JsonObject = { ...doc };
  const typeName = body.resource_type ?? body.resourceType;
  if (typeof typeName !== "string" || typeName === "") {
    throw new CliError(`${source}: resource_type is missing`, { hint: `set it to one of ${RESOURCE_TYPES.join(", ")}` });
  }
  if (!(RESOURCE_TYPES as readonly string[]).includes(typeName)) {
    throw new CliError(`${source}: unknown resource_type ${JSON.stringify(typeName)}`, { hint: `one of ${RESOURCE_TYPES.join(", ")}` });
  }
  const type = typeName as ResourceType;
  if (!APPLY_ORDER.includes(type)) {
    throw new CliError(`${source}: a ${type} is written by the controller and cannot be applied`, {
      hint: type === "rollout" ? "a change of a tenant starts a rollout: steer it with `skipper rollout`" : "apply the tenant instead",
    });
  }
  if (typeof body.id !== "string" || !isValidId(body.id)) {
    throw new CliError(`${source}: id ${body.id === undefined ? "is missing" : `${JSON.stringify(body.id)} is not valid`}`, {
      hint: "1-128 characters of [A-Za-z0-9._-], starting with a letter or digit",
    });
  }
  const unknown = Object.keys(body).filter((k) => !RESOURCE_KEYS.has(k));
  if (unknown.length > 0) {
    const near = closest(unknown[0]!);
    throw new CliError(
      `${source}: ${type}/${body.id}: key ${JSON.stringify(unknown[0])} is unknown${near ? ` (did you mean ${near}?)` : ""}`,
      {
        hint: `a resource document has ${RESOURCE_FIELDS.join(", ")}`,
      },
    );
  }
  if (body.desired_state === undefined && body.desiredState === undefined)
    throw new CliError(`${source}: ${type}/${body.id} has no desired_state`);
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
    if (isSeedDocumentError(e)) throw new CliError(`${source}: ${e.message} (field ${e.field})`);
    throw e;
  }
  let resource: Resource;
  try {
    resource = fromJson(ResourceSchema, canonical);
  } catch (e) {
    throw new CliError(`${source}: not a valid ${type}: ${(e as Error).message}`);
  }
  if (resource.desiredState?.kind.case !== specCase(type)) {
    throw new CliError(`${source}: desired_state must hold a ${type} (found ${resource.desiredState?.kind.case ?? "nothing"})`);
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
