// What HAProxy's answers mean to skippy's Runtime API client (agent/proxy/haproxy-runtime.ts),
// against a stand-in socket that answers as HAProxy does (the words are Debian's 2.6 and the
// 2.7+ master CLI's): no byte at all is no answer, a command that reports its success succeeds
// only when it says so, `del server` is asked again while the server is still leaving, and the
// master's `reload` is read in both its 2.6 form (nothing) and its 2.7+ form (Success=1/0).
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HaproxyRuntime, ProxyError, ReloadRefused } from "../agent/proxy/haproxy-runtime.js";

let dir: string;
let server: Server;
let path: string;
/** The commands received, in order. */
const heard: string[] = [];
/** The answers to give, per command (first match), each taken once; then "\n". */
let script: [RegExp, string][] = [];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "skipper-hxu-"));
  path = join(dir, "admin.sock");
  server = createServer((s) => {
    let got = "";
    s.setEncoding("utf8");
    s.on("data", (d: string) => {
      got += d;
      if (!got.endsWith("\n")) return;
      const cmd = got.trim();
      heard.push(cmd);
      const i = script.findIndex(([r]) => r.test(cmd));
      const answer = i < 0 ? "\n" : script.splice(i, 1)[0]![1];
      s.end(answer);
    });
  });
  await new Promise<void>((ok) => server.listen(path, ok));
});
afterAll(async () => {
  server?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

function scripted(...answers: [RegExp, string][]): HaproxyRuntime {
  heard.length = 0;
  script = answers;
  return new HaproxyRuntime({ path }, 2000);
}

const STAT = "# pxname,svname,scur,status,stot\nbe,old,0,MAINT,9\nbe,BACKEND,0,UP,9\n";

describe("HAProxy's runtime answers", () => {
  it("no byte at all is no answer, though HAProxy's empty success is a line break", async () => {
    await expect(scripted([/^enable/, ""]).command("enable server be/a")).rejects.toThrow(/without answering/);
    await expect(scripted().command("enable server be/a")).resolves.toBe("\n");
  });

  it("add server and del server succeed only when HAProxy says so", async () => {
    await expect(scripted([/^add server/, "\n"]).command("add server be/a 10.0.0.1:80")).rejects.toThrow(/did not confirm/);
    await expect(scripted([/^add server/, "New server registered.\n\n"]).command("add server be/a 10.0.0.1:80")).resolves.toMatch(
      /registered/,
    );
    await expect(
      scripted([/^add server/, "Already exists a server with the same name in backend.\n\n"]).command("add server be/a 10.0.0.1:80"),
    ).rejects.toThrow(/refused/);
  });

  it("del server is asked again while the server still has sessions or is not yet in maintenance", async () => {
    const rt = scripted(
      [/^show stat/, STAT],
      [/^del server/, "Server still has connections attached to it, cannot remove it.\n"],
      [/^del server/, "Only servers in maintenance mode can be deleted.\n"],
      [/^del server/, "Server deleted.\n"],
    );
    await rt.removeServer("be", "old");
    expect(heard.filter((c) => c.startsWith("del server"))).toHaveLength(3);
    // Back out of maintenance (a reload meanwhile): put in maintenance again before asking again.
    expect(heard.filter((c) => c === "set server be/old state maint")).toHaveLength(2);
  });

  it("del server gives up with HAProxy's words when the server never leaves", async () => {
    const stuck = Array.from(
      { length: 200 },
      () => [/^del server/, "Server still has connections attached to it, cannot remove it.\n"] as [RegExp, string],
    );
    const rt = scripted([/^show stat/, STAT], ...stuck);
    const err = await rt.removeServer("be", "old").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ProxyError);
    expect(String(err)).toMatch(/still has connections/);
  });

  it("the master's reload: 2.6's silence and 2.7's Success=1 succeed, Success=0 is refused with HAProxy's words", async () => {
    await expect(scripted([/^reload/, ""]).reload()).resolves.toBeUndefined();
    await expect(scripted([/^reload/, "Success=1\n--\n[NOTICE]   (1) : Loading success.\n"]).reload()).resolves.toBeUndefined();
    const failed = await scripted([
      /^reload/,
      "Success=0\n--\n[ALERT]    (7) : config : parsing [skipper.cfg:3] : unknown keyword 'bnd'.\n[ALERT]    (7) : config : Fatal errors found in configuration.\n",
    ])
      .reload()
      .catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(ReloadRefused);
    expect(String(failed)).toMatch(/unknown keyword 'bnd'/);
    await expect(scripted([/^reload/, "Unknown command: 'reload'\n"]).reload()).rejects.toThrow(/did not reload/);
  });
});
