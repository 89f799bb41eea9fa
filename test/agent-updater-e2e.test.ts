// skippy-updater end to end: two real bundles (0.1.0-a and 0.1.0-b, built with SKIPPY_BUNDLE_VERSION),
// the built controller over mutual TLS, and `node <bundle a> updater ...` as the service runs it.
// The test does the update_agent executor's part itself (stage the bundle under versions/, write
// request.json) and watches the rest through the controller: the node's agent_version and the
// AgentUpdateReport its heartbeats carry. Then a bundle that exits at once (a crash loop) and one
// that never reaches the controller (a deadline): the updater goes back to b by itself each time.
// And an agent killed with SIGKILL at rest is started again by the updater.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { copyFile, mkdir, mkdtemp, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentUpdateState } from "../gen/skipper/v1/agent_update_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import type { NodeStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import {
  readUpdaterState,
  stageBundle,
  type UpdaterStateName,
  updaterPaths,
  versionDirName,
  writeUpdateRequest,
} from "../agent/updater/update-files.js";
import { startControllerProcess, stopProcess, waitFor, type ControllerProcess } from "./helpers/processes.js";

const NODE = "updated-host";
const BUNDLER = fileURLToPath(new URL("../scripts/bundle-agent.mjs", import.meta.url));

interface Bundle {
  version: string;
  path: string;
  bytes: Buffer;
  sha256: string;
}

async function bundleOf(version: string, path: string): Promise<Bundle> {
  const bytes = await readFile(path);
  return { version, path, bytes, sha256: createHash("sha256").update(bytes).digest("hex") };
}

async function buildBundle(dir: string, version: string): Promise<Bundle> {
  const path = join(dir, `skippy-${version}.mjs`);
  await execa(process.execPath, [BUNDLER, path], { env: { SKIPPY_BUNDLE_VERSION: version } });
  return bundleOf(version, path);
}

/** The pids of `pid`'s children. */
function childrenOf(pid: number): number[] {
  try {
    return execFileSync("ps", ["-o", "pid=", "--ppid", String(pid)], { encoding: "utf8" })
      .split("\n")
      .map((s) => Number(s.trim()))
      .filter((n) => n > 0);
  } catch {
    return [];
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("skippy-updater (real bundles, built controller)", () => {
  let root: string;
  let ctl: ControllerProcess;
  let token: string;
  let a: Bundle;
  let b: Bundle;
  let crashing: Bundle;
  let silent: Bundle;
  let updater: ChildProcess;
  let dir: string;

  const node = async (): Promise<NodeStatus | undefined> => {
    const r = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource;
    return r?.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined;
  };

  /** Waits until the controller shows the node's agent at `version` with its updater in `state`. */
  const nodeShows = (version: string, state: AgentUpdateState, timeoutMs = 60_000) =>
    waitFor(
      `the node showing agent ${version} in ${AgentUpdateState[state]}`,
      async () => {
        const n = await node();
        return n?.agentVersion === version && n.agentUpdate?.state === state ? n : undefined;
      },
      timeoutMs,
    );

  const stateIs = (name: UpdaterStateName, timeoutMs = 60_000) =>
    waitFor(
      `state.json in ${name}`,
      async () => ((await readUpdaterState(dir))?.state === name ? readUpdaterState(dir) : undefined),
      timeoutMs,
    );

  const request = async (bundle: Bundle, deadlineMs: number) => {
    await stageBundle(dir, bundle.bytes, { version: bundle.version, sha256: bundle.sha256, size: bundle.bytes.length, signature: "" });
    await writeUpdateRequest(dir, {
      version: bundle.version,
      sha256: bundle.sha256,
      deadlineMs,
      orderId: "",
      requestedAt: new Date().toISOString(),
    });
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-updater-"));
    const build = join(root, "build");
    await mkdir(build, { recursive: true });
    [a, b] = await Promise.all([buildBundle(build, "0.1.0-a"), buildBundle(build, "0.1.0-b")]);
    const crashingPath = join(build, "crashing.mjs");
    await writeFile(crashingPath, "// skippy-bundle-version: 0.1.0-broken\nprocess.exit(3);\n");
    crashing = await bundleOf("0.1.0-broken", crashingPath);
    // Runs, but never reaches the controller (and dies on SIGTERM as a plain Node process does).
    const silentPath = join(build, "silent.mjs");
    await writeFile(silentPath, "// skippy-bundle-version: 0.1.0-silent\nsetInterval(() => {}, 1000);\n");
    silent = await bundleOf("0.1.0-silent", silentPath);
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE, displayName: "updated" })).token;
    // Where `skippy install` puts the bundle: the updater seeds versions/ from it.
    const installed = join(root, "lib", "skippy.mjs");
    await mkdir(join(root, "lib"), { recursive: true });
    await copyFile(a.path, installed);
    const stateDir = join(root, "state");
    dir = updaterPaths(join(stateDir, "updater")).dir;
    const args = [installed, "updater", "--controller", ctl.url, "--node-id", NODE, "--ca-file", ctl.caFile];
    args.push("--state-dir", stateDir, "--work-dir", join(root, "work"), "--poll-interval", "500ms");
    updater = spawn(process.execPath, args, {
      env: { ...process.env, SKIPPY_NODE_TOKEN: token, SKIPPY_TRANSPORT: "session", DOCKER_HOST: `unix://${join(root, "no-docker.sock")}` },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const log = createWriteStream(join(root, "updater.log"));
    updater.stdout!.pipe(log);
    updater.stderr!.pipe(log);
  }, 120_000);

  afterAll(async () => {
    if (updater) await stopProcess(updater);
    await ctl?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  it("runs the installed bundle supervised: the node shows 0.1.0-a, IDLE, its sha256", async () => {
    const n = await nodeShows("0.1.0-a", AgentUpdateState.IDLE);
    expect(n.agentUpdate).toMatchObject({ supervised: true, runningSha256: a.sha256 });
    expect(await readlink(updaterPaths(dir).current)).toBe(join("versions", versionDirName(a.version, a.sha256)));
  });

  it("restarts the agent when it is killed with SIGKILL at rest", async () => {
    const before = (await node())!.agentCounters!.bootId;
    const [agent] = childrenOf(updater.pid!);
    expect(agent).toBeGreaterThan(0);
    process.kill(agent!, "SIGKILL");
    const next = await waitFor("another agent process", async () => childrenOf(updater.pid!).find((p) => p !== agent));
    expect(alive(agent!)).toBe(false);
    // The new process reaches the controller: its counters start again under another boot id.
    await waitFor("the restarted agent's heartbeat", async () => ((await node())?.agentCounters?.bootId !== before ? true : undefined));
    expect(childrenOf(updater.pid!)).toEqual([next]);
    expect(updater.exitCode).toBeNull();
  });

  it("switches to a staged 0.1.0-b: the node shows it CONFIRMED at once, previous 0.1.0-a", async () => {
    await request(b, 60_000);
    await stateIs("CONFIRMED");
    const confirmedAt = Date.now();
    const n = await nodeShows("0.1.0-b", AgentUpdateState.CONFIRMED);
    // Reported as state.json changed, not with the session's next heartbeat (10 s or more later).
    expect(Date.now() - confirmedAt).toBeLessThan(4_000);
    expect(n.agentUpdate).toMatchObject({
      supervised: true,
      targetVersion: "0.1.0-b",
      targetSha256: b.sha256,
      previousVersion: "0.1.0-a",
      runningSha256: b.sha256,
    });
    expect(await readlink(updaterPaths(dir).current)).toBe(join("versions", versionDirName(b.version, b.sha256)));
    expect(await readlink(updaterPaths(dir).previous)).toBe(join("versions", versionDirName(a.version, a.sha256)));
    // The executor's request was taken.
    await expect(readFile(updaterPaths(dir).request)).rejects.toThrow(/ENOENT/);
  });

  it("goes back to 0.1.0-b by itself when the new bundle keeps exiting", async () => {
    const asked = Date.now();
    await request(crashing, 15_000);
    const s = await stateIs("ROLLED_BACK", 60_000);
    // A crash loop fails it before its deadline.
    expect(Date.now() - asked).toBeLessThan(15_000);
    expect(s).toMatchObject({ target: { version: "0.1.0-broken" }, previous: { version: "0.1.0-b" }, running: { version: "0.1.0-b" } });
    expect(s!.message).toMatch(/^back on 0\.1\.0-b: 0\.1\.0-broken exited 3 times before reaching the controller \(last: code 3\)/);
    const rolledBackAt = Date.now();
    const n = await nodeShows("0.1.0-b", AgentUpdateState.ROLLED_BACK);
    expect(Date.now() - rolledBackAt).toBeLessThan(4_000);
    expect(n.agentUpdate).toMatchObject({ targetVersion: "0.1.0-broken", previousVersion: "0.1.0-b", runningSha256: b.sha256 });
    expect(n.agentUpdate!.message).toMatch(/exited 3 times/);
    expect(await readlink(updaterPaths(dir).current)).toBe(join("versions", versionDirName(b.version, b.sha256)));
  });

  it("goes back to 0.1.0-b when the new bundle runs but does not reach the controller within the deadline", async () => {
    const asked = Date.now();
    await request(silent, 10_000);
    await stateIs("STARTING", 30_000);
    const s = await stateIs("ROLLED_BACK", 60_000);
    expect(Date.now() - asked).toBeGreaterThanOrEqual(10_000);
    expect(s!.message).toMatch(/^back on 0\.1\.0-b: 0\.1\.0-silent did not reach the controller within 10000 ms/);
    const n = await nodeShows("0.1.0-b", AgentUpdateState.ROLLED_BACK);
    expect(n.agentUpdate).toMatchObject({ targetVersion: "0.1.0-silent", runningSha256: b.sha256 });
    // Only the agent runs under the updater: the silent bundle was stopped.
    expect(childrenOf(updater.pid!)).toHaveLength(1);
  });

  it("a request for the version that runs changes nothing", async () => {
    const before = await readUpdaterState(dir);
    await request(b, 60_000);
    await waitFor("the request taken", async () =>
      readFile(updaterPaths(dir).request).then(
        () => undefined,
        () => true,
      ),
    );
    expect(await readUpdaterState(dir)).toEqual(before);
  });

  it("stops on SIGTERM after its agent", async () => {
    const [agent] = childrenOf(updater.pid!);
    const exited = new Promise<number | null>((r) => updater.once("exit", (code) => r(code)));
    updater.kill("SIGTERM");
    expect(await exited).toBe(0);
    expect(alive(agent!)).toBe(false);
  });
});
