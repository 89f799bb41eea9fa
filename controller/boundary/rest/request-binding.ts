// Builds an RPC request message from a REST request, following google.api.http binding rules:
//   body "*"      the JSON body is the whole request message; no query parameters are accepted
//   body "field"  the JSON body is that field (CreateResource's body is a plain Resource)
//   path          `{field}` variables set their (possibly nested) fields and win over the body,
//                 but a body that names a different value for one of them is refused
//   query         every other field, by proto name or JSON name, parsed by type (field-value.ts)
// Anything unexpected (unknown parameter, malformed JSON, unknown JSON key, bad value) is an
// INVALID_REQUEST naming the field, before the RPC is called.
import { create, fromJson, type DescField, type JsonObject, type JsonValue, type Message } from "@bufbuild/protobuf";
import { reflect, type ReflectList, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { invalid } from "../../base/errors.js";
import { parentOf, pathName, resolveFieldPath, valueAt } from "./field-path.js";
import { isTextSettable, parseFieldText, show } from "./field-value.js";
import { decodeSegment } from "./path-template.js";
import type { RestRoute } from "./route-table.js";
import { canonicalResource, canonicalUpdate } from "./seed-documents.js";

/** The request message for `route`: raw path variables, raw query string and body text (if read). */
export function bindRequest(route: RestRoute, rawVars: Map<string, string>, rawQuery: string, bodyText: string | undefined): Message {
  const pathValues = decodePathValues(route, rawVars);
  const message = route.body !== "" && bodyText !== undefined ? parseBody(route, bodyText, pathValues) : create(route.rpc.input);
  const root = reflect(route.rpc.input, message);
  for (const [name, { path, value }] of pathValues) {
    const inBody = valueAt(root, path);
    if (inBody !== undefined && inBody !== value) {
      throw invalid(`${name} in the body (${show(String(inBody))}) differs from the path (${show(String(value))})`, { field: name });
    }
  }
  applyQuery(route, root, rawQuery);
  for (const { path, value } of pathValues.values()) parentOf(root, path).set(path[path.length - 1]!, value as never);
  return message;
}

/** Splits a raw query string into decoded (name, value) pairs; "+" is a space, as in forms. */
export function parseQueryString(raw: string): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  for (const part of raw.split("&")) {
    if (part === "") continue;
    const eq = part.indexOf("=");
    const [rawName, rawValue] = eq < 0 ? [part, ""] : [part.slice(0, eq), part.slice(eq + 1)];
    const name = decodeSegment(rawName.replaceAll("+", " "));
    const value = decodeSegment(rawValue.replaceAll("+", " "));
    if (name === undefined || value === undefined) {
      throw invalid(`query parameter ${show(rawName)} is not valid percent-encoding`, { field: name ?? rawName });
    }
    pairs.push([name, value]);
  }
  return pairs;
}

/** Query parameter names `route` accepts at the top level, for error messages and docs. */
export function queryFieldNames(route: RestRoute): string[] {
  if (route.body === "*") return [];
  return route.rpc.input.fields
    .filter((f) => f !== route.bodyField && !route.pathFields.has(f.name) && isTextSettable(f))
    .map((f) => f.name);
}

function parseBody(route: RestRoute, text: string, pathValues: Map<string, { value: unknown }>): Message {
  const input = route.rpc.input;
  const where = route.bodyField?.name ?? "body";
  // An absent body is an empty message, so `curl -X POST .../apply` works without `-d '{}'`.
  if (text.trim() === "") return create(input);
  let json: JsonValue;
  try {
    json = JSON.parse(text) as JsonValue;
  } catch (e) {
    throw invalid(`request body is not valid JSON: ${(e as Error).message}`, { field: where });
  }
  const wantsObject = route.bodyField === undefined || route.bodyField.fieldKind === "message";
  if (wantsObject && (typeof json !== "object" || json === null || Array.isArray(json))) {
    throw invalid(`request body must be a JSON object (${route.bodyField?.message?.typeName ?? input.typeName})`, { field: where });
  }
  json = asSeedWrites(route, json as JsonObject, pathValues);
  try {
    return fromJson(input, route.bodyField ? { [route.bodyField.jsonName]: json } : json);
  } catch (e) {
    // protobuf-es names the offending key or field; surface it as details.field.
    const msg = (e as Error).message;
    const field = /key "([^"]+)" is unknown/.exec(msg)?.[1] ?? /decode field [\w.]*?\.(\w+) from JSON/.exec(msg)?.[1] ?? where;
    throw invalid(`request body is not a valid ${route.bodyField?.message?.typeName ?? input.typeName}: ${msg}`, { field });
  }
}

// Resource documents in the seed's shape, on the routes that write resources (seed-documents.ts).
function asSeedWrites(route: RestRoute, json: JsonObject, pathValues: Map<string, { value: unknown }>): JsonObject {
  if (route.rpc.parent.typeName !== "skipper.v1.ResourceService") return json;
  const text = (name: string) => {
    const v = pathValues.get(name)?.value;
    return typeof v === "string" ? v : undefined;
  };
  if (route.rpc.name === "CreateResource") return canonicalResource(json, text("resource_type"));
  if (route.rpc.name === "UpdateResource" && route.body === "*") return canonicalUpdate(json, text("resource_type"), text("id"));
  return json;
}

function decodePathValues(route: RestRoute, rawVars: Map<string, string>): Map<string, { path: DescField[]; value: unknown }> {
  const out = new Map<string, { path: DescField[]; value: unknown }>();
  for (const [name, raw] of rawVars) {
    const path = route.pathFields.get(name)!;
    const decoded = decodeSegment(raw);
    if (decoded === undefined) throw invalid(`path segment for ${name} is not valid percent-encoding`, { field: name });
    // Dot segments and odd characters pass through on purpose: the handler validates ids.
    out.set(name, { path, value: parseFieldText(path[path.length - 1]!, decoded, name) });
  }
  return out;
}

function applyQuery(route: RestRoute, root: ReflectMessage, rawQuery: string): void {
  const groups = new Map<string, { param: string; path: DescField[]; values: string[] }>();
  for (const [name, value] of parseQueryString(rawQuery)) {
    const path = checkQueryField(route, name);
    const key = pathName(path);
    const group = groups.get(key) ?? { param: name, path, values: [] };
    group.values.push(value);
    groups.set(key, group);
  }
  for (const { param, path, values } of groups.values()) {
    const field = path[path.length - 1]!;
    const parent = parentOf(root, path);
    if (field.fieldKind === "list") {
      const list = parent.get(field) as ReflectList<unknown>;
      for (const v of values) list.add(parseFieldText(field, v, param));
    } else if (values.length > 1) {
      throw invalid(`query parameter ${show(param)} may be given only once`, { field: param });
    } else {
      parent.set(field, parseFieldText(field, values[0]!, param) as never);
    }
  }
}

// Resolves a query parameter to its field path, refusing anything the query may not set.
function checkQueryField(route: RestRoute, name: string): DescField[] {
  const path = resolveFieldPath(route.rpc.input, name, true);
  if (path === undefined) {
    const allowed = queryFieldNames(route);
    const hint = allowed.length > 0 ? `accepted: ${allowed.join(", ")}` : "this route accepts none";
    throw invalid(`unknown query parameter ${show(name)} (${hint})`, { field: name, allowed });
  }
  const key = pathName(path);
  if (route.body === "*") {
    throw invalid(`query parameter ${show(name)} is not accepted: ${route.template} takes every field from the JSON body`, { field: name });
  }
  for (const bound of route.pathFields.keys()) {
    if (key === bound || key.startsWith(`${bound}.`) || bound.startsWith(`${key}.`)) {
      throw invalid(`query parameter ${show(name)} is set by the path ${route.template}`, { field: name });
    }
  }
  if (route.bodyField !== undefined && path[0] === route.bodyField) {
    throw invalid(`query parameter ${show(name)} is set by the request body`, { field: name });
  }
  if (!isTextSettable(path[path.length - 1]!)) {
    throw invalid(`query parameter ${show(name)} names a field that cannot be set from the query string`, { field: name });
  }
  return path;
}
