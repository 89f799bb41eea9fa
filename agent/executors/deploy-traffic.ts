// The deploy steps around `compose up` that keep traffic flowing (issue 35): which changing
// services are started first (update-plan.ts, with Compose's config hashes of the new files), and
// after `up` the start-first replacements and the proxy's backends (start-first.ts). A deploy
// without routes and without a service asking for start-first pays for none of it.
import { ProxyError, ProxyRefused } from "../proxy/haproxy-runtime.js";
import type { HostProxy } from "../proxy/host-proxy.js";
import { readProjectContainers } from "../engine/project-containers.js";
import { stageSpecRoutes } from "../engine/applied-spec.js";
import { UpdateOrder } from "../../gen/skipper/v1/proxy_pb.js";
import type { DeployOutcome } from "./deploy-context.js";
import { end, type Deploy } from "./deploy-state.js";
import { configHashes, replaceStartFirst, routeServers } from "./start-first.js";
import { planUpdates } from "./update-plan.js";

/** plan the updates: set d.updatePlan when the project has routes or asks for start-first. */
export async function planTheUpdates(d: Deploy): Promise<DeployOutcome | undefined> {
  if (d.ds.routes.length === 0 && !/start-first/.test(d.project.composeFile)) return undefined;
  const hashes = await configHashes(d, d.files.composePath, d.files.envPath);
  d.updatePlan = planUpdates(d.project.composeFile, d.ds.routes, d.before, hashes);
  return undefined;
}

/** switch the traffic: start-first replacements, then every route's backend = its service's running containers. */
export async function switchTraffic(d: Deploy): Promise<DeployOutcome | undefined> {
  const proxy = d.ctx.proxy;
  // Recorded with the spec should it apply: a later restore of it routes as it did.
  await stageSpecRoutes(d.ctx.workDir, d.tenantId, d.ds.specHash ?? "", d.ds.routes);
  // Alone on the tenant's backends: the sync at agent start must not put back a server drained here.
  return proxy ? proxy.exclusive(d.tenantId, () => switchWith(d, proxy)) : switchWith(d, undefined);
}

async function switchWith(d: Deploy, proxy: HostProxy | undefined): Promise<DeployOutcome | undefined> {
  const plan = d.updatePlan;
  // Routes the spec no longer has leave the proxy, though the tenant keeps running.
  if (proxy && d.ds.routes.length === 0 && (await proxy.routesOf(d.tenantId))) {
    try {
      await proxy.setRoutes({ tenantId: d.tenantId, routes: [], servers: new Map() });
    } catch (e) {
      return proxyFailed(d, e);
    }
  }
  if (!plan) return undefined;
  const routed = proxy && d.ds.routes.length > 0 ? proxy : undefined;
  try {
    // The backends exist before a start-first service's new container is added to them.
    if (routed) await routed.setRoutes({ tenantId: d.tenantId, routes: [...d.ds.routes], servers: new Map() });
    for (const u of plan.updates) {
      if (u.order !== UpdateOrder.START_FIRST) continue;
      const why = await replaceStartFirst(d, u, routed, plan.stopGraceSeconds.get(u.service));
      if (why) return end(d, "SERVICES_NOT_RUNNING", why, { composePath: d.files.composePath });
    }
    if (routed) await routeServers(d, routed);
  } catch (e) {
    return proxyFailed(d, e);
  }
  // Stop-first updates: the containers `up` put in place of the old ones.
  const after = await readProjectContainers(d.projectName).catch(() => undefined);
  for (const u of plan.updates)
    if (u.order === UpdateOrder.STOP_FIRST) u.newContainers = (after?.byService.get(u.service) ?? []).map((c) => c.name);
  return undefined;
}

/**
 * A proxy failure as the order's outcome: PROXY_REFUSED (not retried) when the proxy refused what the spec asks (a
 * route another tenant holds here, a configuration HAProxy cannot load), PROXY_UNAVAILABLE (retried) when it did not
 * answer. Anything else is not the proxy's and goes on up.
 */
function proxyFailed(d: Deploy, e: unknown): DeployOutcome {
  if (!(e instanceof ProxyError)) throw e;
  const code = e instanceof ProxyRefused ? "PROXY_REFUSED" : "PROXY_UNAVAILABLE";
  return end(d, code, `the host's proxy: ${e.message}`, { composePath: d.files.composePath });
}
