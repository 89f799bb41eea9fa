// redact() for contract messages: the message through proto JSON, redacted, and back, for the
// places that hand a caller a record with its secrets hidden (snapshots, reads by a viewer).
// Redaction hides text; it must not change a field's type. A value under a secret-looking name is
// hidden whole, and such a name can hold a structured message (a secret resource's spec sits
// under `secret`, with its entries' int64 versions, timestamps and enums): those fields are put
// back as they were, since they carry no secret text and "[REDACTED]" would not decode as them.
import {
  fromJson,
  toJson,
  ScalarType,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type MessageShape,
} from "@bufbuild/protobuf";
import { REDACTED, redact } from "./redact.js";

/**
 * A copy of `msg` with secret text replaced by "[REDACTED]" and every other field's type kept.
 * With `inlineEnv` (a copy for a viewer), every inline env value is hidden too unless its name is
 * listed in the same object's public_env.
 */
export function redactMessage<D extends DescMessage>(schema: D, msg: MessageShape<D>, opts: { inlineEnv?: boolean } = {}): MessageShape<D> {
  const original = toJson(schema, msg, { useProtoFieldName: true });
  let json = redact(original) as JsonValue;
  if (opts.inlineEnv) json = hideInlineEnv(json, 0);
  return fromJson(schema, keepTypes(schema, original, json), { ignoreUnknownFields: true });
}

// Every `env` map of strings (a compose project's, a service's, a process's, a command's): each
// value hidden unless the same object lists its name in public_env.
function hideInlineEnv(v: JsonValue, depth: number): JsonValue {
  if (depth > 32 || typeof v !== "object" || v === null) return v;
  if (Array.isArray(v)) return v.map((x) => hideInlineEnv(x, depth + 1));
  const out: JsonObject = {};
  const shown = new Set(Array.isArray(v.public_env) ? v.public_env.filter((x): x is string => typeof x === "string") : []);
  for (const [k, x] of Object.entries(v)) {
    if (k === "env" && isObject(x) && Object.values(x).every((e) => typeof e === "string")) {
      out[k] = Object.fromEntries(Object.entries(x).map(([name, value]) => [name, shown.has(name) || value === "" ? value : REDACTED]));
    } else out[k] = hideInlineEnv(x!, depth + 1);
  }
  return out;
}

// Messages whose JSON is a string that is not text (times, durations, masks): kept whole.
const KEPT_MESSAGES = new Set(["google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask"]);
// Free-form JSON: redacted as any JSON is, with nothing typed to keep.
const FREE_FORM = new Set(["google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"]);

/** `redacted` with every field of `schema` that is not text (or free-form JSON) restored from `original`. */
function keepTypes(schema: DescMessage, original: JsonValue, redacted: JsonValue): JsonValue {
  if (KEPT_MESSAGES.has(schema.typeName)) return original;
  if (FREE_FORM.has(schema.typeName) || !isObject(original) || !isObject(redacted)) return redacted;
  const out: JsonObject = { ...redacted };
  for (const field of schema.fields) {
    const key = field.name;
    if (!(key in original) || !(key in out)) continue;
    out[key] = keepField(field, original[key]!, out[key]!);
  }
  return out;
}

function keepField(field: DescField, original: JsonValue, redacted: JsonValue): JsonValue {
  switch (field.fieldKind) {
    case "scalar":
      return keepScalar(field.scalar, original, redacted);
    case "enum":
      return original;
    case "message":
      return keepTypes(field.message, original, redacted);
    case "list": {
      if (!Array.isArray(original) || !Array.isArray(redacted)) return redacted;
      if (field.listKind === "enum") return original;
      return redacted.map((r, i) =>
        field.listKind === "scalar" ? keepScalar(field.scalar, original[i]!, r) : keepTypes(field.message!, original[i]!, r),
      );
    }
    case "map": {
      if (!isObject(original) || !isObject(redacted)) return redacted;
      if (field.mapKind === "enum") return original;
      const out: JsonObject = {};
      for (const [k, r] of Object.entries(redacted)) {
        out[k] = field.mapKind === "scalar" ? keepScalar(field.scalar, original[k]!, r) : keepTypes(field.message!, original[k]!, r);
      }
      return out;
    }
  }
}

// Text stays redacted; bytes under a secret name are emptied (no base64 of "[REDACTED]"); numbers and booleans are kept.
function keepScalar(scalar: ScalarType, original: JsonValue, redacted: JsonValue): JsonValue {
  if (scalar === ScalarType.STRING) return redacted;
  if (scalar === ScalarType.BYTES) return redacted === original ? original : "";
  return original;
}

function isObject(v: JsonValue | undefined): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
