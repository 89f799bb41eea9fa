// Start-first updates and the proxy's servers, for a deploy with routes (deploy-apply.ts runs
// them after `up`). A start-first service is replaced by hand, in the order docker-rollout and
// Swarm use, with HAProxy switching the traffic:
//
//   up --no-deps --no-recreate --scale S=2 S   the new container beside the old one (new config)
//   ready                                      running, healthy when it has a healthcheck, and
//                                              accepting connections on each routed port
//   proxy: add the new container, drain the old one until HAProxy reports no connection on it
//          (or the route's grace is over: what is left is closed and counted)
//   stop (within its stop_grace_period) and remove the old container
//
// A new container that never gets ready is removed and the old one keeps serving: the deploy
// fails saying so. Then every route's backend is made to hold exactly the service's running
// containers (a stop-first service's new container replaces its old one there).
import { connect } from "node:net";
import type { ProxyRoute, ServiceUpdate } from "../../gen/skipper/v1/proxy_pb.js";
import { readProjectContainers } from "../engine/project-containers.js";
import { runCommand } from "../engine/run-command.js";
import { sleep } from "../engine/sleep.js";
import { backendName } from "../proxy/haproxy-config.js";
import { containerAddress, graceMs, syncBackends, uniqueBackends, engineContainers } from "../proxy/route-sync.js";
import type { HostProxy } from "../proxy/host-proxy.js";
import { composeArgs, runCompose, type Deploy } from "./deploy-state.js";

const DOCKER_TIMEOUT_MS = 30_000;

/** Each service's config hash as Compose computes it for the staged files (`config --hash=*`). */
export async function configHashes(d: Deploy, yml: string, envFile: string): Promise<Map<string, string>> {
  const run = await runCompose(d, composeArgs(d, yml, envFile, "config", "--hash=*"));
  const out = new Map<string, string>();
  if (run.exitCode !== 0) return out;
  for (const line of run.stdout.split("\n")) {
    const [service, hash] = line.trim().split(/\s+/);
    if (service && hash) out.set(service, hash);
  }
  return out;
}

/** Replaces `update.service` start-first; returns why it could not (the old container then still serves). */
export async function replaceStartFirst(
  d: Deploy,
  update: ServiceUpdate,
  proxy: HostProxy | undefined,
  stopGraceSeconds = 10,
): Promise<string | undefined> {
  const s = update.service;
  const old = update.oldContainers;
  const scale = (n: number) =>
    runCompose(
      d,
      composeArgs(d, d.files.composePath, d.files.envPath, "up", "-d", "--no-deps", "--no-recreate", "--scale", `${s}=${n}`, s),
    );
  // A stopped container of the service (an earlier update cut short between stop and rm) would be
  // started again by the scale-up and taken for the new one: it goes first.
  const stale = ((await readProjectContainers(d.projectName)).byService.get(s) ?? []).filter((c) => c.state !== "running");
  if (stale.length > 0) await docker(d, ["rm", "-f", ...stale.map((c) => c.name)]);
  const up = await scale(old.length + 1);
  if (up.exitCode !== 0) return `start-first: compose could not start a new container of ${s}: ${up.stderr.trim().split("\n").pop() ?? ""}`;
  const now = (await readProjectContainers(d.projectName)).byService.get(s) ?? [];
  const fresh = now.filter((c) => !old.includes(c.name)).map((c) => c.name);
  const routes = d.ds.routes.filter((r) => r.service === s);
  const problem = fresh.length === 0 ? `start-first: no new container of ${s} appeared` : await untilReady(d, fresh, routes);
  if (problem) {
    if (fresh.length > 0) await docker(d, ["rm", "-f", ...fresh]);
    await scale(old.length);
    return `${problem}; it was removed and ${old.join(", ")} keeps serving`;
  }
  const started = Date.now();
  let cut = 0;
  if (proxy) {
    for (const r of uniqueBackends(routes)) {
      const be = backendName(d.tenantId, r);
      for (const name of fresh) await proxy.addServer(d.tenantId, be, { name, address: await addressOf(d, name), port: r.port });
      for (const name of old) cut += (await proxy.removeServer(d.tenantId, be, name, graceMs(r), d.ctx.signal)).cut;
    }
  }
  const drainMs = Date.now() - started;
  await docker(d, ["stop", "--time", String(stopGraceSeconds), ...old], stopGraceSeconds * 1000 + 15_000);
  await docker(d, ["rm", "-f", ...old]);
  // Compose keeps no scale of its own: with the old container gone, the next plain `up` finds the
  // one it expects (its config hash matches) and leaves it, so no `--scale S=1` round is paid here.
  update.newContainers = fresh;
  update.drainMs = BigInt(drainMs);
  update.connectionsCut = cut;
  return undefined;
}

/**
 * Makes every route's backend hold exactly its service's running containers: the proxy first
 * learns the tenant's routes (a reload when a backend is new), then missing containers are added
 * and gone ones drained out (proxy/route-sync.ts).
 */
export async function routeServers(d: Deploy, proxy: HostProxy): Promise<void> {
  await proxy.setRoutes({ tenantId: d.tenantId, routes: [...d.ds.routes], servers: new Map() });
  const engine = engineContainers({ secrets: d.hidden, signal: d.ctx.signal });
  await syncBackends(proxy, { tenantId: d.tenantId, projectName: d.projectName, routes: d.ds.routes }, engine, { signal: d.ctx.signal });
}

// Running, healthy when it has a healthcheck, and accepting connections on every routed port.
async function untilReady(d: Deploy, names: string[], routes: ProxyRoute[]): Promise<string | undefined> {
  const until = Date.now() + d.ctx.readyTimeoutMs;
  for (const name of names) {
    for (;;) {
      const state = await inspectState(d, name);
      const health = state.health;
      if (state.status !== "running" && state.status !== "created")
        return `start-first: the new container ${name} is ${state.status || "gone"}`;
      if (health === "unhealthy") return `start-first: the new container ${name} is unhealthy`;
      if (state.status === "running" && (health === "" || health === "healthy")) {
        const address = await addressOf(d, name);
        const closed = [];
        for (const r of routes) if (!(await accepts(address, r.port))) closed.push(r.port);
        if (closed.length === 0) break;
      }
      if (Date.now() > until || d.ctx.signal?.aborted)
        return `start-first: the new container ${name} was not ready within ${d.ctx.readyTimeoutMs} ms (${state.status}${health ? `, ${health}` : ""})`;
      await sleep(200, d.ctx.signal ?? new AbortController().signal);
    }
  }
  return undefined;
}

async function inspectState(d: Deploy, name: string): Promise<{ status: string; health: string }> {
  const r = await docker(d, ["inspect", "--format", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}", name]);
  const [status = "", health = ""] = r.exitCode === 0 ? r.stdout.trim().split(" ") : [];
  return { status, health };
}

// The container's address on its (first) network, its output's secrets blanked.
function addressOf(d: Deploy, name: string): Promise<string> {
  return containerAddress(name, { secrets: d.hidden, signal: d.ctx.signal });
}

function accepts(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port, timeout: 1000 });
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.on("connect", () => done(true));
    s.on("error", () => done(false));
    s.on("timeout", () => done(false));
  });
}

function docker(d: Deploy, args: string[], timeoutMs = DOCKER_TIMEOUT_MS) {
  return runCommand("docker", args, { timeoutMs, secrets: d.hidden, signal: d.ctx.signal });
}
