// Process modules on an SSH node, end to end: a built controller, a relay agent (skippy --relay,
// no Docker engine anywhere: DOCKER_HOST points nowhere) and a private sshd on loopback whose
// login's $HOME is a scratch directory, the "remote" home (test/helpers/sshd.ts). A process
// resource selects the SSH node by its label; the relay fetches the artifact from its own
// --allow-process-source and installs it on the node, where a sh supervisor runs it:
//   - installed under the remote base ($HOME/.skippy-ssh/processes/<module>/<version>), the active
//     symlink on it, the process alive and answering, nothing installed on the relay itself;
//   - killed with SIGKILL behind Skipper's back, the node's supervisor starts it again (a new pid);
//   - 1.0.0 -> 2.0.0: the active symlink and the controller's per-node status follow;
//   - declared stopped: the process and its supervisor are gone, the versions stay installed.
import { createHash } from "node:crypto";
import { access, chmod, mkdir, mkdtemp, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ProcessModuleReason, ProcessModuleRun, type ProcessNodeStatus } from "../gen/skipper/v1/process_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import {
  RUN_ID,
  freePort,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { processStartTicks } from "../agent/process/supervisor.js";
import { res } from "./helpers/resources.js";
import { SSHD, startSshd, type TestSshd } from "./helpers/sshd.js";

const RELAY = "sshp-relay";
const NODE = "sshp-target";
const MODULE = `sshp-web-${RUN_ID}`;
const ID = `sshp-${RUN_ID}`;
const SERVER = '#!/bin/sh\nexec busybox httpd -f -p "127.0.0.1:$PORT" -h www\n';

// A zombie (an orphan not reaped yet) is not alive.
const alive = async (pid: number) => (await processStartTicks(pid)) !== undefined;
const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

describe("process modules on an SSH node (real sshd, relay agent, no engine)", () => {
  let sshd: TestSshd | undefined;
  let root: string;
  let remoteHome: string;
  let artifacts: string;
  let ctl: ControllerProcess;
  let relay: AgentProcess;
  let port: number;
  const sums: Record<string, string> = {};
  const api = () => ctl.admin(ResourceService);
  const moduleDir = () => join(remoteHome, ".skippy-ssh", "processes", MODULE);
  const answer = () =>
    fetch(`http://127.0.0.1:${port}/version.txt`).then(
      (r) => r.text(),
      () => "",
    );
  const desired = (version: string, run = ProcessModuleRun.RUNNING) => ({
    spec: {
      module: MODULE,
      version,
      source: { kind: { case: "path" as const, value: join(artifacts, `web-${version}.tar.gz`) } },
      sha256: sums[version]!,
      argv: ["bin/server"],
      env: { PORT: String(port) },
    },
    run,
    nodeSelector: { "ssh-processes": "yes" },
  });
  const nodeStatus = async (): Promise<ProcessNodeStatus | undefined> => {
    const r = (await api().getResource({ resourceType: "process", id: ID })).resource;
    return r?.currentState?.kind.case === "process" ? r.currentState.kind.value.nodes.find((n) => n.nodeId === NODE) : undefined;
  };
  const reached = (reason: ProcessModuleReason, test: (n: ProcessNodeStatus) => boolean = () => true, ms = 90_000) =>
    waitFor(
      `${ProcessModuleReason[reason]} on ${NODE}`,
      async () => {
        const n = await nodeStatus();
        return n?.reason === reason && test(n) ? n : undefined;
      },
      ms,
    );
  const update = (d: ReturnType<typeof desired>) =>
    api().updateResource({ resourceType: "process", id: ID, desiredState: { kind: { case: "process", value: d } } as never });

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-sshp-"));
    remoteHome = join(root, "remote-home");
    artifacts = join(root, "artifacts");
    await mkdir(remoteHome);
    await mkdir(artifacts);
    sshd = await startSshd(`unix://${join(root, "no-engine.sock")}`, { HOME: remoteHome });
    if (!sshd) return;
    for (const v of ["1.0.0", "2.0.0"]) {
      const src = join(root, `src-${v}`);
      await mkdir(join(src, "bin"), { recursive: true });
      await mkdir(join(src, "www"));
      await writeFile(join(src, "www", "version.txt"), v);
      await writeFile(join(src, "bin", "server"), SERVER);
      await chmod(join(src, "bin", "server"), 0o755);
      await execa("tar", ["-czf", join(artifacts, `web-${v}.tar.gz`), "-C", src, "."]);
      sums[v] = createHash("sha256")
        .update(await readFile(join(artifacts, `web-${v}.tar.gz`)))
        .digest("hex");
    }
    port = await freePort();
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--process-interval", "300ms"] });
    const relayToken = (await ctl.admin(NodeService).registerNode({ nodeId: RELAY })).token;
    await api().createResource({
      resourceType: "secret",
      resource: res("secret", "sshp-key", { case: "secret", value: { values: { private: sshd.clientKey } } }),
    });
    await api().createResource({
      resourceType: "node",
      resource: res("node", NODE, {
        case: "node",
        value: {
          displayName: NODE,
          labels: { "ssh-processes": "yes" },
          ssh: {
            address: "127.0.0.1",
            port: sshd.port,
            user: userInfo().username,
            hostKey: sshd.hostKey,
            keySecret: { secretId: "sshp-key", key: "private" },
            relayNodeId: RELAY,
          },
        },
      }),
    });
    relay = startAgentProcess({
      controller: ctl,
      nodeId: RELAY,
      token: relayToken,
      stateDir: join(root, "relay", "state"),
      workDir: join(root, "relay", "work"),
      dockerHost: `unix://${join(root, "no-engine.sock")}`,
      extraArgs: ["--relay", "--allow-process-source", artifacts],
    });
  }, 120_000);

  afterAll(async () => {
    await relay?.stop();
    await ctl?.stop();
    // Whatever still runs on the "node": its supervisor's whole group.
    const pidFile = remoteHome ? join(moduleDir(), ".run", "supervisor.pid") : "";
    const sup = Number((await readFile(pidFile, "utf8").catch(() => "")).trim());
    if (sup > 0) {
      try {
        process.kill(-sup, "SIGKILL");
      } catch {
        // gone already
      }
    }
    await sshd?.stop();
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("installs and runs the module on the node, repairs a kill, switches versions and stops it", async () => {
    if (!sshd) return console.warn(`!!! SKIPPED: no ${SSHD}`);
    await api().createResource({ resourceType: "process", resource: res("process", ID, { case: "process", value: desired("1.0.0") }) });
    const first = await reached(ProcessModuleReason.RUNNING, (n) => n.pid > 0);
    expect(first.activeVersion).toBe("1.0.0");
    // On the node: the version's files under the remote base, the active symlink, a live process.
    expect(await readFile(join(moduleDir(), "1.0.0", "www", "version.txt"), "utf8")).toBe("1.0.0");
    expect(await readlink(join(moduleDir(), "active"))).toBe("1.0.0");
    expect(await alive(first.pid)).toBe(true);
    expect(await answer()).toBe("1.0.0");
    // Nothing of it on the relay's own disk.
    expect(await exists(join(root, "relay", "work", "versions", MODULE))).toBe(false);
    // The node reports it in its heartbeats, as an agent would (the status may have come from the order's result first).
    const reported = await waitFor("the SSH node's heartbeat to list the module", async () => {
      const node = (await api().getResource({ resourceType: "node", id: NODE })).resource!;
      const st = node.currentState?.kind.case === "node" ? node.currentState.kind.value : undefined;
      return st?.processes.some((p) => p.module === MODULE && p.pid === first.pid) ? st : undefined;
    });
    expect(reported.processes.find((p) => p.module === MODULE)).toMatchObject({
      state: "running",
      activeVersion: "1.0.0",
      activeSha256: sums["1.0.0"],
    });
    expect(reported.capabilities?.capabilities).toContain("process.deploy");

    // SIGKILL behind Skipper's back: the node's own supervisor starts it again.
    process.kill(first.pid, "SIGKILL");
    const revived = await reached(ProcessModuleReason.RUNNING, (n) => n.pid > 0 && n.pid !== first.pid);
    expect(await alive(revived.pid)).toBe(true);
    await waitFor("the revived module to answer", async () => ((await answer()) === "1.0.0" ? true : undefined));

    // 1.0.0 -> 2.0.0: installed beside it, the symlink switched, the old process gone.
    await update(desired("2.0.0"));
    const second = await reached(ProcessModuleReason.RUNNING, (n) => n.activeVersion === "2.0.0" && n.pid > 0);
    expect(await readlink(join(moduleDir(), "active"))).toBe("2.0.0");
    expect(await readFile(join(moduleDir(), "2.0.0", "www", "version.txt"), "utf8")).toBe("2.0.0");
    expect(await exists(join(moduleDir(), "1.0.0"))).toBe(true);
    expect(await alive(revived.pid)).toBe(false);
    expect(await answer()).toBe("2.0.0");

    // Declared stopped: the process and its supervisor end; the versions stay.
    const supervisor = Number((await readFile(join(moduleDir(), ".run", "supervisor.pid"), "utf8")).trim());
    expect(await alive(supervisor)).toBe(true);
    await update(desired("2.0.0", ProcessModuleRun.STOPPED));
    await reached(ProcessModuleReason.STOPPED);
    expect([await alive(second.pid), await alive(supervisor)]).toEqual([false, false]);
    expect(await answer()).toBe("");
    expect(await exists(join(moduleDir(), "2.0.0"))).toBe(true);
  }, 300_000);
});
