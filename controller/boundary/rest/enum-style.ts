// How the REST routes spell enum values in what they answer. By default as proto3 JSON does, the
// value's full name (`WORK_ORDER_STATUS_PENDING`), the same as Connect and gRPC answer. With the
// query parameter `enums=short` the seed's short form: the value without its enum's shared prefix,
// lowercased (`pending`). Input takes both forms either way (field-value.ts). `enums` is the REST
// layer's own parameter: taken off the query string before it is bound to the request, on every
// route (a route whose request comes whole from the body takes no other query parameter), and a
// request message may have no field of that name (checked where routes are built).
import type { DescEnum, DescField, DescMessage, JsonObject, JsonValue } from "@bufbuild/protobuf";
import { invalid } from "../../base/errors.js";

/** How enum values are spelled in a REST answer. */
export type EnumStyle = "full" | "short";

/** The query parameter that chooses the EnumStyle. */
export const ENUMS_PARAM = "enums";

/**
 * Takes `enums=...` off a raw query string: the rest of the query, and the style it asks for
 * ("full" when absent). INVALID_REQUEST for another value, or for the parameter given twice.
 */
export function takeEnumStyle(rawQuery: string): { rawQuery: string; style: EnumStyle } {
  if (rawQuery === "") return { rawQuery, style: "full" };
  const kept: string[] = [];
  let style: EnumStyle | undefined;
  for (const pair of rawQuery.split("&")) {
    const eq = pair.indexOf("=");
    const name = eq < 0 ? pair : pair.slice(0, eq);
    if (name !== ENUMS_PARAM) {
      kept.push(pair);
      continue;
    }
    const value = eq < 0 ? "" : pair.slice(eq + 1);
    if (style !== undefined) throw invalid(`query parameter ${ENUMS_PARAM} may be given only once`, { field: ENUMS_PARAM });
    if (value !== "short" && value !== "full") {
      throw invalid(`query parameter ${ENUMS_PARAM} must be short or full, not ${JSON.stringify(value.slice(0, 40))}`, {
        field: ENUMS_PARAM,
        allowed: ["short", "full"],
      });
    }
    style = value;
  }
  return { rawQuery: kept.join("&"), style: style ?? "full" };
}

/** The short form of an enum value's name: without its enum's shared prefix, lowercased. */
export function shortEnumName(e: DescEnum, name: string): string {
  const value = e.values.find((v) => v.name === name);
  if (!value) return name;
  // sharedPrefix is lowercase ("work_order_status_"); the names are as the contract writes them.
  const prefix = (e.sharedPrefix ?? "").toUpperCase();
  return (prefix !== "" && name.startsWith(prefix) ? name.slice(prefix.length) : name).toLowerCase();
}

/**
 * Rewrites, in place, every enum value in `json` (proto3 JSON of `desc` with proto field names)
 * to its short form. Well-known types (timestamps, structs) are left as they are.
 */
export function shortEnums(desc: DescMessage, json: JsonValue): JsonValue {
  if (json === null || typeof json !== "object" || Array.isArray(json) || desc.typeName.startsWith("google.protobuf.")) return json;
  for (const field of desc.fields) {
    const value = json[field.name];
    if (value !== undefined) json[field.name] = shortField(field, value);
  }
  return json;
}

function shortField(field: DescField, value: JsonValue): JsonValue {
  switch (field.fieldKind) {
    case "enum":
      return shortEnum(field.enum, value);
    case "message":
      return shortEnums(field.message, value);
    case "list":
      if (!Array.isArray(value) || field.listKind === "scalar") return value;
      return field.listKind === "enum" ? value.map((v) => shortEnum(field.enum, v)) : value.map((v) => shortEnums(field.message, v));
    case "map": {
      if (value === null || typeof value !== "object" || Array.isArray(value) || field.mapKind === "scalar") return value;
      const out: JsonObject = {};
      for (const [k, v] of Object.entries(value))
        out[k] = field.mapKind === "enum" ? shortEnum(field.enum, v) : shortEnums(field.message, v);
      return out;
    }
    default:
      return value;
  }
}

function shortEnum(e: DescEnum, value: JsonValue): JsonValue {
  return typeof value === "string" ? shortEnumName(e, value) : value;
}
