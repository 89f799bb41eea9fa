// The hostile sweep's REST requests: every route the controller derives from the contract
// (deriveRoutes over SERVICES, additional bindings included, so a new route is covered without a
// line here), with every credential: odd path variables (traversal, NUL, broken percent-encoding
// and UTF-8, very long, Unicode), bodies that are no request or are compressed badly, content types
// nobody sends, every other HTTP method, and query parameters derived from the request message's
// fields with values of the wrong kind; plus paths outside the table.
import type { DescField } from "@bufbuild/protobuf";
import { SERVICES } from "../../controller/server/build.js";
import { deriveRoutes, type RestRoute } from "../../controller/boundary/rest/route-table.js";
import type { Attempt } from "./hostile-attempt.js";
import { compressedBodies, jsonBodies, random, typedBinary, typedJsonText } from "./hostile-bodies.js";

/** Path variables, as they go into the path (already percent-encoded, or deliberately not). */
const EVIL_SEGMENTS: [string, string][] = [
  ["traversal encoded", encodeURIComponent("../../../../etc/passwd")],
  ["dot dot", ".."],
  ["encoded dots", "%2e%2e"],
  ["traversal with encoded slashes", "..%2F..%2F..%2Fetc"],
  ["double-encoded dots", "%252e%252e%252f"],
  ["NUL", "%00"],
  ["NUL inside", "a%00b"],
  ["invalid percent-encoding", "%zz"],
  ["overlong UTF-8 slash", "%C0%AF"],
  ["invalid UTF-8", "%FF%FE"],
  ["unicode", encodeURIComponent(`${"é".repeat(200)}\u202e🦀`)],
  ["lone surrogate (CESU bytes)", "%ED%A0%80"],
  ["long", "a".repeat(5000)],
  ["very long", "b".repeat(16_000)],
  ["space", "%20"],
  ["encoded slash", "a%2Fb"],
  ["braces", "%7Bid%7D"],
  ["matrix", "x;a=1"],
];

const VERBS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE", "FOO"];

/** Every REST attempt, for every route and credential, and the paths outside the table. */
export function restRequests(creds: [string, Record<string, string>][]): Attempt[] {
  const out: Attempt[] = [];
  for (const route of deriveRoutes(SERVICES)) {
    for (const [credential, auth] of creds) {
      const heavy = credential === "admin" || credential === "none";
      const add = (category: string, what: string, init: Partial<Attempt>) =>
        out.push({
          method: route.httpMethod,
          path: fill(route, "hostile-x1"),
          body: Buffer.alloc(0),
          target: `REST ${route.httpMethod} ${route.template}`,
          protocol: "rest",
          category,
          what,
          credential,
          ...init,
          headers: { ...auth, ...init.headers },
        });
      const takesBody = route.body !== "";
      const json = { "content-type": "application/json" };
      const empty = takesBody ? Buffer.from("{}") : Buffer.alloc(0);
      for (const [what, seg] of EVIL_SEGMENTS) {
        if (route.pathFields.size === 0) break;
        add("path", what, { path: fill(route, seg), headers: json, body: empty });
      }
      if (takesBody) {
        const desc = route.bodyField?.message ?? route.rpc.input;
        for (const [what, body] of jsonBodies(desc, heavy)) add("body", what, { headers: json, body });
        const good = Buffer.from(typedJsonText(desc, "nul"));
        for (const [what, enc, body] of compressedBodies(Buffer.from("{not json"), good, heavy)) {
          add("compressed", `${enc}: ${what}`, { headers: { ...json, "content-encoding": enc }, body });
        }
        for (const [what, type, body] of [
          ["text/plain", "text/plain", good],
          ["form", "application/x-www-form-urlencoded", Buffer.from("id=x&__proto__=1")],
          ["protobuf", "application/proto", typedBinary(desc, "nul") ?? random(32, 10)],
          ["multipart", "multipart/form-data; boundary=x", Buffer.from("--x\r\n\r\n{}\r\n--x--")],
          ["no content type", "", good],
        ]) {
          add("content type", what as string, { headers: type ? { "content-type": type as string } : {}, body: body as Buffer });
        }
      } else {
        add("body", "a body on a route that takes none", { headers: json, body: Buffer.from('{"id": "x"}') });
      }
      for (const verb of VERBS.filter((v) => v !== route.httpMethod)) {
        add("method", verb, { method: verb, headers: json, body: verb === "GET" || verb === "HEAD" ? Buffer.alloc(0) : empty });
      }
      for (const [what, query] of queries(route))
        add("query", what, { path: `${fill(route, "hostile-x1")}?${query}`, headers: json, body: empty });
    }
  }
  for (const [credential, auth] of creds) {
    for (const [what, method, path, http1] of OUTSIDE) {
      const target = "path outside the table";
      out.push({ method, path, headers: auth, body: Buffer.alloc(0), target, protocol: "rest", category: "path", what, credential, http1 });
    }
  }
  return out;
}

/** The route's template with every variable set to `segment` (as given, not encoded again). */
function fill(route: RestRoute, segment: string): string {
  return route.template.replace(/\{[^}]+\}/g, segment);
}

const GENERIC_QUERIES: [string, string][] = [
  ["unknown parameter", "no_such_parameter=1"],
  ["prototype pollution", "__proto__%5Bx%5D=1&constructor.prototype.x=1&__proto__.x=1"],
  ["NUL name and value", "%00=%00"],
  ["invalid percent-encoding", "%zz=%E0%A4"],
  ["empty name", "=x&&&"],
  ["long", `x=${"q".repeat(20_000)}`],
];

/** Query strings for `route`: generic ones, and per field it takes from the query, values of the wrong kind. */
function queries(route: RestRoute): [string, string][] {
  const out = [...GENERIC_QUERIES];
  if (route.body === "*") return out;
  for (const field of route.rpc.input.fields) {
    if (field === route.bodyField || route.pathFields.has(field.name)) continue;
    for (const [what, value] of valuesFor(field)) out.push([`${field.name} ${what}`, `${field.name}=${value}`]);
  }
  out.push(["repeated parameter", `${route.rpc.input.fields[0]?.name ?? "x"}=1&${route.rpc.input.fields[0]?.name ?? "x"}=2`]);
  return out;
}

function valuesFor(field: DescField): [string, string][] {
  if (field.fieldKind === "message" || field.fieldKind === "map") {
    return [
      ["as text", "%7B%7D"],
      ["nested path", `&${field.name}.no_such=1`],
    ];
  }
  return [
    ["NUL", "a%00b"],
    ["negative", "-1"],
    ["huge", "99999999999999999999999"],
    ["1e400", "1e400"],
    ["unicode", encodeURIComponent("é🦀\u202e")],
    ["not a bool", "maybe"],
    ["bad percent-encoding", "%zz"],
  ];
}

// The last, HTTP/1.1 only: HTTP/2 has no absolute-form :path (its parser resets the stream itself).
const OUTSIDE: [string, string, string, boolean?][] = [
  ["bare /v1", "GET", "/v1"],
  ["slashes", "GET", "//v1//resources"],
  ["traversal", "GET", "/v1/../../../etc/passwd"],
  ["encoded traversal", "GET", "/v1/%2e%2e/%2e%2e/etc/passwd"],
  ["NUL path", "GET", "/%00"],
  ["NUL segment", "GET", "/v1/resources/%00"],
  ["many segments", "GET", `/v1/${"a/".repeat(2000)}`],
  ["long segment", "GET", `/v1/${"x".repeat(16_000)}`],
  ["unknown service", "POST", "/skipper.v1.NoSuchService/Nope"],
  ["unknown method", "POST", "/v1/skipper.v1.ResourceService/NoSuchMethod"],
  ["service without method", "POST", "/skipper.v1.ResourceService/"],
  ["health traversal", "GET", "/health/../v1/whoami"],
  ["dashboard traversal", "GET", "/ui/../../etc/passwd"],
  ["dashboard encoded traversal", "GET", "/ui/%2e%2e/%2e%2e/%2e%2e/etc/passwd"],
  ["metrics with NUL query", "GET", "/metrics?x=%00"],
  ["extra segment", "GET", "/v1/resources/tenant/x/explain/extra"],
  ["asterisk", "OPTIONS", "*"],
  ["absolute form", "GET", "https://example.com/v1/health", true],
];
