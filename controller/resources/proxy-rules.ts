// Field rules of a tenant's proxy routes (TenantSpec.routes) and a service's update order, checked
// before anything is written. What a node can do with them (a proxy there, a service that can run
// twice) is the node's to say when it deploys: its result names the order it chose and why.
import { composeServiceNames } from "./compose-rules.js";
import { UpdateOrder, type ProxyRoute } from "../../gen/skipper/v1/proxy_pb.js";
import { invalid } from "../base/errors.js";

const MAX_ROUTES = 64;
const HOST = /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;
// No quote, '$', '#', backslash or space: the prefix is written into HAProxy's file on the nodes.
const PATH_PREFIX = /^\/[A-Za-z0-9._~!&()*+,;=:@%/-]{0,255}$/;
const COMPOSE_SERVICE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$/;
const MAX_DRAIN_SECONDS = 3600;

/** Routes: a host and path prefix, a compose service (of `composeFile` when the tenant has its own) and its port. */
export function checkRoutes(routes: readonly ProxyRoute[], composeFile: string, f: string): void {
  if (routes.length > MAX_ROUTES) fail(f, `may hold at most ${MAX_ROUTES} routes`);
  const defined = composeFile.trim() === "" ? undefined : composeServiceNames(composeFile);
  const seen = new Map<string, number>();
  routes.forEach((r, i) => {
    const at = `${f}[${i}]`;
    if (r.host !== "" && (r.host.length > 253 || !HOST.test(r.host)))
      fail(`${at}.host`, `${JSON.stringify(r.host.slice(0, 64))} is not a host name (lowercase; "*.example.com" for subdomains)`);
    if (r.pathPrefix !== "" && !PATH_PREFIX.test(r.pathPrefix))
      fail(`${at}.path_prefix`, "must start with '/' and hold only URL path characters (at most 256)");
    if (!COMPOSE_SERVICE.test(r.service)) fail(`${at}.service`, "must name a compose service");
    if (defined && !defined.has(r.service)) fail(`${at}.service`, `names ${r.service}, which the tenant's compose file does not define`);
    if (r.port < 1 || r.port > 65535) fail(`${at}.port`, "must be the container's port, 1-65535");
    if (r.drainSeconds > MAX_DRAIN_SECONDS) fail(`${at}.drain_seconds`, `must be at most ${MAX_DRAIN_SECONDS}`);
    const key = `${r.host} ${normalPrefix(r.pathPrefix)}`;
    const first = seen.get(key);
    if (first !== undefined) fail(`${at}`, `matches the same host and path prefix as ${f}[${first}]`);
    seen.set(key, i);
  });
}

/** An update order the contract defines. */
export function checkUpdateOrder(order: UpdateOrder, f: string): void {
  if (!(order in UpdateOrder)) fail(f, "must be STOP_FIRST or START_FIRST");
}

/** "/api/" and "/api" are one prefix; "" and "/" are every path. */
export function normalPrefix(p: string): string {
  const t = p.replace(/\/+$/, "");
  return t === "" ? "/" : t;
}

function fail(field: string, message: string): never {
  throw invalid(`${field} ${message}`, { field });
}
