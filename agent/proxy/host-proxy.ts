// The host's HAProxy as skippy drives it: its own configuration file (haproxy-config.ts), written
// and reloaded only when the set of frontends and backends changes, and each backend's servers
// changed at run time (haproxy-runtime.ts), the file rewritten after so that a reload or restart
// starts with the servers that run. A server leaves only after a drain: HAProxy stops sending it
// new connections and skippy waits until it reports none left, or until the route's grace is
// over, when the rest are closed (and counted).
import { readFile } from "node:fs/promises";
import { fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { ProxyRouteSchema } from "../../gen/skipper/v1/proxy_pb.js";
import { writeFileAtomic } from "../engine/durable-file.js";
import { routeProblem, routesClash, routeWhere } from "../../common/route-rules.js";
import { backendName, renderHaproxyConfig, type BackendServer, type TenantRoutes } from "./haproxy-config.js";
import { HaproxyRuntime, ProxyError, ProxyRefused, type RuntimeAddress } from "./haproxy-runtime.js";

export interface HostProxyOptions {
  /** The Runtime API of the worker (HAProxy's `stats socket … level admin`). */
  runtime: RuntimeAddress;
  /** The file skippy writes (the host's HAProxy loads it after its own: `-f haproxy.cfg -f <this>`). */
  configPath: string;
  /** Where skippy's frontend listens, e.g. "0.0.0.0:80". */
  listen: string;
  /** Makes HAProxy read its files again without dropping a connection (its master CLI's `reload`, or a command). */
  reload: () => Promise<void>;
}

/** What taking a server out did. */
export interface Drained {
  server: string;
  drainMs: number;
  /** Connections still open when the grace ended, closed then (0: none was cut). */
  cut: number;
}

export class HostProxy {
  readonly runtime: HaproxyRuntime;
  /** Every tenant's routes and servers as last written (kept in `<configPath>.json`: an agent restarted knows them all). */
  private tables?: Map<string, TenantRoutes>;
  /** Per tenant, the end of the last `exclusive` run queued. */
  private readonly busy = new Map<string, Promise<void>>();

  constructor(private readonly opts: HostProxyOptions) {
    this.runtime = new HaproxyRuntime(opts.runtime);
  }

  /** "haproxy 2.6.12" (NodeCapabilities.proxy), or throws when HAProxy does not answer. */
  async describe(): Promise<string> {
    const info = await this.runtime.command("show info");
    const v = /^Version:\s*(\S+)/m.exec(info)?.[1];
    return `haproxy ${v ?? "(unknown version)"}`;
  }

  /**
   * Makes `tenant`'s routes part of the configuration (its backends keep the servers they have);
   * writes and reloads only when the text changes, then waits until HAProxy serves the new backends.
   */
  async setRoutes(tenant: TenantRoutes): Promise<void> {
    const tables = await this.load();
    for (const r of tenant.routes) {
      const problem = routeProblem(r);
      if (problem) throw new ProxyRefused(problem);
      // A host and prefix another tenant on this node routes is its: never taken over (the
      // controller refuses the same when a tenant is written; this node holds what it already has).
      const other = [...tables.values()].find((t) => t.tenantId !== tenant.tenantId && t.routes.some((o) => routesClash(o, r)));
      if (other) throw new ProxyRefused(`${routeWhere(r)} overlaps a route of tenant ${other.tenantId} on this node`);
    }
    const was = tables.get(tenant.tenantId);
    // The servers of backends the routes still name (one no longer named forgets its servers).
    const named = new Set(tenant.routes.map((r) => backendName(tenant.tenantId, r)));
    const servers = new Map(tenant.servers);
    for (const [b, s] of was?.servers ?? []) if (!servers.has(b) && named.has(b)) servers.set(b, s);
    if (tenant.routes.length === 0) tables.delete(tenant.tenantId);
    else tables.set(tenant.tenantId, { ...tenant, servers });
    await this.write(true);
  }

  /** Every tenant with routes in skippy's file, as recorded. */
  async routedTenants(): Promise<TenantRoutes[]> {
    return [...(await this.load()).values()];
  }

  /**
   * Runs `fn` while no other `exclusive` call of the same tenant runs (a deploy switching its
   * traffic, the sync at start): one would otherwise put back a server the other is draining.
   */
  async exclusive<T>(tenantId: string, fn: () => Promise<T>): Promise<T> {
    const before = this.busy.get(tenantId) ?? Promise.resolve();
    const run = before.then(fn, fn);
    const settled = run.then(
      () => {},
      () => {},
    );
    this.busy.set(tenantId, settled);
    try {
      return await run;
    } finally {
      if (this.busy.get(tenantId) === settled) this.busy.delete(tenantId);
    }
  }

  /** The routes and servers recorded for `tenantId`. */
  async routesOf(tenantId: string): Promise<TenantRoutes | undefined> {
    return (await this.load()).get(tenantId);
  }

  /** The servers `backend` has now (at run time). */
  async servers(backend: string): Promise<string[]> {
    return (await this.runtime.servers(backend)).map((s) => s.server);
  }

  /** Adds `server` to `backend` (enabled at once) and records it in the file. */
  async addServer(tenantId: string, backend: string, server: BackendServer): Promise<void> {
    await this.load();
    await this.runtime.addServer(backend, server.name, server.address, server.port);
    this.record(tenantId, backend, (list) => [...list.filter((s) => s.name !== server.name), server]);
    await this.write(false);
  }

  /** Drains `server` from `backend` (up to `graceMs`), then removes it; gone already: nothing to do. */
  async removeServer(tenantId: string, backend: string, server: string, graceMs: number, signal?: AbortSignal): Promise<Drained> {
    await this.load();
    const started = Date.now();
    let cut = 0;
    if ((await this.servers(backend)).includes(server)) {
      // In the file first: a reload during the drain must not bring it back into rotation.
      this.record(tenantId, backend, (list) => list.map((s) => (s.name === server ? { ...s, disabled: true } : s)));
      await this.write(false);
      await this.runtime.drain(backend, server);
      cut = await this.runtime.waitDrained(backend, server, { graceMs, signal });
      await this.runtime.removeServer(backend, server);
    }
    this.record(tenantId, backend, (list) => list.filter((s) => s.name !== server));
    await this.write(false);
    return { server, drainMs: Date.now() - started, cut };
  }

  private record(tenantId: string, backend: string, f: (list: BackendServer[]) => BackendServer[]): void {
    const t = this.tables?.get(tenantId);
    if (t) t.servers.set(backend, f(t.servers.get(backend) ?? []));
  }

  private async load(): Promise<Map<string, TenantRoutes>> {
    if (this.tables) return this.tables;
    const text = await readFile(this.statePath(), "utf8").catch(() => "");
    const saved = text === "" ? [] : (JSON.parse(text) as SavedTable[]);
    this.tables = new Map(
      saved.map((t) => [
        t.tenantId,
        { tenantId: t.tenantId, routes: t.routes.map((r) => fromJson(ProxyRouteSchema, r)), servers: new Map(Object.entries(t.servers)) },
      ]),
    );
    return this.tables;
  }

  private statePath(): string {
    return `${this.opts.configPath}.json`;
  }

  // The file (and the tables' record) as the tables say; reloads when asked and the text changed.
  private async write(reload: boolean): Promise<void> {
    const tables = [...(await this.load()).values()];
    const saved: SavedTable[] = tables.map((t) => ({
      tenantId: t.tenantId,
      routes: t.routes.map((r) => toJson(ProxyRouteSchema, r) as JsonObject),
      servers: Object.fromEntries(t.servers),
    }));
    await writeFileAtomic(this.statePath(), `${JSON.stringify(saved, null, 2)}\n`, { mode: 0o600 });
    const text = renderHaproxyConfig(this.opts.listen, tables);
    const now = await readFile(this.opts.configPath, "utf8").catch(() => "");
    const want = [...text.matchAll(/^backend (\S+)/gm)].map((m) => m[1]!);
    if (text !== now) await writeFileAtomic(this.opts.configPath, text, { mode: 0o644 });
    // The file may be right and HAProxy not (a reload that failed, or an agent killed between
    // writing and reloading): what HAProxy serves decides, not the file.
    if (!reload || (await this.serves(want))) return;
    const before = await this.workerPid();
    await this.opts.reload();
    await this.untilServed(before, want);
  }

  // Whether HAProxy serves exactly `backends` of skippy's.
  private async serves(backends: string[]): Promise<boolean> {
    return (await this.servedBackends()) === [...backends].sort().join(" ");
  }

  private async servedBackends(): Promise<string> {
    const listed = await this.runtime.command("show backend").catch(() => "");
    return listed
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l.startsWith("skp_"))
      .sort()
      .join(" ");
  }

  private async workerPid(): Promise<string> {
    const info = await this.runtime.command("show info").catch(() => "");
    return /^Pid:\s*(\d+)/m.exec(info)?.[1] ?? "";
  }

  // A reload starts a new worker: done when the runtime socket answers from another process and
  // that one has exactly skippy's backends of the file.
  private async untilServed(before: string, backends: string[]): Promise<void> {
    const until = Date.now() + 30_000;
    const want = [...backends].sort().join(" ");
    for (;;) {
      const pid = await this.workerPid();
      const fresh = pid !== "" && pid !== before;
      const have = fresh ? await this.servedBackends() : "";
      if (fresh && have === want) return;
      if (Date.now() > until)
        throw new ProxyError(`HAProxy did not take its new configuration within 30 s of the reload (backends: ${have || "none"})`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

interface SavedTable {
  tenantId: string;
  routes: JsonObject[];
  servers: Record<string, BackendServer[]>;
}
