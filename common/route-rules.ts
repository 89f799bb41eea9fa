// What a tenant's proxy route (TenantSpec.routes) may hold and when two routes claim the same
// requests: one set of rules for the controller, which checks them when a tenant is written, and
// for the node, which checks them again before it writes a route into HAProxy's file (it takes a
// file-breaking word from no one).
//
// A host is exact ("shop.example.com"), a wildcard ("*.example.com": every name below it, not the
// name itself) or empty (any host). A path prefix matches on segment boundaries, and "/api/" and
// "/api" are one prefix, as "" and "/" are.
import type { ProxyRoute } from "../gen/skipper/v1/proxy_pb.js";

const HOST = /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;
const MAX_HOST = 253;
// No quote, '$', '#', backslash or space: the prefix is written into HAProxy's file on the nodes.
const PATH_PREFIX = /^\/[A-Za-z0-9._~!&()*+,;=:@%/-]{0,255}$/;
const SERVICE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$/;

/** Why `host` is not a route's host ("" is any host, and fine), or undefined. */
export function routeHostProblem(host: string): string | undefined {
  if (host === "" || (host.length <= MAX_HOST && HOST.test(host))) return undefined;
  return `${JSON.stringify(host.slice(0, 64))} is not a host name (lowercase; "*.example.com" for subdomains)`;
}

/** Why `prefix` is not a route's path prefix ("" is every path), or undefined. */
export function routePathProblem(prefix: string): string | undefined {
  if (prefix === "" || PATH_PREFIX.test(prefix)) return undefined;
  return `${JSON.stringify(prefix.slice(0, 64))} must start with '/' and hold only URL path characters (at most 256), no quotes, '$', '#' or spaces`;
}

/** Whether `service` can name a compose service. */
export function isRouteService(service: string): boolean {
  return SERVICE.test(service);
}

/** Whether `port` is a container port. */
export function isRoutePort(port: number): boolean {
  return Number.isInteger(port) && port >= 1 && port <= 65535;
}

/** Why `r` cannot go into HAProxy's file (host, path, service and port), or undefined. */
export function routeProblem(r: ProxyRoute): string | undefined {
  const problem = routeHostProblem(r.host) ?? routePathProblem(r.pathPrefix);
  if (problem) return `route ${problem}`;
  if (!isRouteService(r.service) || !isRoutePort(r.port)) return `route to ${r.service}:${r.port} names no service port`;
  return undefined;
}

/** "/api/" and "/api" are one prefix; "" and "/" are every path. */
export function normalPrefix(p: string): string {
  const t = p.replace(/\/+$/, "");
  return t === "" ? "/" : t;
}

/**
 * Whether some request's host is matched by both hosts: the same host, any host beside any other,
 * or a wildcard and a name (or narrower wildcard) below it ("*.example.com" and "a.example.com").
 */
export function hostsOverlap(a: string, b: string): boolean {
  const covers = (wild: string, h: string) => wild.startsWith("*.") && h.endsWith(wild.slice(1));
  return a === b || a === "" || b === "" || covers(a, b) || covers(b, a);
}

/**
 * Whether two routes of different tenants claim some request alike: their hosts overlap and one
 * prefix covers the other (the same, or one a whole-segment prefix of the other: "/" covers
 * "/admin", "/api" covers "/api/v2" but not "/apis"). Across tenants every such overlap is a
 * clash, since the more specific route takes the other's requests: a tenant must not carve
 * "shop.example.com/admin" out of another's "shop.example.com/". Within a tenant only the same host
 * and prefix twice is one (a narrower route beside a wider one is how a tenant says "this apart").
 */
export function routesClash(a: Pick<ProxyRoute, "host" | "pathPrefix">, b: Pick<ProxyRoute, "host" | "pathPrefix">): boolean {
  return hostsOverlap(a.host, b.host) && prefixesOverlap(normalPrefix(a.pathPrefix), normalPrefix(b.pathPrefix));
}

// Normalised prefixes: equal, or one ends where a segment of the other begins.
function prefixesOverlap(a: string, b: string): boolean {
  const covers = (wide: string, narrow: string) => wide === "/" || narrow === wide || narrow.startsWith(`${wide}/`);
  return covers(a, b) || covers(b, a);
}

/** "shop.example.com/api", "any host/": how a route's host and prefix are named in messages. */
export function routeWhere(r: Pick<ProxyRoute, "host" | "pathPrefix">): string {
  return `${r.host || "any host"}${normalPrefix(r.pathPrefix)}`;
}
