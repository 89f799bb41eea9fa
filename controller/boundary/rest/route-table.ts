// The REST route table, derived at start-up from the google.api.http options in the generated
// descriptors (each rule plus its additional_bindings), so the contract stays the only place a
// route is written down. Field names in templates, `body` and `response_body` are resolved here:
// a typo in a .proto fails at start-up, not on the first request.
import { ENUMS_PARAM } from "./enum-style.js";
import { getOption, hasOption, type DescField, type DescMethodUnary, type DescService } from "@bufbuild/protobuf";
import { http } from "../../../gen/google/api/annotations_pb.js";
import type { HttpRule } from "../../../gen/google/api/http_pb.js";
import { resolveFieldPath } from "./field-path.js";
import { compareSpecificity, matchSegments, parseTemplate, type Segment } from "./path-template.js";

/** One REST binding of a unary RPC. */
export interface RestRoute {
  /** Upper-case HTTP method, e.g. "GET". */
  httpMethod: string;
  /** The template as written in the contract, e.g. "/v1/resources/{resource_type}/{id}". */
  template: string;
  segments: Segment[];
  rpc: DescMethodUnary;
  /** Path variables: template spelling -> resolved field path in the request message. */
  pathFields: Map<string, DescField[]>;
  /** "" (no body), "*" (the whole request) or the name of the request field the body fills. */
  body: string;
  bodyField?: DescField;
  /** The response field that becomes `data`, when the rule names one. */
  responseField?: DescField;
}

/** A route as shown to people: method, path template and the RPC it calls. */
export interface RouteDescription {
  method: string;
  path: string;
  rpc: string;
}

/** Derives every route of `services` in contract order; calls `onSkip` for unusable rules. */
export function deriveRoutes(services: DescService[], onSkip?: (message: string) => void): RestRoute[] {
  const routes: RestRoute[] = [];
  for (const service of services) {
    for (const method of service.methods) {
      if (!hasOption(method, http)) continue;
      if (method.methodKind !== "unary") {
        // A stream has no request/response envelope; REST clients use Connect for it.
        onSkip?.(`${method.parent.typeName}.${method.name}: http option ignored on a ${method.methodKind} method`);
        continue;
      }
      const rule = getOption(method, http);
      for (const binding of [rule, ...rule.additionalBindings]) routes.push(toRoute(method as DescMethodUnary, binding));
    }
  }
  return routes;
}

/** A copy of `routes` in matching order: position by position, literal segments first. */
export function byPrecedence(routes: RestRoute[]): RestRoute[] {
  // Stable sort: among equally specific templates the contract's order is kept.
  return [...routes].sort((a, b) => compareSpecificity(a.segments, b.segments));
}

/** The table people read: one line per route. */
export function describeRoutes(routes: RestRoute[]): RouteDescription[] {
  return routes.map((r) => ({ method: r.httpMethod, path: r.template, rpc: `${r.rpc.parent.typeName}.${r.rpc.name}` }));
}

/** The outcome of looking a request up in the table. */
export type RouteMatch =
  | { kind: "found"; route: RestRoute; rawVars: Map<string, string> }
  | { kind: "wrong-method"; allow: string[] }
  | { kind: "none" };

/** Finds the first route (of routes in byPrecedence order) for `httpMethod` and the encoded `parts`. */
export function findRoute(routes: RestRoute[], httpMethod: string, parts: string[]): RouteMatch {
  const allow = new Set<string>();
  for (const route of routes) {
    const rawVars = matchSegments(route.segments, parts);
    if (rawVars === undefined) continue;
    if (route.httpMethod === httpMethod) return { kind: "found", route, rawVars };
    allow.add(route.httpMethod);
  }
  return allow.size > 0 ? { kind: "wrong-method", allow: [...allow].sort() } : { kind: "none" };
}

function toRoute(rpc: DescMethodUnary, rule: HttpRule): RestRoute {
  const where = `${rpc.parent.typeName}.${rpc.name}`;
  const [httpMethod, template] = patternOf(rule, where);
  const segments = parseTemplate(template);
  const pathFields = new Map<string, DescField[]>();
  for (const seg of segments) {
    if (seg.kind !== "variable") continue;
    const path = resolveFieldPath(rpc.input, seg.fieldPath, false);
    const last = path?.[path.length - 1];
    if (path === undefined || last === undefined || (last.fieldKind !== "scalar" && last.fieldKind !== "enum")) {
      throw new Error(`${where}: path variable {${seg.fieldPath}} must name a singular scalar field`);
    }
    pathFields.set(seg.fieldPath, path);
  }
  // The REST layer's own query parameter (enum-style.ts) must never shadow a field.
  if (rpc.input.fields.some((f) => f.name === ENUMS_PARAM || f.jsonName === ENUMS_PARAM)) {
    throw new Error(`${where}: ${rpc.input.typeName} has a field named ${ENUMS_PARAM}, the REST layer's own query parameter`);
  }
  const route: RestRoute = { httpMethod, template, segments, rpc, pathFields, body: rule.body };
  if (rule.body !== "" && rule.body !== "*") {
    route.bodyField = rpc.input.fields.find((f) => f.name === rule.body);
    if (route.bodyField === undefined) throw new Error(`${where}: body field ${rule.body} not in ${rpc.input.typeName}`);
  }
  if (rule.responseBody !== "") {
    route.responseField = rpc.output.fields.find((f) => f.name === rule.responseBody);
    if (route.responseField === undefined) throw new Error(`${where}: response_body ${rule.responseBody} not in ${rpc.output.typeName}`);
  }
  return route;
}

function patternOf(rule: HttpRule, where: string): [string, string] {
  const p = rule.pattern;
  switch (p.case) {
    case "get":
    case "put":
    case "post":
    case "delete":
    case "patch":
      return [p.case.toUpperCase(), p.value];
    case "custom":
      return [p.value.kind.toUpperCase(), p.value.path];
    default:
      throw new Error(`${where}: http rule has no pattern`);
  }
}
