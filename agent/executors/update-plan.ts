// Which services a deploy updates start-first, and why each changing service gets the order it
// gets. Pure: the compose file, the tenant's routes, the containers before `up` and the config
// hash Compose gives each service now. A service changes when it runs and a container of it has
// another config hash; it is started first only when it asks to (deploy.update_config.order:
// start-first) and can run twice on this host: no container_name (two containers cannot share
// it), no published host port (two cannot bind it: its route is how traffic reaches it), its own
// network namespace (no network_mode host, service:… or container:…: a second container there
// shares the first one's ports), no fixed address (ipv4_address, ipv6_address, mac_address: two
// containers cannot hold one), one replica. Everything else is stop-first, Compose's own `up`,
// and the result says why.
import { parse } from "yaml";
import { create } from "@bufbuild/protobuf";
import { ServiceUpdateSchema, UpdateOrder, type ProxyRoute, type ServiceUpdate } from "../../gen/skipper/v1/proxy_pb.js";
import type { ProjectContainers } from "../engine/project-containers.js";

export interface UpdatePlan {
  /** Services replaced start-first (their containers are left alone by the deploy's `up`). */
  startFirst: string[];
  /** Every changing service with its order and why (the result's details.updates). */
  updates: ServiceUpdate[];
  /** Start-first services: how long their old container may take to stop (its stop_grace_period, default 10 s). */
  stopGraceSeconds: Map<string, number>;
}

interface ComposeService {
  container_name?: unknown;
  stop_grace_period?: unknown;
  ports?: unknown;
  scale?: unknown;
  network_mode?: unknown;
  mac_address?: unknown;
  networks?: unknown;
  deploy?: { replicas?: unknown; update_config?: { order?: unknown } };
}

/** The plan for `composeFile`, given the containers before `up` and each service's config hash now. */
export function planUpdates(
  composeFile: string,
  routes: readonly ProxyRoute[],
  before: ProjectContainers | undefined,
  hashes: ReadonlyMap<string, string>,
): UpdatePlan {
  const services = servicesOf(composeFile);
  const out: UpdatePlan = { startFirst: [], updates: [], stopGraceSeconds: new Map() };
  for (const [name, svc] of [...services].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const running = (before?.byService.get(name) ?? []).filter((c) => c.state === "running");
    const hash = hashes.get(name);
    if (running.length === 0 || hash === undefined || running.every((c) => c.configHash === hash)) continue;
    const why = startFirstProblem(name, svc, routes);
    const order = why === undefined ? UpdateOrder.START_FIRST : UpdateOrder.STOP_FIRST;
    if (order === UpdateOrder.START_FIRST) out.startFirst.push(name);
    if (order === UpdateOrder.START_FIRST) out.stopGraceSeconds.set(name, graceSeconds(svc.stop_grace_period));
    out.updates.push(
      create(ServiceUpdateSchema, {
        service: name,
        order,
        reason:
          why === undefined ? `start-first: ${routedAs(name, routes) || "asked for, no route (nothing to switch)"}` : `stop-first: ${why}`,
        oldContainers: running.map((c) => c.name),
      }),
    );
  }
  return out;
}

// Why `name` cannot be started first (undefined: it can).
function startFirstProblem(name: string, svc: ComposeService, routes: readonly ProxyRoute[]): string | undefined {
  if (svc.deploy?.update_config?.order !== "start-first") return "no update order declared (deploy.update_config.order)";
  if (svc.container_name !== undefined) return `sets container_name ${String(svc.container_name)}, which two containers cannot share`;
  const published = hostPorts(svc.ports);
  if (published.length > 0)
    return `publishes host port ${published.join(", ")}, which two containers cannot bind${routedAs(name, routes) ? " (its route reaches it without one)" : ""}`;
  const mode = typeof svc.network_mode === "string" ? svc.network_mode : "";
  if (mode === "host" || mode.startsWith("service:") || mode.startsWith("container:"))
    return `uses network_mode ${mode}, whose ports a second container cannot bind beside the first`;
  const fixed = fixedAddresses(svc);
  if (fixed.length > 0) return `sets ${fixed.join(", ")}, which two containers cannot hold`;
  const replicas = Number(svc.deploy?.replicas ?? svc.scale ?? 1);
  if (replicas !== 1) return `runs ${replicas} replicas (start-first takes one)`;
  return undefined;
}

function routedAs(name: string, routes: readonly ProxyRoute[]): string {
  return routes
    .filter((r) => r.service === name)
    .map((r) => `behind route ${r.host || "*"}${r.pathPrefix || "/"} -> :${r.port}`)
    .join(", ");
}

// Host ports a service's `ports:` publishes ("8080:80", "127.0.0.1:8080:80", {published: 8080}).
function hostPorts(ports: unknown): string[] {
  if (!Array.isArray(ports)) return [];
  return ports.flatMap((p) => {
    if (typeof p === "object" && p !== null) {
      const published = (p as { published?: unknown }).published;
      return published === undefined || published === "" ? [] : [String(published)];
    }
    const parts = String(p).split("/")[0]!.split(":");
    return parts.length >= 2 && parts[parts.length - 2] !== "" ? [parts[parts.length - 2]!] : [];
  });
}

// The fixed addresses a service asks for: its mac_address, and per network ipv4_address,
// ipv6_address or mac_address ("ipv4_address 10.0.0.5 on front").
function fixedAddresses(svc: ComposeService): string[] {
  const out = svc.mac_address !== undefined && svc.mac_address !== null ? [`mac_address ${String(svc.mac_address)}`] : [];
  // A list of network names fixes nothing; a map may give each network its addresses.
  if (typeof svc.networks !== "object" || svc.networks === null || Array.isArray(svc.networks)) return out;
  for (const [net, cfg] of Object.entries(svc.networks as Record<string, unknown>)) {
    if (typeof cfg !== "object" || cfg === null) continue;
    for (const k of ["ipv4_address", "ipv6_address", "mac_address"]) {
      const v = (cfg as Record<string, unknown>)[k];
      if (v !== undefined && v !== null && v !== "") out.push(`${k} ${String(v)} on ${net}`);
    }
  }
  return out;
}

// Compose's stop_grace_period ("1s", "1m30s", "500ms") in whole seconds (at least 1); 10 unset.
function graceSeconds(v: unknown): number {
  if (v === undefined || v === null) return 10;
  let ms = 0;
  for (const m of String(v).matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g))
    ms += Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as "ms"];
  return ms > 0 ? Math.max(1, Math.ceil(ms / 1000)) : 10;
}

function servicesOf(composeFile: string): Map<string, ComposeService> {
  try {
    const doc = parse(composeFile) as { services?: Record<string, ComposeService | null> } | null;
    return new Map(Object.entries(doc?.services ?? {}).map(([k, v]) => [k, v ?? {}]));
  } catch {
    return new Map();
  }
}
