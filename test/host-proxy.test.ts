// The host's HAProxy as skippy drives it (agent/proxy/host-proxy.ts), against a real HAProxy in
// master-worker mode reloaded through its master CLI: a tenant's routes become a backend after a
// reload, servers come and go at run time, and an agent restarted (a new HostProxy over the same
// files) adds another tenant's routes without losing the first one's, servers included.
import type { ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer, request, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProxyRouteSchema } from "../gen/skipper/v1/proxy_pb.js";
import { backendName } from "../agent/proxy/haproxy-config.js";
import { HaproxyRuntime } from "../agent/proxy/haproxy-runtime.js";
import { HostProxy } from "../agent/proxy/host-proxy.js";
import { haproxyBinary, startHaproxyMaster } from "./helpers/haproxy.js";
import { freePort, stopProcess } from "./helpers/processes.js";

const bin = haproxyBinary();
if (!bin) console.warn("!!! host-proxy.test.ts SKIPPED: haproxy is not installed (apt-get install haproxy)");

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

describe.skipIf(!bin)("the host's HAProxy driven by skippy (real haproxy, master-worker)", () => {
  let dir: string;
  let haproxy: ChildProcess;
  let front: number;
  const ups: { server: Server; port: number }[] = [];
  let proxy: () => HostProxy;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-hp-"));
    front = await freePort();
    for (const id of ["one", "two", "blog"]) {
      const server = createServer((_q, r) => r.end(id));
      const port = await freePort();
      await new Promise<void>((ok) => server.listen(port, "127.0.0.1", ok));
      ups.push({ server, port });
    }
    const hx = await startHaproxyMaster(bin!, dir, { timeoutS: 10 });
    haproxy = hx.child;
    proxy = () =>
      new HostProxy({
        runtime: { path: hx.runtime },
        configPath: hx.configPath,
        listen: `127.0.0.1:${front}`,
        reload: () => new HaproxyRuntime({ path: hx.master }).reload(),
      });
  });
  afterAll(async () => {
    if (haproxy) await stopProcess(haproxy);
    for (const u of ups) u.server.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("routes after a reload, servers at run time, and a restarted agent keeps what the first one set", async () => {
    const p = proxy();
    expect(await p.describe()).toMatch(/^haproxy 2\./);
    const web = create(ProxyRouteSchema, { host: "shop.example", service: "web", port: 80 });
    const be = backendName("shop", web);
    await p.setRoutes({ tenantId: "shop", routes: [web], servers: new Map() });
    await p.addServer("shop", be, { name: "web-1", address: "127.0.0.1", port: ups[0]!.port });
    expect(await get(front, "shop.example")).toBe("200 one");
    await p.addServer("shop", be, { name: "web-2", address: "127.0.0.1", port: ups[1]!.port });
    const gone = await p.removeServer("shop", be, "web-1", 5000);
    expect(gone.cut).toBe(0);
    expect(await get(front, "shop.example")).toBe("200 two");
    expect(await p.servers(be)).toEqual(["web-2"]);
    // The same container name at another address (restarted with a new one): moved, not kept.
    await p.addServer("shop", be, { name: "web-2", address: "127.0.0.1", port: ups[0]!.port });
    expect(await get(front, "shop.example")).toBe("200 one");
    await p.addServer("shop", be, { name: "web-2", address: "127.0.0.1", port: ups[1]!.port });
    expect(await get(front, "shop.example")).toBe("200 two");

    // Restarted: another tenant's route needs a reload; the first tenant's backend keeps web-2.
    const again = proxy();
    const blog = create(ProxyRouteSchema, { host: "blog.example", service: "blog", port: 80 });
    await again.setRoutes({
      tenantId: "blog",
      routes: [blog],
      servers: new Map([[backendName("blog", blog), [{ name: "blog-1", address: "127.0.0.1", port: ups[2]!.port }]]]),
    });
    expect(await get(front, "blog.example")).toBe("200 blog");
    expect(await get(front, "shop.example")).toBe("200 two");
    const file = await readFile(join(dir, "skipper.cfg"), "utf8");
    expect(file).toContain(`server web-2 127.0.0.1:${ups[1]!.port}`);
    expect(file).not.toContain("web-1");
    // A tenant without routes leaves the file (and the proxy, after its reload).
    await again.setRoutes({ tenantId: "blog", routes: [], servers: new Map() });
    expect(await get(front, "blog.example")).toMatch(/^503 /);
    expect(await get(front, "shop.example")).toBe("200 two");
  });
});
