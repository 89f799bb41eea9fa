// A process resource run by systemd for real: systemd is PID 1 of a PID and mount namespace on
// this machine (helpers/systemd-namespace.ts), the built agent runs inside it (it detects systemd
// and writes skipper-<module>.service units), the built controller outside, over HTTP/2 + TLS.
// The module is installed and its unit active; its process killed with SIGKILL is restarted by
// systemd (Restart=always); the unit stopped behind Skipper's back with systemctl runs again; a
// new version is switched to through the same unit.
import { createHash } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ProcessModuleReason, type ProcessNodeStatus } from "../gen/skipper/v1/process_pb.js";
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
import { res } from "./helpers/resources.js";
import { bootSystemd, systemdNamespaceUnavailable, type SystemdNamespace } from "./helpers/systemd-namespace.js";

const NODE = "sd-node";
const MODULE = `sd-web-${RUN_ID}`;
const UNIT = `skipper-${MODULE}.service`;
const ID = `sd-${RUN_ID}`;
const SERVER = '#!/bin/sh\nexec busybox httpd -f -p "127.0.0.1:$PORT" -h www\n';
const unavailable = await systemdNamespaceUnavailable();

describe.skipIf(unavailable !== undefined)("a process resource under systemd as PID 1 of a namespace (built controller and agent)", () => {
  let root: string;
  let artifacts: string;
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let sd: SystemdNamespace;
  let port: number;
  const sums: Record<string, string> = {};
  const api = () => ctl.admin(ResourceService);
  const answer = () =>
    fetch(`http://127.0.0.1:${port}/version.txt`).then(
      (r) => r.text(),
      () => "",
    );
  const spec = (version: string) => ({
    spec: {
      module: MODULE,
      version,
      source: { kind: { case: "path" as const, value: join(artifacts, `web-${version}.tar.gz`) } },
      sha256: sums[version]!,
      argv: ["bin/server"],
      env: { PORT: String(port) },
    },
  });
  const reached = (test: (n: ProcessNodeStatus) => boolean) =>
    waitFor(`${ID} on ${NODE}`, async () => {
      const r = (await api().getResource({ resourceType: "process", id: ID })).resource;
      const n = r?.currentState?.kind.case === "process" ? r.currentState.kind.value.nodes.find((x) => x.nodeId === NODE) : undefined;
      return n && test(n) ? n : undefined;
    });
  const mainPid = async () => Number.parseInt((await sd.run(["systemctl", "show", "-p", "MainPID", "--value", UNIT])).stdout.trim(), 10);

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-sd-"));
    artifacts = join(root, "artifacts");
    await mkdir(artifacts);
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
    sd = await bootSystemd(root);
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--process-interval", "300ms"] });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: `unix://${join(root, "no-engine.sock")}`,
      transport: "poll",
      launcher: sd.launcher,
      extraArgs: ["--allow-process-source", artifacts],
    });
  }, 90_000);

  afterAll(async () => {
    // systemd's end ends the namespace: the units' processes and the agent with it.
    await sd?.stop();
    await agent?.stop();
    await ctl?.stop();
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 30_000);

  it("runs the module as a unit, systemd restarts a killed process, a unit stopped by hand runs again, a new version switches", async () => {
    await api().createResource({ resourceType: "process", resource: res("process", ID, { case: "process", value: spec("1.0.0") }) });
    await reached((n) => n.reason === ProcessModuleReason.RUNNING && n.activeVersion === "1.0.0");
    expect((await sd.run(["systemctl", "is-active", UNIT])).stdout.trim()).toBe("active");
    // The node's heartbeats report the module with its unit.
    await waitFor("the node to report the unit", async () => {
      const node = (await api().getResource({ resourceType: "node", id: NODE })).resource!;
      const st = node.currentState?.kind.case === "node" ? node.currentState.kind.value : undefined;
      return st?.processes.find((p) => p.module === MODULE && p.systemdUnit === UNIT && p.state === "running");
    });
    expect(await answer()).toBe("1.0.0");

    // SIGKILL to the unit's main process: systemd starts it again (Restart=always).
    const first = await mainPid();
    expect(first).toBeGreaterThan(0);
    const restarts = async () => Number((await sd.run(["systemctl", "show", "-p", "NRestarts", "--value", UNIT])).stdout.trim());
    expect(await restarts()).toBe(0);
    await sd.run(["kill", "-9", String(first)]);
    await waitFor("systemd to restart the unit", async () => {
      const p = await mainPid();
      return p > 0 && p !== first && (await answer()) === "1.0.0" ? p : undefined;
    });
    await reached((n) => n.reason === ProcessModuleReason.RUNNING && n.pid !== first);
    // systemd's own restart, not the agent's (which leaves a unit in auto-restart alone).
    expect(await restarts()).toBe(1);

    // Stopped with systemctl behind Skipper's back: it runs again (the agent's supervision or the reconciler's START).
    await sd.run(["systemctl", "stop", UNIT]);
    await waitFor("the unit to run again", async () =>
      (await sd.run(["systemctl", "is-active", UNIT])).stdout.trim() === "active" && (await answer()) === "1.0.0" ? true : undefined,
    );

    // A new version: the same unit, through the switched symlink.
    await api().updateResource({
      resourceType: "process",
      id: ID,
      desiredState: { kind: { case: "process", value: spec("2.0.0") } } as never,
    });
    await reached((n) => n.reason === ProcessModuleReason.RUNNING && n.activeVersion === "2.0.0");
    expect(await answer()).toBe("2.0.0");
    expect((await sd.run(["systemctl", "is-active", UNIT])).stdout.trim()).toBe("active");
  }, 180_000);
});
