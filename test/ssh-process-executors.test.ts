// An SSH node's deploy_process and control_process executors, with the node's scripts run by a
// real sh with a scratch $HOME (what the node's login shell does with the line ssh sends), so
// every step but the SSH transport is the real one: install once (a redeploy changes nothing, a
// different sha256 is refused), switch versions, "latest" offline falls back to the newest version
// installed on the node, a version that dies at once is switched back from, rollback (once per
// order, even when the connection drops after it started), stop and start (a stop whose record
// fails is not undone by the supervision), a source the relay does not allow, and a supervisor
// gone (a reboot) started again by the heartbeat's supervision.
import { create } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessOperation } from "../gen/skipper/v1/order_action_pb.js";
import { WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import type { ExecContext } from "../agent/executors/executor.js";
import { processStartTicks } from "../agent/process/supervisor.js";
import { REMOTE_PROCESS_BASE, START } from "../agent/relay/remote-process-scripts.js";
import { RemoteProcesses, stdinOf, type ScriptRunner } from "../agent/relay/remote-processes.js";
import { remoteSh } from "../agent/relay/shell-quote.js";
import { sshProcessExecutors, superviseOnNode } from "../agent/relay/ssh-process-executors.js";
import { freePort, waitFor } from "./helpers/processes.js";

const noop = () => undefined;
const quiet: Record<string, unknown> = { debug: noop, info: noop, warn: noop, error: noop, trace: noop, fatal: noop };
quiet.child = () => quiet;
const alive = async (pid: number) => (await processStartTicks(pid)) !== undefined;
const MODULE = "job";

describe("an SSH node's process executors (the node's scripts run by a real sh)", () => {
  let root: string;
  let home: string;
  let artifacts: string;
  let dead: string;
  let remote: RemoteProcesses;
  let table: ReturnType<typeof sshProcessExecutors>;
  const sums: Record<string, string> = {};
  let ctx: ExecContext;
  let n = 0;
  // Every argument a script got: what may be secret (the env) must never be one.
  const argsSeen: string[] = [];
  // A connection that drops at the first command this says yes to (the command does not run).
  let drop: ((script: string, args: readonly string[]) => boolean) | undefined;

  const deploy = (version: string, over: { sha256?: string; source?: string } = {}) => {
    const path = over.source ?? join(artifacts, `job-${version}.tar.gz`);
    const source = path.startsWith("http") ? { case: "url" as const, value: path } : { case: "path" as const, value: path };
    const spec = {
      module: MODULE,
      version,
      source: { kind: source },
      sha256: over.sha256 ?? sums[version] ?? sums["2.0.0"]!,
      argv: ["bin/run"],
      env: { WORD: version },
    };
    const order = create(WorkOrderSchema, {
      id: `o${++n}`,
      type: WorkOrderType.DEPLOY_PROCESS,
      action: { kind: { case: "deployProcess", value: { spec } } },
    });
    return table[WorkOrderType.DEPLOY_PROCESS](order, ctx).then((o) => o.result);
  };
  const control = (operation: ProcessOperation, id = `o${++n}`) => {
    const order = create(WorkOrderSchema, {
      id,
      type: WorkOrderType.CONTROL_PROCESS,
      action: { kind: { case: "controlProcess", value: { module: MODULE, operation } } },
    });
    return table[WorkOrderType.CONTROL_PROCESS](order, ctx).then((o) => o.result);
  };
  const active = () => readlink(join(home, REMOTE_PROCESS_BASE, MODULE, "active"));

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-sshp-exec-"));
    home = join(root, "home");
    artifacts = join(root, "artifacts");
    await mkdir(home);
    await mkdir(artifacts);
    for (const v of ["1.0.0", "2.0.0", "3.0.0"]) {
      const src = join(root, `src-${v}`);
      await mkdir(join(src, "bin"), { recursive: true });
      // 3.0.0 dies at once.
      const body = v === "3.0.0" ? 'echo "3.0.0 cannot start"\nexit 3\n' : 'echo "word=$WORD"\nexec sleep 600\n';
      await writeFile(join(src, "bin", "run"), `#!/bin/sh\n${body}`);
      await chmod(join(src, "bin", "run"), 0o755);
      await writeFile(join(src, "VERSION"), v);
      await execa("tar", ["-czf", join(artifacts, `job-${v}.tar.gz`), "-C", src, "."]);
      sums[v] = createHash("sha256")
        .update(await readFile(join(artifacts, `job-${v}.tar.gz`)))
        .digest("hex");
    }
    dead = `http://127.0.0.1:${await freePort()}/`;
    const local: ScriptRunner = async (script, args, opts) => {
      argsSeen.push(...args);
      if (drop?.(script, args)) {
        drop = undefined;
        return { exitCode: 255, stdout: "", stderr: "client_loop: send disconnect: Broken pipe", timedOut: false };
      }
      const r = await execa("sh", ["-c", remoteSh(script, args)], {
        reject: false,
        env: { HOME: home },
        timeout: opts.timeoutMs,
        ...stdinOf(opts),
      });
      return { exitCode: r.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr, timedOut: r.timedOut === true };
    };
    remote = new RemoteProcesses(local, join(root, "relay-work"));
    table = sshProcessExecutors(remote, join(root, "relay-work"), { settleMs: 400, graceMs: 1000 });
    ctx = {
      config: {
        workDir: join(root, "relay-work"),
        allowProcessSources: [artifacts, dead],
        allowCommands: [],
        composeTimeoutMs: 1,
        readyTimeoutMs: 1,
      },
      signal: new AbortController().signal,
      log: quiet as never,
      host: {} as never,
    };
  });

  afterAll(async () => {
    await remote.stop(MODULE, 500).catch(() => undefined);
    await rm(root, { recursive: true, force: true });
  });

  it("installs once, switches versions, and falls back offline to the newest version on the node", async () => {
    const first = await deploy("1.0.0");
    expect(first).toMatchObject({ success: true, code: "PROCESS_OK" });
    expect(first.message).toMatch(/^job 1\.0\.0 installed and running on the node \(pid \d+\)$/);
    expect(first.details?.process).toMatchObject({ module: MODULE, activeVersion: "1.0.0", state: "running", activeSha256: sums["1.0.0"] });
    expect(await alive(first.details!.process!.pid)).toBe(true);
    const again = await deploy("1.0.0");
    expect(again.message).toMatch(/already runs on the node/);
    expect(again.details?.process?.pid).toBe(first.details?.process?.pid);
    const other = await deploy("1.0.0", { sha256: sums["2.0.0"] });
    expect(other).toMatchObject({ success: false, code: "CHECKSUM_MISMATCH" });

    const second = await deploy("2.0.0");
    expect(second.details?.process).toMatchObject({
      activeVersion: "2.0.0",
      previousVersion: "1.0.0",
      installedVersions: ["1.0.0", "2.0.0"],
      state: "running",
    });
    expect(await alive(first.details!.process!.pid)).toBe(false);
    expect(await active()).toBe("2.0.0");

    const offline = await deploy("latest", { source: `${dead}job.tar.gz`, sha256: sums["2.0.0"] });
    expect(offline).toMatchObject({ success: true, code: "PROCESS_OK" });
    expect(offline.message).toMatch(/highest installed version 2\.0\.0 was used \(resolved offline\)/);
    expect(offline.details?.process).toMatchObject({ activeVersion: "2.0.0", resolvedOffline: true });
    // The env went to the node on stdin only (the meta, the launch script): never on a command line.
    expect(argsSeen.length).toBeGreaterThan(10);
    expect(argsSeen.filter((x) => x.includes("WORD"))).toEqual([]);
  }, 60_000);

  it("switches back from a version that dies at once, and rolls back once per order", async () => {
    const broken = await deploy("3.0.0");
    expect(broken).toMatchObject({ success: false, code: "PROCESS_EXITED" });
    expect(broken.message).toMatch(/restored 2\.0\.0, which runs again/);
    expect(broken.message).toContain("--- skipper: starting job 3.0.0");
    expect(broken.message).toContain("3.0.0 cannot start");
    expect(broken.details?.process).toMatchObject({ activeVersion: "2.0.0", state: "running" });
    expect(await active()).toBe("2.0.0");

    const back = await control(ProcessOperation.ROLLBACK, "rb-1");
    expect(back.message).toMatch(/^job rolled back from 2\.0\.0 to 1\.0\.0 \(pid \d+\)$/);
    expect(await active()).toBe("1.0.0");
    const rerun = await control(ProcessOperation.ROLLBACK, "rb-1");
    expect(rerun.message).toBe("job was already rolled back to 1.0.0 by this order");
    expect(await active()).toBe("1.0.0");
  }, 60_000);

  it("a rollback whose connection drops after the version started is not undone by its retry", async () => {
    expect(await active()).toBe("1.0.0");
    // The connection drops at the first record written after the new version's start.
    let started = false;
    drop = (script, args) => {
      if (script === START && args[4] === "run") started = true;
      return started && args[2] === ".run/state.json";
    };
    await control(ProcessOperation.ROLLBACK, "rb-2");
    drop = undefined;
    expect(await active()).toBe("2.0.0");
    const retry = await control(ProcessOperation.ROLLBACK, "rb-2");
    expect(retry).toMatchObject({ success: true, message: "job was already rolled back to 2.0.0 by this order" });
    expect(await active()).toBe("2.0.0");
    // Another rollback order goes back as ever.
    expect((await control(ProcessOperation.ROLLBACK, "rb-3")).message).toMatch(/^job rolled back from 2\.0\.0 to 1\.0\.0/);
  }, 60_000);

  it("stops and starts; a source the relay does not allow is refused before anything runs", async () => {
    const stop = await control(ProcessOperation.STOP);
    expect(stop.message).toMatch(/^job stopped \(was pid \d+\)$/);
    expect(stop.details?.process).toMatchObject({ state: "stopped", pid: 0 });
    expect((await control(ProcessOperation.STOP)).message).toBe("job was not running");
    const start = await control(ProcessOperation.START);
    expect(start.message).toMatch(/^job started on the node \(pid \d+\)$/);
    expect((await control(ProcessOperation.START)).message).toMatch(/^job already runs/);

    const refused = await deploy("1.0.0", { source: "/etc/passwd" });
    expect(refused).toMatchObject({ success: false, code: "PROCESS_SOURCE_NOT_ALLOWED" });
  }, 60_000);

  it("a stop whose record cannot be written leaves nothing the supervision would start again", async () => {
    const before = (await remote.inspect(MODULE))!;
    expect(before.pid).toBeGreaterThan(0);
    drop = (_script, args) => args[2] === ".run/state.json";
    const failed = await control(ProcessOperation.STOP);
    expect(failed).toMatchObject({ success: false, code: "PROCESS_FAILED" });
    const [seen] = await superviseOnNode(remote, join(root, "relay-work"), quiet as never, 1000);
    // The stop did not happen (the same process runs) or it held: never a process started anew.
    expect([before.pid, 0]).toContain(seen!.pid);
    expect((await control(ProcessOperation.STOP)).details?.process).toMatchObject({ state: "stopped", pid: 0 });
    expect((await superviseOnNode(remote, join(root, "relay-work"), quiet as never, 1000))[0]).toMatchObject({ state: "stopped", pid: 0 });
    expect((await control(ProcessOperation.START)).success).toBe(true);
  }, 60_000);

  it("a module whose supervisor is gone (the node rebooted) is started again by the heartbeat's supervision", async () => {
    const before = (await remote.inspect(MODULE))!;
    expect(before.supervisor).toBeGreaterThan(0);
    process.kill(-before.supervisor, "SIGKILL");
    await waitFor(
      "the supervisor and its process gone",
      async () => (!(await alive(before.supervisor)) && !(await alive(before.pid)) ? true : undefined),
      10_000,
      50,
    );
    const [seen] = await superviseOnNode(remote, join(root, "relay-work"), quiet as never);
    expect(seen).toMatchObject({ module: MODULE, state: "running", activeVersion: "1.0.0" });
    expect(seen!.pid).not.toBe(before.pid);
    expect(await alive(seen!.pid)).toBe(true);
  }, 30_000);
});
