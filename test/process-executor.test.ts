// The process executor on real files and processes: versioned tarballs (a VERSION file and a
// bin/server that serves its version over HTTP with busybox httpd) are installed from a loopback
// HTTP server or a local path, switched with the active symlink, rolled back, supervised and
// stopped. What is asserted is what a user relies on: which version answers on the port.
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, readlink, rm, writeFile, symlink } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { execa } from "execa";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessOperation } from "../gen/skipper/v1/order_action_pb.js";
import { NodeCapabilitiesSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { loadAgentConfig, type AgentConfig } from "../agent/config.js";
import { makeControlProcess } from "../agent/executors/control-process.js";
import { makeDeployProcess } from "../agent/executors/deploy-process.js";
import type { ExecContext } from "../agent/executors/executor.js";
import { readRunState, writeRunState } from "../agent/process/run-state.js";
import { isSameProcess, processStartTicks } from "../agent/process/supervisor.js";
import { superviseAll } from "../agent/process/supervise-all.js";
import { unitText } from "../agent/process/systemd.js";
import { compareVersions } from "../agent/process/versions.js";
import { freePort, waitFor } from "./helpers/processes.js";

const OPTS = { useSystemd: false, settleMs: 700, graceMs: 3000 };
const SERVER = `#!/bin/sh
echo "server $(cat VERSION) on port $PORT"
exec busybox httpd -f -p "127.0.0.1:$PORT" -h www
`;
const CRASH = `#!/bin/sh
echo "boom: no config file" >&2
exit 3
`;

let root: string;
let workDir: string;
let config: AgentConfig;
let artifacts: Server;
let artifactsUrl: string;
let port: number;
const sums: Record<string, string> = {};
const slowDownloads: { closed: boolean }[] = [];

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "skipper-process-"));
  workDir = join(root, "work");
  config = loadAgentConfig(
    ["--node-id", "n1", "--work-dir", workDir, "--state-dir", join(root, "state")],
    { SKIPPY_NODE_TOKEN: "t" },
    () => "",
  ) as AgentConfig;
  for (const v of ["1.0.0", "2.0.0", "3.0.0"]) await tarball(`app-${v}.tar.gz`, v, SERVER);
  await tarball("crash-0.2.0.tgz", "0.2.0", CRASH);
  port = await freePort();
  artifacts = createServer((req, res) => {
    if (req.url === "/slow.tar.gz") {
      // Never ends; the test sees when it was asked for and when its connection closed.
      const seen = { closed: false };
      slowDownloads.push(seen);
      res.once("close", () => (seen.closed = true));
      return void res.writeHead(200).write("x");
    }
    readFile(join(root, (req.url ?? "/").slice(1))).then(
      (body) => res.writeHead(200).end(body),
      () => res.writeHead(404).end(),
    );
  });
  await new Promise<void>((r) => artifacts.listen(0, "127.0.0.1", r));
  artifactsUrl = `http://127.0.0.1:${(artifacts.address() as { port: number }).port}`;
});

afterAll(async () => {
  // Every process a test started: its pid is in a run state file.
  for (const module of ["app", "crashy", "evil", "ghost", "slow"]) {
    const s = await readRunState(workDir, module).catch(() => undefined);
    if (s && (await isSameProcess(s.pid, s.startTicks))) process.kill(-s.pid, "SIGKILL");
  }
  artifacts.closeAllConnections();
  await new Promise((r) => artifacts.close(r));
  await rm(root, { recursive: true, force: true });
});

/** Builds <root>/<name>: VERSION, bin/server (the given script) and www/version.txt. */
async function tarball(name: string, version: string, script: string): Promise<string> {
  const src = join(root, `src-${name}`);
  await mkdir(join(src, "bin"), { recursive: true });
  await mkdir(join(src, "www"));
  await writeFile(join(src, "VERSION"), `${version}\n`);
  await writeFile(join(src, "www", "version.txt"), version);
  await writeFile(join(src, "bin", "server"), script);
  await chmod(join(src, "bin", "server"), 0o755);
  await execa("tar", ["-czf", join(root, name), "-C", src, "."]);
  sums[name] = createHash("sha256")
    .update(await readFile(join(root, name)))
    .digest("hex");
  return join(root, name);
}

function ctx(signal = new AbortController().signal): ExecContext {
  return { config, host: { capabilities: create(NodeCapabilitiesSchema, {}) }, log: pino({ level: "silent" }), signal };
}

type SpecInit = { module?: string; version: string; path?: string; url?: string; sha256: string; argv?: string[] };
function deployOrder(s: SpecInit): WorkOrder {
  const source =
    s.url !== undefined ? { kind: { case: "url" as const, value: s.url } } : { kind: { case: "path" as const, value: s.path ?? "" } };
  const spec = {
    module: s.module ?? "app",
    version: s.version,
    source,
    sha256: s.sha256,
    argv: s.argv ?? ["bin/server"],
    env: { PORT: String(port) },
  };
  return create(WorkOrderSchema, {
    id: `wo-${Math.random().toString(36).slice(2)}`,
    type: WorkOrderType.DEPLOY_PROCESS,
    action: { kind: { case: "deployProcess", value: { spec } } },
  });
}

function controlOrder(module: string, operation: ProcessOperation, version = ""): WorkOrder {
  return create(WorkOrderSchema, {
    id: `wo-${Math.random().toString(36).slice(2)}`,
    type: WorkOrderType.CONTROL_PROCESS,
    action: { kind: { case: "controlProcess", value: { module, operation, version } } },
  });
}

const deploy = makeDeployProcess(OPTS);
const control = makeControlProcess(OPTS);

/** What the module answers on its port, or "" when nothing listens. */
async function answer(): Promise<string> {
  return fetch(`http://127.0.0.1:${port}/version.txt`).then(
    (r) => r.text(),
    () => "",
  );
}
const answers = (v: string) => waitFor(`the port to answer ${v}`, async () => ((await answer()) === v ? true : undefined), 5000, 50);

/** Processes whose command line mentions our port: there must never be two. */
async function serversOnPort(): Promise<number> {
  const out = await execa("ps", ["-eo", "args"]);
  return out.stdout.split("\n").filter((l) => l.includes(`127.0.0.1:${port}`) && l.includes("httpd")).length;
}

describe("process executor: versions, symlink, rollback, supervision", () => {
  it("installs v1 from a URL, starts it, and v1 answers", async () => {
    const r = (
      await deploy(deployOrder({ version: "1.0.0", url: `${artifactsUrl}/app-1.0.0.tar.gz`, sha256: sums["app-1.0.0.tar.gz"]! }), ctx())
    ).result;
    expect(r.code, r.message).toBe("PROCESS_OK");
    expect(r.details?.process).toMatchObject({ module: "app", activeVersion: "1.0.0", installedVersions: ["1.0.0"], state: "running" });
    expect(await readlink(join(workDir, "active", "app"))).toBe("../versions/app/1.0.0");
    await answers("1.0.0");
    expect(await readFile(join(workDir, "logs", "app.log"), "utf8")).toContain("server 1.0.0 on port");
  });

  it("refuses an artifact whose sha256 differs, and v1 keeps running untouched", async () => {
    const before = (await readRunState(workDir, "app")).pid;
    const bad = (
      await deploy(deployOrder({ version: "2.0.0", path: join(root, "app-2.0.0.tar.gz"), sha256: sums["app-1.0.0.tar.gz"]! }), ctx())
    ).result;
    expect(bad.code).toBe("CHECKSUM_MISMATCH");
    expect(bad.success).toBe(false);
    // An installed version is never overwritten with other bytes.
    const again = (
      await deploy(deployOrder({ version: "1.0.0", path: join(root, "app-2.0.0.tar.gz"), sha256: sums["app-2.0.0.tar.gz"]! }), ctx())
    ).result;
    expect(again.code).toBe("CHECKSUM_MISMATCH");
    expect(again.details?.process).toMatchObject({ activeVersion: "1.0.0", installedVersions: ["1.0.0"], state: "running", pid: before });
    await answers("1.0.0");
  });

  it("deploying v2 switches the symlink and the process now answers as v2", async () => {
    const v1pid = (await readRunState(workDir, "app")).pid;
    const r = (
      await deploy(deployOrder({ version: "2.0.0", path: join(root, "app-2.0.0.tar.gz"), sha256: sums["app-2.0.0.tar.gz"]! }), ctx())
    ).result;
    expect(r.code, r.message).toBe("PROCESS_OK");
    expect(r.details?.process).toMatchObject({
      activeVersion: "2.0.0",
      previousVersion: "1.0.0",
      installedVersions: ["1.0.0", "2.0.0"],
      state: "running",
    });
    expect(await readlink(join(workDir, "active", "app"))).toBe("../versions/app/2.0.0");
    await answers("2.0.0");
    expect(existsSync(`/proc/${v1pid}`)).toBe(false);
    expect(await serversOnPort()).toBe(1);
  });

  it("ROLLBACK goes back to v1 and v1 answers again", async () => {
    const r = (await control(controlOrder("app", ProcessOperation.ROLLBACK), ctx())).result;
    expect(r.code, r.message).toBe("PROCESS_OK");
    expect(r.details?.process).toMatchObject({ activeVersion: "1.0.0", previousVersion: "2.0.0", state: "running" });
    await answers("1.0.0");
    const missing = (await control(controlOrder("app", ProcessOperation.ROLLBACK, "9.9.9"), ctx())).result;
    expect(missing.code).toBe("VERSION_NOT_INSTALLED");
    await answers("1.0.0");
  });

  it('"latest" with its source unreachable runs the highest installed version and says resolved_offline', async () => {
    const closed = await freePort();
    const r = (
      await deploy(
        deployOrder({ version: "latest", url: `http://127.0.0.1:${closed}/app.tar.gz`, sha256: sums["app-3.0.0.tar.gz"]! }),
        ctx(),
      )
    ).result;
    expect(r.code, r.message).toBe("PROCESS_OK");
    expect(r.message).toMatch(/could not be reached.*highest installed version 2\.0\.0/);
    expect(r.details?.process).toMatchObject({ activeVersion: "2.0.0", resolvedOffline: true });
    await answers("2.0.0");
    // Heartbeats say so too (it is the node's state, not only the order's), with what adoption compares.
    const [seen] = (await superviseAll(workDir)).filter((p) => p.module === "app");
    expect(seen).toMatchObject({ activeVersion: "2.0.0", resolvedOffline: true, activeSha256: sums["app-2.0.0.tar.gz"] });
    expect(seen?.launchDigest).toBe((await readRunState(workDir, "app")).launchDigest);
  });

  it('"latest" from a reachable source installs the version its VERSION file names', async () => {
    const r = (
      await deploy(deployOrder({ version: "latest", url: `${artifactsUrl}/app-3.0.0.tar.gz`, sha256: sums["app-3.0.0.tar.gz"]! }), ctx())
    ).result;
    expect(r.code, r.message).toBe("PROCESS_OK");
    expect(r.details?.process).toMatchObject({
      activeVersion: "3.0.0",
      installedVersions: ["1.0.0", "2.0.0", "3.0.0"],
      resolvedOffline: false,
    });
    await answers("3.0.0");
    expect((await superviseAll(workDir)).find((p) => p.module === "app")?.resolvedOffline).toBe(false);
  });

  it("a process that was killed is started again by superviseAll", async () => {
    const killed = await readRunState(workDir, "app");
    process.kill(-killed.pid, "SIGKILL");
    await waitFor(
      "the process to be gone",
      async () => ((await isSameProcess(killed.pid, killed.startTicks)) ? undefined : true),
      5000,
      20,
    );
    expect(await answer()).toBe("");
    // The first pass may wait out the restart backoff; the agent calls it every poll interval.
    const obs = await waitFor(
      "superviseAll to restart app",
      async () => {
        const all = await superviseAll(workDir);
        const app = all.find((o) => o.module === "app");
        return app?.state === "running" ? app : undefined;
      },
      10_000,
      250,
    );
    expect(obs.pid).not.toBe(killed.pid);
    expect(obs.activeVersion).toBe("3.0.0");
    await answers("3.0.0");
  });

  it("a module dead within its crash backoff is reported restarting and left to it; a START keeps the count of quick deaths", async () => {
    const before = await readRunState(workDir, "app");
    process.kill(-before.pid, "SIGKILL");
    await waitFor(
      "the process to be gone",
      async () => ((await isSameProcess(before.pid, before.startTicks)) ? undefined : true),
      5000,
      20,
    );
    // As the supervisor leaves it after a third quick death in a row: started just now, an 8 s backoff.
    await writeRunState(workDir, { ...before, startedAt: new Date().toISOString(), crashes: 3 });
    const held = (await superviseAll(workDir)).find((o) => o.module === "app");
    expect([held?.state, held?.pid]).toEqual(["restarting", 0]);
    expect(await answer()).toBe("");
    // A START (the controller's or a user's) runs it now, but does not wipe the backoff's count.
    const start = (await control(controlOrder("app", ProcessOperation.START), ctx())).result;
    expect(start.code, start.message).toBe("PROCESS_OK");
    expect((await readRunState(workDir, "app")).crashes).toBe(3);
    await answers("3.0.0");
  });

  it("an agent that restarts adopts the running process instead of starting a second one", async () => {
    const running = await readRunState(workDir, "app");
    // New executor instances, as a restarted agent builds them; all they share is the work dir.
    const deploy2 = makeDeployProcess(OPTS);
    const control2 = makeControlProcess(OPTS);
    const again = (
      await deploy2(deployOrder({ version: "3.0.0", path: join(root, "app-3.0.0.tar.gz"), sha256: sums["app-3.0.0.tar.gz"]! }), ctx())
    ).result;
    expect(again.code).toBe("PROCESS_OK");
    expect(again.message).toContain("already runs");
    const start = (await control2(controlOrder("app", ProcessOperation.START), ctx())).result;
    expect(start.code).toBe("PROCESS_OK");
    expect(start.details?.process?.pid).toBe(running.pid);
    expect((await superviseAll(workDir)).find((o) => o.module === "app")?.pid).toBe(running.pid);
    expect(await serversOnPort()).toBe(1);
    await answers("3.0.0");
  });

  it("a recorded pid now used by another program is not taken for the module's process", async () => {
    const ticks = (await processStartTicks(process.pid))!;
    expect(await isSameProcess(process.pid, ticks)).toBe(true);
    expect(await isSameProcess(process.pid, String(Number(ticks) + 1))).toBe(false);
  });

  it("STOP leaves no process behind, stopping again is fine, and superviseAll leaves it stopped", async () => {
    const pid = (await readRunState(workDir, "app")).pid;
    const r = (await control(controlOrder("app", ProcessOperation.STOP), ctx())).result;
    expect(r.code, r.message).toBe("PROCESS_OK");
    expect(r.details?.process).toMatchObject({ state: "stopped", pid: 0 });
    expect(existsSync(`/proc/${pid}`)).toBe(false);
    expect(await serversOnPort()).toBe(0);
    expect(await answer()).toBe("");
    const twice = (await control(controlOrder("app", ProcessOperation.STOP), ctx())).result;
    expect([twice.code, twice.message]).toEqual(["PROCESS_OK", "app was not running"]);
    expect((await superviseAll(workDir)).find((o) => o.module === "app")?.state).toBe("stopped");
    expect(await serversOnPort()).toBe(0);
  });
});

describe("process executor: failures", () => {
  it("a version that exits at once is reported with its log tail and the previous version runs again", async () => {
    const ok = (
      await deploy(
        deployOrder({ module: "crashy", version: "1.0.0", path: join(root, "app-1.0.0.tar.gz"), sha256: sums["app-1.0.0.tar.gz"]! }),
        ctx(),
      )
    ).result;
    expect(ok.code, ok.message).toBe("PROCESS_OK");
    const r = (
      await deploy(
        deployOrder({ module: "crashy", version: "0.2.0", path: join(root, "crash-0.2.0.tgz"), sha256: sums["crash-0.2.0.tgz"]! }),
        ctx(),
      )
    ).result;
    expect(r.code).toBe("PROCESS_EXITED");
    expect(r.message).toContain("boom: no config file");
    expect(r.message).not.toContain("server 1.0.0"); // the tail is this start's output only
    expect(r.message).toContain("restored 1.0.0, which runs again");
    expect(r.details?.process).toMatchObject({ activeVersion: "1.0.0", state: "running", installedVersions: ["0.2.0", "1.0.0"] });
    expect(await readlink(join(workDir, "active", "crashy"))).toBe("../versions/crashy/1.0.0");
    await answers("1.0.0");
    await control(controlOrder("crashy", ProcessOperation.STOP), ctx());
  });

  it("a tarball with a ../evil entry or a symlink leading out is refused and nothing is installed", async () => {
    const build = join(root, "evil-build", "inner");
    await mkdir(build, { recursive: true });
    await writeFile(join(root, "evil-build", "evil"), "pwned");
    await writeFile(join(build, "VERSION"), "6.6.6\n");
    await execa("tar", ["-czPf", join(root, "evil.tar.gz"), "VERSION", "../evil"], { cwd: build });
    expect((await execa("tar", ["-tzf", join(root, "evil.tar.gz")])).stdout).toContain("../evil");
    const sha = createHash("sha256")
      .update(await readFile(join(root, "evil.tar.gz")))
      .digest("hex");
    const r = (await deploy(deployOrder({ module: "evil", version: "6.6.6", path: join(root, "evil.tar.gz"), sha256: sha }), ctx())).result;
    expect(r.code).toBe("PROCESS_INVALID");
    expect(r.message).toContain("../evil");
    expect(existsSync(join(workDir, "versions", "evil", "evil"))).toBe(false);
    expect(r.details?.process?.installedVersions).toEqual([]);

    const linkDir = join(root, "link-build");
    await mkdir(join(linkDir, "bin"), { recursive: true });
    await symlink("/bin/sh", join(linkDir, "bin", "server"));
    await execa("tar", ["-czf", join(root, "link.tar.gz"), "-C", linkDir, "."]);
    const lsha = createHash("sha256")
      .update(await readFile(join(root, "link.tar.gz")))
      .digest("hex");
    const l = (await deploy(deployOrder({ module: "evil", version: "6.6.7", path: join(root, "link.tar.gz"), sha256: lsha }), ctx()))
      .result;
    expect(l.code).toBe("PROCESS_INVALID");
    expect(l.message).toMatch(/symlink .*outside/);
    expect(l.details?.process?.installedVersions).toEqual([]);
  });

  it('"latest" with the source unreachable and nothing installed is SOURCE_UNAVAILABLE, retriable', async () => {
    const closed = await freePort();
    const r = (
      await deploy(
        deployOrder({ module: "ghost", version: "latest", url: `http://127.0.0.1:${closed}/x.tar.gz`, sha256: "a".repeat(64) }),
        ctx(),
      )
    ).result;
    expect([r.code, r.retriable, r.success]).toEqual(["SOURCE_UNAVAILABLE", true, false]);
  });

  it("a cancelled deploy stops its download (its connection closes) and reports CANCELLED", async () => {
    const abort = new AbortController();
    const n = slowDownloads.length;
    // Cancelled once the download is under way (the server has the request); it never ends by
    // itself, so the deploy can only return by stopping it.
    const cancel = () => abort.abort(new Error("cancelled by admin"));
    void waitFor("the download to start", async () => (slowDownloads.length > n ? true : undefined), 30_000, 10).then(cancel, cancel);
    const r = (
      await deploy(
        deployOrder({ module: "slow", version: "1.0.0", url: `${artifactsUrl}/slow.tar.gz`, sha256: "b".repeat(64) }),
        ctx(abort.signal),
      )
    ).result;
    expect(r.code, r.message).toBe("CANCELLED");
    expect(r.message).toContain("cancelled by admin");
    expect(slowDownloads).toHaveLength(n + 1);
    await waitFor("the download's connection to close", async () => (slowDownloads[n]!.closed ? true : undefined), 30_000, 10);
    expect(r.details?.process?.installedVersions).toEqual([]);
  });

  it("refuses invalid orders with PROCESS_INVALID and unknown modules with MODULE_NOT_INSTALLED", async () => {
    const sha = sums["app-1.0.0.tar.gz"]!;
    const path = join(root, "app-1.0.0.tar.gz");
    const bad: SpecInit[] = [
      { module: "Bad_Name", version: "1.0.0", path, sha256: sha },
      { version: "active", path, sha256: sha },
      { version: "../1", path, sha256: sha },
      { version: "1.0.0", path: "relative.tar.gz", sha256: sha },
      { version: "1.0.0", url: "ftp://host/x.tar.gz", sha256: sha },
      { version: "1.0.0", path, sha256: "abc" },
      { version: "1.0.0", path, sha256: sha, argv: [] },
      { version: "1.0.0", path, sha256: sha, argv: ["../../bin/sh"] },
      { version: "1.0.0", path, sha256: sha, argv: ["/bin/sh"] },
    ];
    for (const s of bad) expect((await deploy(deployOrder(s), ctx())).result.code, JSON.stringify(s)).toBe("PROCESS_INVALID");
    expect((await control(controlOrder("app", ProcessOperation.UNSPECIFIED), ctx())).result.code).toBe("PROCESS_INVALID");
    expect((await control(controlOrder("nope", ProcessOperation.START), ctx())).result.code).toBe("MODULE_NOT_INSTALLED");
    expect((await control(controlOrder("nope", ProcessOperation.STOP), ctx())).result.code).toBe("MODULE_NOT_INSTALLED");
  });
});

describe("process pieces", () => {
  it("orders versions numerically, pre-releases before their release", () => {
    const sorted = ["1.10.0", "1.9.0", "v1.2", "2.0.0-rc1", "2.0.0", "1.2.1", "0.9", "2.0.0+build5"].sort(compareVersions);
    expect(sorted).toEqual(["0.9", "v1.2", "1.2.1", "1.9.0", "1.10.0", "2.0.0-rc1", "2.0.0", "2.0.0+build5"]);
  });

  it("writes a systemd unit that runs through the active symlink with quoted arguments and env", () => {
    const text = unitText(
      "/opt/skipper",
      { module: "api", version: "1.0.0", argv: ["bin/server", "--name", 'a "b" $HOME 100%'], env: { PORT: "8080" } },
      "/opt/skipper/active/api/bin/server",
    );
    expect(text).toContain('ExecStart="/opt/skipper/active/api/bin/server" "--name" "a \\"b\\" $$HOME 100%%"');
    expect(text).toContain("WorkingDirectory=/opt/skipper/active/api");
    expect(text).toContain('Environment="PORT=8080"');
    expect(text).toContain("StandardOutput=append:/opt/skipper/logs/api.log");
    expect(text).toContain("Restart=always");
  });
});
