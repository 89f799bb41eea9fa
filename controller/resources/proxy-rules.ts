// Field rules of a tenant's proxy routes (TenantSpec.routes) and a service's update order, checked
// before anything is written (the rules themselves are common/route-rules.ts, which the nodes
// check again), and the one rule across tenants: a host and prefix another tenant routes is its.
// What a node can do with them (a proxy there, a service that can run twice) is the node's to say
// when it deploys: its result names the order it chose and why.
import { composeServiceNames } from "./compose-rules.js";
import { equals } from "@bufbuild/protobuf";
import { ProxyRouteSchema, UpdateOrder, type ProxyRoute } from "../../gen/skipper/v1/proxy_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import {
  isRoutePort,
  isRouteService,
  normalPrefix,
  routeHostProblem,
  routePathProblem,
  routesClash,
  routeWhere,
} from "../../common/route-rules.js";
import { invalid } from "../base/errors.js";
import { eachScannedResource } from "../store/each-page.js";
import type { Store } from "../store/store.js";

const MAX_ROUTES = 64;
const MAX_DRAIN_SECONDS = 3600;

/** Routes: a host and path prefix, a compose service (of `composeFile` when the tenant has its own) and its port. */
export function checkRoutes(routes: readonly ProxyRoute[], composeFile: string, f: string): void {
  if (routes.length > MAX_ROUTES) fail(f, `may hold at most ${MAX_ROUTES} routes`);
  const defined = composeFile.trim() === "" ? undefined : composeServiceNames(composeFile);
  const seen = new Map<string, number>();
  routes.forEach((r, i) => {
    const at = `${f}[${i}]`;
    const host = routeHostProblem(r.host);
    if (host) fail(`${at}.host`, host);
    const path = routePathProblem(r.pathPrefix);
    if (path) fail(`${at}.path_prefix`, path);
    if (!isRouteService(r.service)) fail(`${at}.service`, "must name a compose service");
    if (defined && !defined.has(r.service)) fail(`${at}.service`, `names ${r.service}, which the tenant's compose file does not define`);
    if (!isRoutePort(r.port)) fail(`${at}.port`, "must be the container's port, 1-65535");
    if (r.drainSeconds > MAX_DRAIN_SECONDS) fail(`${at}.drain_seconds`, `must be at most ${MAX_DRAIN_SECONDS}`);
    const key = `${r.host} ${normalPrefix(r.pathPrefix)}`;
    const first = seen.get(key);
    if (first !== undefined) fail(`${at}`, `matches the same host and path prefix as ${f}[${first}]`);
    seen.set(key, i);
  });
}

/**
 * Refuses `routes` of tenant `tenantId` when another tenant routes an overlapping host with the
 * same path prefix (common/route-rules.ts routesClash: "*.example.com" covers "a.example.com",
 * any host covers every host). Refused whatever the placement: tenants move between nodes, and
 * on a shared node the more specific route would take the other tenant's requests. The error
 * names the other tenant (details.route_owner) and its route.
 */
export async function checkRoutesUnclaimed(
  store: Pick<Store, "scanResources">,
  tenantId: string,
  routes: readonly ProxyRoute[],
  f: string,
): Promise<void> {
  if (routes.length === 0) return;
  for await (const other of eachScannedResource(store, { resourceType: "tenant" })) {
    if (other.id === tenantId || other.desiredState?.kind.case !== "tenant") continue;
    for (const theirs of other.desiredState.kind.value.routes) {
      const i = routes.findIndex((r) => routesClash(r, theirs));
      if (i < 0) continue;
      throw invalid(
        `${f}[${i}] ${routeWhere(routes[i]!)} overlaps tenant ${other.id}'s route ${routeWhere(theirs)}: a host and path prefix are one tenant's`,
        { field: `${f}[${i}]`, route_owner: other.id, route_owner_host: theirs.host, route_owner_path_prefix: theirs.pathPrefix },
      );
    }
  }
}

/** checkRoutesUnclaimed for a tenant written (`before` absent: created) when its routes are new or changed. */
export async function checkTenantRoutesUnclaimed(
  store: Pick<Store, "scanResources">,
  before: Resource | undefined,
  next: Resource,
): Promise<void> {
  if (next.desiredState?.kind.case !== "tenant") return;
  const routes = next.desiredState.kind.value.routes;
  const old = before?.desiredState?.kind.case === "tenant" ? before.desiredState.kind.value.routes : [];
  // Unchanged routes were checked when written: an unrelated change is not held to them.
  if (routes.length === old.length && routes.every((r, i) => equals(ProxyRouteSchema, r, old[i]!))) return;
  await checkRoutesUnclaimed(store, next.id, routes, "desired_state.tenant.routes");
}

/** An update order the contract defines. */
export function checkUpdateOrder(order: UpdateOrder, f: string): void {
  if (!(order in UpdateOrder)) fail(f, "must be STOP_FIRST or START_FIRST");
}

function fail(field: string, message: string): never {
  throw invalid(`${field} ${message}`, { field });
}
