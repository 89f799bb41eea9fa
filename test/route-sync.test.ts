// The proxy's backends after an agent restart (agent/proxy/route-sync.ts), against a real HAProxy
// in master-worker mode: containers that came back at other addresses (a reboot) are moved there,
// ones no longer running leave, and a service with nothing running yet is waited for rather than
// emptied. The engine is a stand-in that says which containers run where (two loopback addresses
// on one port play a container before and after the reboot).
import type { ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer, request, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProxyRouteSchema } from "../gen/skipper/v1/proxy_pb.js";
import { backendName } from "../agent/proxy/haproxy-config.js";
import { HaproxyRuntime } from "../agent/proxy/haproxy-runtime.js";
import { HostProxy } from "../agent/proxy/host-proxy.js";
import { syncRoutesAtStart, type RunningContainer } from "../agent/proxy/route-sync.js";
import { haproxyBinary, startHaproxyMaster, type HaproxyMaster } from "./helpers/haproxy.js";
import { freePort, stopProcess } from "./helpers/processes.js";

const bin = haproxyBinary();
if (!bin) console.warn("!!! route-sync.test.ts SKIPPED: haproxy is not installed (apt-get install haproxy)");

function get(port: number, host: string): Promise<string> {
  return new Promise((resolve) => {
    const req = request({ host: "127.0.0.1", port, path: "/", headers: { host } }, (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve(`${res.statusCode} ${body}`));
    });
    req.on("error", (e) => resolve(`error ${e.message}`));
    req.end();
  });
}

describe("a tenant's exclusive runs on the proxy", () => {
  it("run one after the other, a failure not blocking the next", async () => {
    const p = new HostProxy({
      runtime: { path: "/nonexistent" },
      configPath: "/nonexistent/x.cfg",
      listen: "127.0.0.1:1",
      reload: async () => {},
    });
    const seen: string[] = [];
    const step = (id: string, ms: number, fail = false) =>
      p.exclusive("shop", async () => {
        seen.push(`${id}+`);
        await new Promise((r) => setTimeout(r, ms));
        seen.push(`${id}-`);
        if (fail) throw new Error(id);
      });
    await Promise.allSettled([step("a", 30, true), step("b", 1), p.exclusive("other", async () => seen.push("o")), step("c", 1)]);
    expect(seen.filter((s) => s !== "o")).toEqual(["a+", "a-", "b+", "b-", "c+", "c-"]);
    expect(seen.indexOf("o")).toBeLessThan(seen.indexOf("a-"));
  });
});

describe.skipIf(!bin)("the proxy's backends at agent start (real haproxy, master-worker)", () => {
  let dir: string;
  let hx: HaproxyMaster;
  let haproxy: ChildProcess | undefined;
  let front: number;
  let port: number;
  const ups: Server[] = [];
  const proxy = () =>
    new HostProxy({
      runtime: { path: hx.runtime },
      configPath: hx.configPath,
      listen: `127.0.0.1:${front}`,
      reload: () => new HaproxyRuntime({ path: hx.master }).reload(),
    });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-rs-"));
    front = await freePort();
    port = await freePort();
    for (const [address, id] of [
      ["127.0.0.2", "before"],
      ["127.0.0.3", "after"],
      ["127.0.0.4", "blog"],
    ] as const) {
      const server = createServer((_q, r) => r.end(id));
      await new Promise<void>((ok) => server.listen(port, address, ok));
      ups.push(server);
    }
    hx = await startHaproxyMaster(bin!, dir, { timeoutS: 10 });
    haproxy = hx.child;
  });
  afterAll(async () => {
    if (haproxy) await stopProcess(haproxy);
    for (const u of ups) u.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("moves servers to their containers' new addresses, drops gone ones and waits for a service not yet running", async () => {
    const web = create(ProxyRouteSchema, { host: "shop.example", service: "web", port, drainSeconds: 1 });
    const blog = create(ProxyRouteSchema, { host: "blog.example", service: "blog", port, drainSeconds: 1 });
    const first = proxy();
    await first.setRoutes({ tenantId: "shop", routes: [web], servers: new Map() });
    await first.addServer("shop", backendName("shop", web), { name: "shop-web-1", address: "127.0.0.2", port });
    await first.addServer("shop", backendName("shop", web), { name: "shop-web-2", address: "127.0.0.2", port });
    await first.setRoutes({ tenantId: "blog", routes: [blog], servers: new Map() });
    await first.addServer("blog", backendName("blog", blog), { name: "blog-1", address: "127.0.0.2", port });
    expect(await get(front, "shop.example")).toBe("200 before");

    // The reboot: shop-web-1 runs at another address, shop-web-2 is gone, blog's container comes
    // back only on the third look.
    let blogLooks = 0;
    const running = async (project: string): Promise<Map<string, RunningContainer[]>> => {
      if (project === "shop") return new Map([["web", [{ name: "shop-web-1", address: "127.0.0.3" }]]]);
      blogLooks++;
      return new Map([["blog", blogLooks < 3 ? [] : [{ name: "blog-1", address: "127.0.0.4" }]]]);
    };
    const again = proxy();
    const log = pino({ level: "silent" });
    await syncRoutesAtStart(again, join(dir, "work"), { running }, log, { everyMs: 50, settleMs: 10_000 });

    expect(blogLooks).toBe(3);
    expect(await get(front, "shop.example")).toBe("200 after");
    expect(await get(front, "blog.example")).toBe("200 blog");
    expect(await again.servers(backendName("shop", web))).toEqual(["shop-web-1"]);
    const file = await readFile(hx.configPath, "utf8");
    expect(file).toContain(`server shop-web-1 127.0.0.3:${port}`);
    expect(file).toContain(`server blog-1 127.0.0.4:${port}`);
    expect(file).not.toContain("shop-web-2");
  });

  it("a service that never comes back keeps its backend as it was", async () => {
    const blog = create(ProxyRouteSchema, { host: "blog.example", service: "blog", port, drainSeconds: 1 });
    const none = async () => new Map<string, RunningContainer[]>();
    await syncRoutesAtStart(proxy(), join(dir, "work"), { running: none }, pino({ level: "silent" }), { everyMs: 20, settleMs: 200 });
    expect(await proxy().servers(backendName("blog", blog))).toEqual(["blog-1"]);
  });

  it("a tenant whose routes a removal took away between two rounds is not looked at again", async () => {
    let blogLooks = 0;
    const p = proxy();
    const running = async (project: string): Promise<Map<string, RunningContainer[]>> => {
      if (project === "shop") return new Map([["web", [{ name: "shop-web-1", address: "127.0.0.3" }]]]);
      blogLooks++;
      // The tenant is removed while the sync waits for its container (remove_service drops its routes).
      if (blogLooks === 1) await p.setRoutes({ tenantId: "blog", routes: [], servers: new Map() });
      return new Map([["blog", []]]);
    };
    await syncRoutesAtStart(p, join(dir, "work"), { running }, pino({ level: "silent" }), { everyMs: 20, settleMs: 10_000 });
    expect(blogLooks).toBe(1);
    expect(await proxy().routesOf("blog")).toBeUndefined();
    expect(await readFile(hx.configPath, "utf8")).not.toContain("blog.example");
    expect(await get(front, "shop.example")).toBe("200 after");
  });
});
