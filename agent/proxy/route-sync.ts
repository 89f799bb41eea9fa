// Every route's backend holds exactly its service's running containers, at the addresses they
// have now. A deploy makes it so after `up` (executors/start-first.ts); an agent starting makes it
// so for every tenant skippy's file routes, since a reboot or a restart of the engine gives the
// containers new addresses and the file would otherwise keep the dead ones until the next deploy.
//
// At start the engine may still be bringing the containers back: a backend whose service has no
// running container yet is left as it is and looked at again (every few seconds, for a while)
// rather than emptied; the others are set at once.
import type { Logger } from "pino";
import type { ProxyRoute } from "../../gen/skipper/v1/proxy_pb.js";
import { readAppliedSpec } from "../engine/applied-spec.js";
import { readProjectContainers } from "../engine/project-containers.js";
import { runCommand } from "../engine/run-command.js";
import { sleep } from "../engine/sleep.js";
import { backendName, type TenantRoutes } from "./haproxy-config.js";
import type { HostProxy } from "./host-proxy.js";

const DEFAULT_DRAIN_S = 30;

/** A running container of a service, where the proxy reaches it. */
export interface RunningContainer {
  name: string;
  address: string;
}

/** Where the running containers of a project's services come from (the engine; a test's stand-in). */
export interface ContainerSource {
  /** service -> its running containers. */
  running(projectName: string): Promise<Map<string, RunningContainer[]>>;
}

/** A tenant's routed project. */
export interface RoutedProject {
  tenantId: string;
  projectName: string;
  routes: readonly ProxyRoute[];
}

/**
 * Makes each backend of `p`'s routes hold exactly its service's running containers (added, moved
 * to a new address, drained out). With `keepEmpty`, a backend whose service runs nothing is left
 * alone. Returns the services left alone that way.
 */
export async function syncBackends(
  proxy: HostProxy,
  p: RoutedProject,
  containers: ContainerSource,
  opts: { keepEmpty?: boolean; signal?: AbortSignal } = {},
): Promise<string[]> {
  const running = await containers.running(p.projectName);
  const waiting: string[] = [];
  for (const r of uniqueBackends(p.routes)) {
    const be = backendName(p.tenantId, r);
    const now = running.get(r.service) ?? [];
    if (now.length === 0 && opts.keepEmpty) {
      waiting.push(r.service);
      continue;
    }
    const have = await proxy.servers(be);
    // Every running container, known or not: one whose address changed is moved.
    for (const c of now) await proxy.addServer(p.tenantId, be, { name: c.name, address: c.address, port: r.port });
    for (const name of have) if (!now.some((c) => c.name === name)) await proxy.removeServer(p.tenantId, be, name, graceMs(r), opts.signal);
  }
  return waiting;
}

/**
 * At agent start: every tenant skippy's file routes gets its backends set to the containers that
 * run now (its project named by its applied spec). Never throws: a tenant that fails is logged
 * and left to its next deploy. Services with nothing running yet are looked at again every
 * `everyMs` until `settleMs` has passed.
 */
export async function syncRoutesAtStart(
  proxy: HostProxy,
  workDir: string,
  containers: ContainerSource,
  log: Logger,
  opts: { signal?: AbortSignal; settleMs?: number; everyMs?: number } = {},
): Promise<void> {
  const until = Date.now() + (opts.settleMs ?? 120_000);
  const signal = opts.signal ?? new AbortController().signal;
  let pending: TenantRoutes[] = await proxy.routedTenants().catch((e: unknown) => {
    log.warn({ action: "proxy_sync", result: "failed", metadata: { message: String(e) } }, "cannot read skippy's proxy tables");
    return [];
  });
  while (pending.length > 0 && !signal.aborted) {
    const next: typeof pending = [];
    for (const t of pending) {
      const projectName = (await readAppliedSpec(workDir, t.tenantId))?.project_name ?? t.tenantId;
      try {
        // The tenant's routes as they are now, inside its turn: a deploy or a removal since the
        // last round changed them, and a round never puts back routes they took away.
        const waiting = await proxy.exclusive(t.tenantId, async () => {
          const routes = (await proxy.routesOf(t.tenantId))?.routes ?? [];
          if (routes.length === 0) return [];
          return syncBackends(proxy, { tenantId: t.tenantId, projectName, routes }, containers, { keepEmpty: true, signal });
        });
        if (waiting.length > 0) next.push(t);
        else log.info({ action: "proxy_sync", result: "ok", tenant_id: t.tenantId }, "proxy backends set to the running containers");
      } catch (e) {
        log.warn(
          {
            action: "proxy_sync",
            result: "failed",
            tenant_id: t.tenantId,
            metadata: { message: e instanceof Error ? e.message : String(e) },
          },
          "could not set the proxy's backends; the next deploy will",
        );
      }
    }
    pending = next;
    if (pending.length === 0 || Date.now() >= until) break;
    await sleep(opts.everyMs ?? 3000, signal).catch(() => {});
  }
  for (const t of pending)
    log.warn(
      { action: "proxy_sync", result: "waiting", tenant_id: t.tenantId },
      "a routed service runs no container; its backend is left as it was",
    );
}

/** The engine's running containers of a project, with the address of each on its first network (`secrets` blanked from output). */
export function engineContainers(opts: { secrets?: string[]; signal?: AbortSignal } = {}): ContainerSource {
  return {
    async running(projectName) {
      const seen = await readProjectContainers(projectName);
      const out = new Map<string, RunningContainer[]>();
      for (const [service, list] of seen.byService) {
        const names = list.filter((c) => c.state === "running").map((c) => c.name);
        out.set(service, await Promise.all(names.map(async (name) => ({ name, address: await containerAddress(name, opts) }))));
      }
      return out;
    },
  };
}

/** The container's address on its (first) network: where the host's proxy reaches it. */
export async function containerAddress(name: string, opts: { secrets?: string[]; signal?: AbortSignal } = {}): Promise<string> {
  const r = await runCommand("docker", ["inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name], {
    timeoutMs: 30_000,
    secrets: opts.secrets,
    signal: opts.signal,
  });
  const address = r.stdout
    .trim()
    .split(/\s+/)
    .find((a) => a !== "");
  if (r.exitCode !== 0 || !address) throw new Error(`container ${name} has no network address the proxy can reach`);
  return address;
}

/** One route per (service, port): the backends of `routes`. */
export function uniqueBackends(routes: readonly ProxyRoute[]): ProxyRoute[] {
  const seen = new Set<string>();
  return routes.filter((r) => {
    const k = `${r.service}:${r.port}`;
    return seen.has(k) ? false : (seen.add(k), true);
  });
}

/** How long a server of `r`'s backend may drain. */
export function graceMs(r: ProxyRoute): number {
  return (r.drainSeconds || DEFAULT_DRAIN_S) * 1000;
}
