// Skippy's part of the host's HAProxy configuration: one frontend that sends each tenant route's
// requests to a backend of its own, and those backends with the servers (containers) they have
// now. Pure: the same routes and servers give the same bytes, so an unchanged table never
// rewrites the file or reloads the proxy. Servers change at run time through the Runtime API
// (haproxy-runtime.ts); the file lists them too, so that a reload or a restart of HAProxy starts
// with the servers that run.
//
// Which route wins: an exact host before a wildcard before any host, then the longest path
// prefix; a prefix matches on segment boundaries ("/api" takes /api and /api/x, not /apis).
import type { ProxyRoute } from "../../gen/skipper/v1/proxy_pb.js";

/** A backend server: a container of the routed service. */
export interface BackendServer {
  name: string;
  address: string;
  port: number;
}

/** One tenant's routes and, per backend, its servers now. */
export interface TenantRoutes {
  tenantId: string;
  routes: ProxyRoute[];
  /** backend name (backendName) -> servers. */
  servers: Map<string, BackendServer[]>;
}

/** The backend a route's requests go to: one per (tenant, service, port). */
export function backendName(tenantId: string, r: Pick<ProxyRoute, "service" | "port">): string {
  return `skp_${tenantId}_${r.service}_${r.port}`.replace(/[^A-Za-z0-9_.-]/g, "_").slice(0, 127);
}

/** The configuration text for `listen` ("0.0.0.0:80") and every tenant's routes. */
export function renderHaproxyConfig(listen: string, tenants: readonly TenantRoutes[]): string {
  const routes = tenants
    .flatMap((t) => t.routes.map((r) => ({ tenantId: t.tenantId, r })))
    .sort((a, b) => specificity(b.r) - specificity(a.r) || key(a).localeCompare(key(b)));
  const out = [
    "# Written by skippy from its tenants' routes; rewritten on every change: do not edit.",
    "frontend skipper",
    `  bind ${listen}`,
    "  mode http",
    "  option forwardfor",
    "  http-request set-var(txn.skp_host) req.hdr(host),field(1,:),lower",
  ];
  routes.forEach(({ tenantId, r }, i) => {
    const conds: string[] = [];
    if (r.host !== "") {
      out.push(
        r.host.startsWith("*.")
          ? `  acl skp_h${i} var(txn.skp_host) -m end ${r.host.slice(1)}`
          : `  acl skp_h${i} var(txn.skp_host) -m str ${r.host}`,
      );
      conds.push(`skp_h${i}`);
    }
    const prefix = r.pathPrefix.replace(/\/+$/, "");
    if (prefix !== "") {
      out.push(`  acl skp_p${i} path -m str ${prefix}`, `  acl skp_p${i} path -m beg ${prefix}/`);
      conds.push(`skp_p${i}`);
    }
    out.push(`  use_backend ${backendName(tenantId, r)}${conds.length > 0 ? ` if ${conds.join(" ")}` : ""}`);
  });
  const backends = new Map<string, BackendServer[]>();
  for (const t of tenants)
    for (const r of t.routes) backends.set(backendName(t.tenantId, r), t.servers.get(backendName(t.tenantId, r)) ?? []);
  for (const [name, servers] of [...backends].sort(([a], [b]) => a.localeCompare(b))) {
    out.push("", `backend ${name}`, "  mode http", "  balance roundrobin");
    for (const s of [...servers].sort((a, b) => a.name.localeCompare(b.name))) out.push(`  server ${s.name} ${s.address}:${s.port}`);
  }
  return `${out.join("\n")}\n`;
}

// Exact hosts first, then wildcards, then any host; within each, longer prefixes first.
function specificity(r: ProxyRoute): number {
  const host = r.host === "" ? 0 : r.host.startsWith("*.") ? 1 : 2;
  return host * 1000 + r.pathPrefix.replace(/\/+$/, "").length;
}

function key(x: { tenantId: string; r: ProxyRoute }): string {
  return `${x.r.host} ${x.r.pathPrefix} ${x.tenantId}`;
}
