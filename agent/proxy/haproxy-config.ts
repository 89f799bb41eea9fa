// Skippy's part of the host's HAProxy configuration: one frontend that sends each tenant route's
// requests to a backend of its own, and those backends with the servers (containers) they have
// now. Pure: the same routes and servers give the same bytes, so an unchanged table never
// rewrites the file or reloads the proxy. Servers change at run time through the Runtime API
// (haproxy-runtime.ts); the file lists them too, so that a reload or a restart of HAProxy starts
// with the servers that run.
//
// Which route wins: an exact host before a wildcard before any host, then the longest path
// prefix; a prefix matches on segment boundaries ("/api" takes /api and /api/x, not /apis).
import { createHash } from "node:crypto";
import type { ProxyRoute } from "../../gen/skipper/v1/proxy_pb.js";
import { normalPrefix } from "../../common/route-rules.js";

/** A backend server: a container of the routed service. */
export interface BackendServer {
  name: string;
  address: string;
  port: number;
  /** Being drained: written `disabled`, so a reload meanwhile does not send it new connections. */
  disabled?: boolean;
}

/** One tenant's routes and, per backend, its servers now. */
export interface TenantRoutes {
  tenantId: string;
  routes: ProxyRoute[];
  /** backend name (backendName) -> servers. */
  servers: Map<string, BackendServer[]>;
}

/**
 * The backend a route's requests go to: one per (tenant, service, port), named by a hash of the
 * three (ids may hold '_': "a_b"+"c" and "a"+"b_c" must not meet in one backend).
 */
export function backendName(tenantId: string, r: Pick<ProxyRoute, "service" | "port">): string {
  return `skp_${createHash("sha256").update(`${tenantId}\0${r.service}\0${r.port}`).digest("hex").slice(0, 20)}`;
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
    const prefix = normalPrefix(r.pathPrefix);
    if (prefix !== "/") {
      out.push(`  acl skp_p${i} path -m str ${prefix}`, `  acl skp_p${i} path -m beg ${prefix}/`);
      conds.push(`skp_p${i}`);
    }
    out.push(
      `  use_backend ${backendName(tenantId, r)}${conds.length > 0 ? ` if ${conds.join(" ")}` : ""}  # ${tenantId} ${r.service}:${r.port}`,
    );
  });
  const backends = new Map<string, BackendServer[]>();
  const owners = new Map<string, string>();
  for (const t of tenants)
    for (const r of t.routes) {
      backends.set(backendName(t.tenantId, r), t.servers.get(backendName(t.tenantId, r)) ?? []);
      owners.set(backendName(t.tenantId, r), `${t.tenantId} ${r.service}:${r.port}`);
    }
  for (const [name, servers] of [...backends].sort(([a], [b]) => a.localeCompare(b))) {
    out.push("", `backend ${name}  # ${owners.get(name) ?? ""}`, "  mode http", "  balance roundrobin");
    for (const s of [...servers].sort((a, b) => a.name.localeCompare(b.name)))
      out.push(`  server ${s.name} ${s.address.includes(":") ? `[${s.address}]` : s.address}:${s.port}${s.disabled ? " disabled" : ""}`);
  }
  return `${out.join("\n")}\n`;
}

// Exact hosts first, then wildcards, then any host; within each, longer prefixes first.
function specificity(r: ProxyRoute): number {
  const host = r.host === "" ? 0 : r.host.startsWith("*.") ? 1 : 2;
  const prefix = normalPrefix(r.pathPrefix);
  return host * 1000 + (prefix === "/" ? 0 : prefix.length);
}

function key(x: { tenantId: string; r: ProxyRoute }): string {
  return `${x.r.host} ${x.r.pathPrefix} ${x.tenantId}`;
}
