// What writing a resource document changes in a stored resource: its desired state, labels and
// annotations, field by field (`~ desired_state.tenant.compose.env.GREETING: "hi" -> "hello"`).
// Values are kept redacted as the controller redacts what it shows (logging/redact.ts:
// secret-shaped keys, credentials in compose files and URLs): a change that only a hidden value
// makes is named, not shown. A secret's values are write-only (the API never returns them), so only
// the names of values a document adds or removes count. Pure: `skipper apply` shows these changes
// (cli/desired-diff.ts renders them), the controller's Git sync tells drift by them.
import { create, equals, type JsonObject, type JsonValue, toJson } from "@bufbuild/protobuf";
import { type Resource, type ResourceSpec, ResourceSpecSchema } from "../gen/skipper/v1/resource_pb.js";
import { SecretSpecSchema } from "../gen/skipper/v1/secret_pb.js";
import { redact } from "./logging/redact.js";
import type { Manifest } from "./manifest-documents.js";

/** One changed field: added (+), removed (-) or changed (~). */
export interface FieldChange {
  op: "+" | "-" | "~";
  path: string;
  /** Redacted, as shown. */
  before?: JsonValue;
  after?: JsonValue;
}

/** The fields that differ between two JSON documents (proto JSON: absent means default). */
export function fieldChanges(before: JsonObject, after: JsonObject, prefix = ""): FieldChange[] {
  const raw = { b: flatten(before, prefix), a: flatten(after, prefix) };
  const shown = { b: flatten(redact(before), prefix), a: flatten(redact(after), prefix) };
  const paths = [...new Set([...raw.b.keys(), ...raw.a.keys()])].sort();
  const out: FieldChange[] = [];
  for (const path of paths) {
    const [b, a] = [raw.b.get(path), raw.a.get(path)];
    if (b !== undefined && a !== undefined && same(b, a)) continue;
    const op = b === undefined ? "+" : a === undefined ? "-" : "~";
    out.push({
      op,
      path,
      ...(b !== undefined ? { before: shown.b.get(path) } : {}),
      ...(a !== undefined ? { after: shown.a.get(path) } : {}),
    });
  }
  return out;
}

/**
 * What writing `m` over the stored `current` changes: the desired state's fields, the labels and
 * annotations when the document gives them (else they are left as stored), and a secret's values
 * by name. Empty: the write would change nothing (a secret's values aside: see `carriesValues`).
 */
export function documentChanges(m: Manifest, current: Resource): FieldChange[] {
  const want = comparableSpec(m.resource.desiredState);
  const have = comparableSpec(current.desiredState);
  const changes = equals(ResourceSpecSchema, want, have)
    ? []
    : fieldChanges(specJson(have), specJson(want), "desired_state").filter((c) => !c.path.startsWith("desired_state.secret.entries"));
  if (m.labelsGiven)
    changes.push(...fieldChanges({ ...(current.metadata?.labels ?? {}) }, { ...(m.resource.metadata?.labels ?? {}) }, "labels"));
  if (m.annotationsGiven)
    changes.push(
      ...fieldChanges({ ...(current.metadata?.annotations ?? {}) }, { ...(m.resource.metadata?.annotations ?? {}) }, "annotations"),
    );
  const secret = m.resource.desiredState?.kind.case === "secret" ? m.resource.desiredState.kind.value : undefined;
  if (secret) {
    const held = new Set(current.desiredState?.kind.case === "secret" ? current.desiredState.kind.value.entries.map((e) => e.name) : []);
    for (const name of Object.keys(secret.values).sort()) {
      if (!held.has(name)) changes.push({ op: "+", path: `desired_state.secret.values.${name}`, after: "(hidden)" });
    }
    for (const name of secret.remove)
      if (held.has(name)) changes.push({ op: "-", path: `desired_state.secret.values.${name}`, before: "(hidden)" });
  }
  return changes;
}

/** Whether `m` is a secret that carries values: they cannot be compared with what is stored, only sent. */
export function carriesValues(m: Manifest): boolean {
  const spec = m.resource.desiredState?.kind;
  return spec?.case === "secret" && Object.keys(spec.value.values).length > 0;
}

// A secret's spec without what the API never returns (values) or only returns (entries).
function comparableSpec(spec: ResourceSpec | undefined): ResourceSpec {
  if (spec?.kind.case !== "secret") return spec ?? create(ResourceSpecSchema);
  const value = create(SecretSpecSchema, { ...spec.kind.value, values: {}, remove: [], sealed: {}, entries: [] });
  return create(ResourceSpecSchema, { kind: { case: "secret", value } });
}

function specJson(spec: ResourceSpec): JsonObject {
  return toJson(ResourceSpecSchema, spec, { useProtoFieldName: true }) as JsonObject;
}

// Leaves by dotted path: objects (messages and maps) are walked; lists are leaves.
function flatten(value: JsonValue, prefix: string, out = new Map<string, JsonValue>()): Map<string, JsonValue> {
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const entries = Object.entries(value);
    if (entries.length === 0 && prefix !== "") out.set(prefix, {});
    for (const [k, v] of entries) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else out.set(prefix, value);
  return out;
}

function same(a: JsonValue, b: JsonValue): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
