// The agent's HAProxy Runtime API client (agent/proxy/haproxy-runtime.ts) against a real HAProxy
// (Debian's): a backend's server is replaced while clients keep requesting through the proxy,
// each response taking a while so that requests are in flight at every switch. Added, drained,
// waited for and deleted as skippy does it, 20 switches lose no request; taken out at once (what
// a stop-first update amounts to), the same load loses requests — so the first result is the
// driver's doing, not luck.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HaproxyRuntime, ProxyError } from "../agent/proxy/haproxy-runtime.js";
import { haproxyBinary } from "./helpers/haproxy.js";
import { httpLoad } from "./helpers/http-load.js";
import { freePort, stopProcess, waitFor } from "./helpers/processes.js";

const bin = haproxyBinary();
if (!bin) console.warn("!!! haproxy-runtime.test.ts SKIPPED: haproxy is not installed (apt-get install haproxy)");

const SLOW_MS = 40;

/** An HTTP server answering `id` after SLOW_MS (so requests are in flight when it is switched). */
async function upstream(id: string): Promise<{ server: Server; port: number }> {
  const server = createServer((_q, s) => setTimeout(() => s.end(id), SLOW_MS));
  const port = await freePort();
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  return { server, port };
}

describe.skipIf(!bin)("HAProxy's runtime API, driven as skippy drives it (real haproxy)", () => {
  let dir: string;
  let haproxy: ChildProcess;
  let rt: HaproxyRuntime;
  let front: number;
  const ups: { server: Server; port: number }[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-hx-"));
    front = await freePort();
    const socket = join(dir, "admin.sock");
    const cfg = [
      "global",
      `  stats socket ${socket} mode 600 level admin`,
      "defaults",
      "  mode http",
      "  timeout connect 2s",
      "  timeout client 30s",
      "  timeout server 30s",
      "frontend fe",
      `  bind 127.0.0.1:${front}`,
      "  default_backend be_web",
      "backend be_web",
      "  balance roundrobin",
      "",
    ].join("\n");
    await writeFile(join(dir, "haproxy.cfg"), cfg);
    haproxy = spawn(bin!, ["-db", "-f", join(dir, "haproxy.cfg")], { stdio: "ignore" });
    rt = new HaproxyRuntime({ path: socket });
    await waitFor(
      "haproxy's runtime socket",
      async () => (await rt.command("show info").catch(() => "")).includes("Name: HAProxy") || undefined,
    );
    for (const id of ["a", "b"]) ups.push(await upstream(id));
  });
  afterAll(async () => {
    if (haproxy) await stopProcess(haproxy);
    for (const u of ups) u.server.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("20 switches with add, drain, wait and delete lose no request; taking servers out at once loses some", async () => {
    await rt.addServer("be_web", "s0", "127.0.0.1", ups[0]!.port);
    const traffic = httpLoad(front, 8);
    let current = "s0";
    for (let i = 1; i <= 20; i++) {
      const next = `s${i}`;
      const before = traffic.tally.ok;
      await rt.addServer("be_web", next, "127.0.0.1", ups[i % 2]!.port);
      await rt.drain("be_web", current);
      expect(await rt.waitDrained("be_web", current, { graceMs: 10_000 })).toBe(0);
      await rt.removeServer("be_web", current);
      current = next;
      // Progress under load between switches, observed, not waited for by the clock.
      await waitFor(`requests through ${next}`, async () => traffic.tally.ok > before + 16 || undefined);
    }
    await traffic.stop();
    expect(traffic.tally.failed, traffic.tally.errors.slice(0, 5).join("; ")).toBe(0);
    expect(traffic.tally.answers.get("a")).toBeGreaterThan(0);
    expect(traffic.tally.answers.get("b")).toBeGreaterThan(0);
    expect((await rt.servers("be_web")).map((s) => s.server)).toEqual([current]);

    // The same load, each switch taking the old server out at once (no drain, no wait).
    const rough = httpLoad(front, 8);
    for (let i = 21; i <= 40; i++) {
      const next = `s${i}`;
      const before = rough.tally.ok + rough.tally.failed;
      await rt.addServer("be_web", next, "127.0.0.1", ups[i % 2]!.port);
      await rt.removeServer("be_web", current);
      current = next;
      await waitFor(`requests through ${next}`, async () => rough.tally.ok + rough.tally.failed > before + 16 || undefined);
    }
    await rough.stop();
    expect(rough.tally.failed).toBeGreaterThan(0);
  });

  it("a refused command says HAProxy's words; names that are not HAProxy's are refused before sending", async () => {
    const e = await rt.drain("be_web", "nope").catch((x: unknown) => x);
    expect(e).toBeInstanceOf(ProxyError);
    expect((e as Error).message).toContain("No such server");
    await expect(rt.command("show info; shutdown")).rejects.toThrow(/line break or ';'/);
    await expect(rt.drain("be web", "x")).rejects.toThrow(/not a name/);
    // Removing a server that is gone is nothing to do (a retried deploy).
    await rt.removeServer("be_web", "gone");
  });
});
