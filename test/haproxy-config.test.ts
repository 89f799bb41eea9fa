// Skippy's HAProxy configuration (agent/proxy/haproxy-config.ts) loaded by a real HAProxy beside a
// host's own base file: requests go where the routes say (exact host before wildcard before any
// host, the longest path prefix first, prefixes on segment boundaries), and the text is the same
// for the same table whatever order it came in.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, request, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProxyRouteSchema } from "../gen/skipper/v1/proxy_pb.js";
import { backendName, renderHaproxyConfig, type TenantRoutes } from "../agent/proxy/haproxy-config.js";
import { haproxyBinary } from "./helpers/haproxy.js";
import { freePort, stopProcess, waitFor } from "./helpers/processes.js";

const bin = haproxyBinary();
if (!bin) console.warn("!!! haproxy-config.test.ts SKIPPED: haproxy is not installed (apt-get install haproxy)");

const route = (host: string, pathPrefix: string, service: string, port = 80) =>
  create(ProxyRouteSchema, { host, pathPrefix, service, port });

function get(port: number, host: string, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, headers: { host } }, (res) => {
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve(`${res.statusCode} ${body}`));
    });
    req.on("error", reject);
    req.end();
  });
}

describe.skipIf(!bin)("skippy's HAProxy configuration (real haproxy)", () => {
  let dir: string;
  let haproxy: ChildProcess;
  let front: number;
  const servers: Server[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-hxc-"));
    front = await freePort();
    const upstream = async (id: string) => {
      const s = createServer((q, r) => r.end(`${id} ${q.url}`));
      const port = await freePort();
      await new Promise<void>((ok) => s.listen(port, "127.0.0.1", ok));
      servers.push(s);
      return { name: id, address: "127.0.0.1", port };
    };
    const [web, api, blog, any] = [await upstream("web"), await upstream("api"), await upstream("blog"), await upstream("any")];
    const tenants: TenantRoutes[] = [
      {
        tenantId: "shop",
        routes: [route("shop.example.com", "", "web"), route("shop.example.com", "/api", "api", 8080)],
        servers: new Map([
          [backendName("shop", { service: "web", port: 80 }), [web]],
          [backendName("shop", { service: "api", port: 8080 }), [api]],
        ]),
      },
      {
        tenantId: "blog",
        routes: [route("*.blog.example", "", "blog"), route("", "", "fallback")],
        servers: new Map([
          [backendName("blog", { service: "blog", port: 80 }), [blog]],
          [backendName("blog", { service: "fallback", port: 80 }), [any]],
        ]),
      },
    ];
    const text = renderHaproxyConfig(`127.0.0.1:${front}`, tenants);
    expect(renderHaproxyConfig(`127.0.0.1:${front}`, [...tenants].reverse())).toBe(text);
    // The host's own file: global settings and defaults; skippy's file is loaded after it.
    const base = [
      "global",
      `  stats socket ${join(dir, "admin.sock")} mode 600 level admin`,
      "defaults",
      "  timeout connect 2s",
      "  timeout client 10s",
      "  timeout server 10s",
      "",
    ];
    await writeFile(join(dir, "base.cfg"), base.join("\n"));
    await writeFile(join(dir, "skipper.cfg"), text);
    haproxy = spawn(bin!, ["-db", "-f", join(dir, "base.cfg"), "-f", join(dir, "skipper.cfg")], { stdio: "ignore" });
    await waitFor("haproxy to answer", async () => (await get(front, "x.example", "/").catch(() => "")) || undefined);
  });
  afterAll(async () => {
    if (haproxy) await stopProcess(haproxy);
    for (const s of servers) s.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("sends each request where its route says", async () => {
    expect(await get(front, "shop.example.com", "/")).toBe("200 web /");
    expect(await get(front, "SHOP.example.com:8443", "/cart")).toBe("200 web /cart");
    expect(await get(front, "shop.example.com", "/api")).toBe("200 api /api");
    expect(await get(front, "shop.example.com", "/api/orders")).toBe("200 api /api/orders");
    expect(await get(front, "shop.example.com", "/apis")).toBe("200 web /apis");
    expect(await get(front, "news.blog.example", "/post/1")).toBe("200 blog /post/1");
    expect(await get(front, "blog.example", "/")).toBe("200 any /");
    expect(await get(front, "other.example", "/x")).toBe("200 any /x");
  });
});
