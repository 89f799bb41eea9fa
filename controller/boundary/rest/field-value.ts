// Text (a query parameter or a path segment) to a typed field value, as protobuf-es reflection
// expects it: numbers range-checked, 64-bit integers as bigint, bools as true/false, enums by full
// name, number or short alias ("pending" for WORK_ORDER_STATUS_PENDING), and the well-known types
// whose proto3 JSON is a string (Timestamp as RFC 3339, Duration, FieldMask) through the library's
// own JSON parser. Failures are INVALID_REQUEST naming the parameter.
import { fromJson, ScalarType, type DescEnum, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { invalid } from "../../base/errors.js";

// Well-known types whose JSON form is a single string, so one parameter can carry them.
const STRING_JSON_TYPES = new Set(["google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask"]);

const INT32 = { min: -(2n ** 31n), max: 2n ** 31n - 1n };
const UINT32 = { min: 0n, max: 2n ** 32n - 1n };
const INT64 = { min: -(2n ** 63n), max: 2n ** 63n - 1n };
const UINT64 = { min: 0n, max: 2n ** 64n - 1n };

/** True when a (singular or repeated) field's element can be given as text. */
export function isTextSettable(field: DescField): boolean {
  const message = elementMessage(field);
  return field.fieldKind !== "map" && (message === undefined || STRING_JSON_TYPES.has(message.typeName));
}

/** Parses `text` as one element of `field` (the field itself, or an item of a repeated field). */
export function parseFieldText(field: DescField, text: string, param: string): unknown {
  const message = elementMessage(field);
  if (message !== undefined) return parseMessageText(message, text, param);
  const enumDesc =
    field.fieldKind === "enum" ? field.enum : field.fieldKind === "list" && field.listKind === "enum" ? field.enum : undefined;
  if (enumDesc !== undefined) return parseEnum(enumDesc, text, param);
  if (field.fieldKind === "scalar" || (field.fieldKind === "list" && field.listKind === "scalar")) {
    return parseScalar(field.scalar, field.longAsString, text, param);
  }
  throw invalid(`${param} cannot be set from text`, { field: param });
}

function elementMessage(field: DescField): DescMessage | undefined {
  if (field.fieldKind === "message") return field.message;
  if (field.fieldKind === "list" && field.listKind === "message") return field.message;
  return undefined;
}

function parseMessageText(message: DescMessage, text: string, param: string): unknown {
  if (!STRING_JSON_TYPES.has(message.typeName)) throw invalid(`${param} cannot be set from text`, { field: param });
  // "+" in a query string means a space, so "…T10:00:00+02:00" arrives as "…T10:00:00 02:00";
  // an offset is the only place a Timestamp can hold a space, so put the "+" back.
  const json = message.typeName === "google.protobuf.Timestamp" ? text.replace(/ (\d\d:\d\d)$/, "+$1") : text;
  try {
    return reflect(message, fromJson(message, json));
  } catch {
    const expected = message.typeName === "google.protobuf.Timestamp" ? "an RFC 3339 timestamp" : `a ${message.name} in proto3 JSON form`;
    throw invalid(`${param} must be ${expected}: got ${show(text)}`, { field: param });
  }
}

function parseEnum(desc: DescEnum, text: string, param: string): number {
  const upper = text.toUpperCase();
  const prefix = desc.sharedPrefix?.toUpperCase() ?? "";
  const byName = desc.values.find((v) => v.name === upper || (prefix !== "" && v.name === prefix + upper));
  if (byName) return byName.number;
  if (/^-?\d+$/.test(text)) {
    const byNumber = desc.values.find((v) => v.number === Number(text));
    if (byNumber) return byNumber.number;
  }
  const names = desc.values.map((v) => (prefix !== "" && v.name.startsWith(prefix) ? v.name.slice(prefix.length).toLowerCase() : v.name));
  throw invalid(`${param} must be one of ${names.join(", ")} (or the full enum name or number): got ${show(text)}`, {
    field: param,
    allowed: names,
  });
}

function parseScalar(type: ScalarType, longAsString: boolean, text: string, param: string): unknown {
  switch (type) {
    case ScalarType.STRING:
      return text;
    case ScalarType.BOOL:
      if (/^true$/i.test(text)) return true;
      if (/^false$/i.test(text)) return false;
      throw invalid(`${param} must be true or false: got ${show(text)}`, { field: param });
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT: {
      const n = text.trim() === "" ? NaN : Number(text);
      if (Number.isFinite(n)) return n;
      throw invalid(`${param} must be a number: got ${show(text)}`, { field: param });
    }
    case ScalarType.BYTES:
      try {
        return base64Decode(text);
      } catch {
        throw invalid(`${param} must be base64: got ${show(text)}`, { field: param });
      }
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return Number(parseInteger(text, INT32, param));
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return Number(parseInteger(text, UINT32, param));
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return long(parseInteger(text, INT64, param), longAsString);
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return long(parseInteger(text, UINT64, param), longAsString);
  }
}

function parseInteger(text: string, range: { min: bigint; max: bigint }, param: string): bigint {
  const n = /^-?\d{1,20}$/.test(text) ? BigInt(text) : undefined;
  if (n !== undefined && n >= range.min && n <= range.max) return n;
  throw invalid(`${param} must be an integer from ${range.min} to ${range.max}: got ${show(text)}`, { field: param });
}

// 64-bit fields are bigint in protobuf-es unless the field asks for strings (jstype = JS_STRING).
function long(n: bigint, asString: boolean): bigint | string {
  return asString ? n.toString() : n;
}

/** A bounded, quoted rendering of untrusted input for error messages. */
export function show(text: string): string {
  return JSON.stringify(text.length > 64 ? `${text.slice(0, 64)}…` : text);
}
