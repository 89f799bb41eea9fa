// The `process` resource end to end: the built controller and agent as processes over HTTP/2 +
// TLS, no Docker engine (DOCKER_HOST points nowhere), the agent on the unary transport with a
// 200 ms heartbeat so its supervision and reports come quickly. One node, one module (a busybox
// httpd that serves its version), through its life:
//   - a version a one-off deploy_process installed is adopted: no order at all;
//   - killed with SIGKILL, the agent's supervisor starts it again (a new pid, RUNNING);
//   - stopped through the agent's own control (a one-off control_process STOP, so it stays
//     stopped), the reconciler queues a control_process START and it runs again;
//   - a new version is switched to; back to the old one, installed, with its archive gone: no download;
//   - "latest" with the source unreachable: the newest installed version runs, resolved offline;
//   - the controller stopped, the agent killed and the process killed: the restarted agent runs
//     the newest installed version on its own; the controller back reports it, resolved offline;
//   - a selector the node no longer matches stops the module (its versions stay installed).
// And a module a tenant declares is refused as a process resource, naming the owner.
import { createHash } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ProcessOperation } from "../gen/skipper/v1/order_action_pb.js";
import { ProcessModuleReason, type ProcessNodeStatus } from "../gen/skipper/v1/process_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { readRunState } from "../agent/process/run-state.js";
import { isSameProcess } from "../agent/process/supervisor.js";
import { installedVersions } from "../agent/process/versions.js";
import {
  E2E_ADMIN_TOKEN,
  RUN_ID,
  freePort,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { res } from "./helpers/resources.js";
import { rpcError } from "./helpers/errors.js";

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const NODE = "prc-node";
const MODULE = `prc-web-${RUN_ID}`;
const ID = `web-${RUN_ID}`;
const SERVER = '#!/bin/sh\nexec busybox httpd -f -p "127.0.0.1:$PORT" -h www\n';

describe("a process resource (built controller and agent, no Docker engine)", () => {
  let root: string;
  let artifacts: string;
  let workDir: string;
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let port: number;
  let deadSource: string;
  let token: string;
  const sums: Record<string, string> = {};
  const api = () => ctl.admin(ResourceService);
  const answer = () =>
    fetch(`http://127.0.0.1:${port}/version.txt`).then(
      (r) => r.text(),
      () => "",
    );
  const spec = (version: string, source?: string, selector: Record<string, string> = {}) => ({
    spec: {
      module: MODULE,
      version,
      source: {
        kind: source?.startsWith("http")
          ? { case: "url" as const, value: source }
          : { case: "path" as const, value: source ?? join(artifacts, `web-${version}.tar.gz`) },
      },
      sha256: sums[version] ?? sums["2.0.0"]!,
      argv: ["bin/server"],
      env: { PORT: String(port) },
    },
    nodeSelector: selector,
  });
  const nodeStatus = async (): Promise<ProcessNodeStatus | undefined> => {
    const r = (await api().getResource({ resourceType: "process", id: ID })).resource;
    return r?.currentState?.kind.case === "process" ? r.currentState.kind.value.nodes.find((n) => n.nodeId === NODE) : undefined;
  };
  const reached = (reason: ProcessModuleReason, test: (n: ProcessNodeStatus) => boolean = () => true, ms = 60_000) =>
    waitFor(
      `${ProcessModuleReason[reason]} on ${NODE}`,
      async () => {
        const n = await nodeStatus();
        return n?.reason === reason && test(n) ? n : undefined;
      },
      ms,
    );
  const processOrders = async () =>
    (await ctl.admin(WorkOrderService).listWorkOrders({ nodeId: NODE, pageSize: 200 })).workOrders.filter((o) => o.id.startsWith("prc-"));
  const update = async (desired: ReturnType<typeof spec>) => {
    await api().updateResource({ resourceType: "process", id: ID, desiredState: { kind: { case: "process", value: desired } } as never });
  };
  const startAgent = () =>
    startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir,
      dockerHost: `unix://${join(root, "no-engine.sock")}`,
      transport: "poll",
      extraArgs: ["--allow-process-source", artifacts, "--allow-process-source", deadSource],
    });

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-prc-"));
    artifacts = join(root, "artifacts");
    workDir = join(root, "work");
    await mkdir(artifacts);
    for (const v of ["1.0.0", "2.0.0"]) {
      const src = join(root, `src-${v}`);
      await mkdir(join(src, "bin"), { recursive: true });
      await mkdir(join(src, "www"));
      await writeFile(join(src, "www", "version.txt"), v);
      await writeFile(join(src, "VERSION"), v);
      await writeFile(join(src, "bin", "server"), SERVER);
      await chmod(join(src, "bin", "server"), 0o755);
      await execa("tar", ["-czf", join(artifacts, `web-${v}.tar.gz`), "-C", src, "."]);
      sums[v] = createHash("sha256")
        .update(await readFile(join(artifacts, `web-${v}.tar.gz`)))
        .digest("hex");
    }
    port = await freePort();
    // A URL nothing listens on: the "latest" source that cannot be reached.
    deadSource = `http://127.0.0.1:${await freePort()}/`;
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--process-interval", "300ms"] });
    token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = startAgent();
  }, 60_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    const s = await readRunState(workDir, MODULE).catch(() => undefined);
    if (s && (await isSameProcess(s.pid, s.startTicks))) process.kill(-s.pid, "SIGKILL");
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 30_000);

  it("a module a tenant declares is refused as a process resource, naming the tenant", async () => {
    const tenant = `prc-t-${RUN_ID}`;
    const claimed = { ...spec("1.0.0"), spec: { ...spec("1.0.0").spec, module: `claimed-${RUN_ID}` } };
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", tenant, {
        case: "tenant",
        value: { deploymentPolicy: { nodeSelector: { role: "none" } }, processes: [{ spec: claimed.spec }] },
      }),
    });
    const err = await rpcError(
      api().createResource({ resourceType: "process", resource: res("process", `claimed-${RUN_ID}`, { case: "process", value: claimed }) }),
    );
    expect(err.code).toBe("INVALID_REQUEST");
    expect(err.details).toMatchObject({ reason: "MODULE_CLAIMED_BY_TENANT", module_owner: `tenant/${tenant}` });
    expect(err.message).toMatch(new RegExp(`declared by tenant ${tenant}`));
    await api().deleteResource({ resourceType: "tenant", id: tenant });

    // And the other way: a tenant may not declare a process resource's module.
    const free = { ...spec("1.0.0", undefined, { role: "nowhere" }), spec: { ...spec("1.0.0").spec, module: `free-${RUN_ID}` } };
    await api().createResource({ resourceType: "process", resource: res("process", `free-${RUN_ID}`, { case: "process", value: free }) });
    const back = await rpcError(
      api().createResource({
        resourceType: "tenant",
        resource: res("tenant", `${tenant}-2`, {
          case: "tenant",
          value: { deploymentPolicy: { nodeSelector: { role: "none" } }, processes: [{ spec: free.spec }] },
        }),
      }),
    );
    expect([back.code, back.details.reason, back.details.module_owner]).toEqual([
      "INVALID_REQUEST",
      "MODULE_CLAIMED_BY_PROCESS",
      `process/free-${RUN_ID}`,
    ]);
    // Nor another process resource, whatever its selector.
    const twin = { ...free, nodeSelector: { role: "elsewhere" } };
    const again = await rpcError(
      api().createResource({ resourceType: "process", resource: res("process", `twin-${RUN_ID}`, { case: "process", value: twin }) }),
    );
    expect([again.code, again.details.reason, again.details.module_owner]).toEqual([
      "INVALID_REQUEST",
      "MODULE_CLAIMED_BY_PROCESS",
      `process/free-${RUN_ID}`,
    ]);
    await api().deleteResource({ resourceType: "process", id: `free-${RUN_ID}` });
  });

  it("adopts, repairs a kill and a stop, switches versions, falls back offline to the newest installed, and stops off-selector", async () => {
    // Installed by a one-off order before any resource: adopted as it runs.
    const oneOff = await ctl.admin(WorkOrderService).createWorkOrder({
      type: WorkOrderType.DEPLOY_PROCESS,
      target: { nodeId: NODE },
      action: { kind: { case: "deployProcess", value: { spec: spec("1.0.0").spec } } },
    });
    await waitFor("the one-off deploy", async () => {
      const o = (await ctl.admin(WorkOrderService).getWorkOrder({ id: oneOff.workOrder!.id })).workOrder;
      return o?.status === WorkOrderStatus.SUCCESS ? o : undefined;
    });
    const firstPid = (await readRunState(workDir, MODULE)).pid;
    // What adoption starts from: the node has reported the module running.
    await waitFor("the node to report the module", async () => {
      const n = (await api().getResource({ resourceType: "node", id: NODE })).resource!;
      const st = n.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
      return st?.processes.some((p) => p.module === MODULE && p.pid === firstPid) ? true : undefined;
    });
    await api().createResource({ resourceType: "process", resource: res("process", ID, { case: "process", value: spec("1.0.0") }) });
    const adopted = await reached(ProcessModuleReason.RUNNING);
    expect([adopted.activeVersion, adopted.pid]).toEqual(["1.0.0", firstPid]);
    expect(await processOrders()).toEqual([]);

    // SIGKILL behind Skipper's back: the agent's supervisor starts it again.
    process.kill(firstPid, "SIGKILL");
    const revived = await reached(ProcessModuleReason.RUNNING, (n) => n.pid > 0 && n.pid !== firstPid);
    expect(await answer()).toBe("1.0.0");

    // Stopped through the agent's own control (it stays stopped for the supervisor): the reconciler starts it.
    const earlier = new Set((await processOrders()).map((o) => o.id));
    await ctl.admin(WorkOrderService).createWorkOrder({
      type: WorkOrderType.CONTROL_PROCESS,
      target: { nodeId: NODE },
      action: { kind: { case: "controlProcess", value: { module: MODULE, operation: ProcessOperation.STOP } } },
    });
    const started = await waitFor("the reconciler's START", async () =>
      (await processOrders()).find(
        (o) => !earlier.has(o.id) && o.type === WorkOrderType.CONTROL_PROCESS && o.status === WorkOrderStatus.SUCCESS,
      ),
    );
    expect(started.action?.kind.case === "controlProcess" && started.action.kind.value.operation).toBe(ProcessOperation.START);
    const again = await reached(ProcessModuleReason.RUNNING, (n) => n.pid > 0 && n.pid !== revived.pid);
    expect(again.activeVersion).toBe("1.0.0");
    const events = (await ctl.admin(EventService).listEvents({ type: "process_status_changed", resourceId: ID, pageSize: 100 })).events;
    expect(events.map((e) => e.data?.to)).toContain("STARTING");

    // A new version is switched to; back to 1.0.0 with its archive gone: installed, so no download.
    await update(spec("2.0.0"));
    await reached(ProcessModuleReason.RUNNING, (n) => n.activeVersion === "2.0.0");
    expect(await answer()).toBe("2.0.0");
    await rm(join(artifacts, "web-1.0.0.tar.gz"));
    await update(spec("1.0.0"));
    await reached(ProcessModuleReason.RUNNING, (n) => n.activeVersion === "1.0.0");
    expect(await answer()).toBe("1.0.0");
    expect(await installedVersions(workDir, MODULE)).toEqual(["1.0.0", "2.0.0"]);

    // A version that cannot be had: VERSION_UNAVAILABLE, 1.0.0 runs on, and each retry waits its
    // backoff (twice the 300 ms interval, doubling), one order at a time.
    await update(spec("3.0.0"));
    const failing = await reached(ProcessModuleReason.VERSION_UNAVAILABLE, (n) => n.failures >= 2);
    expect(await answer()).toBe("1.0.0");
    const tries = (await processOrders())
      .filter((o) => o.action?.kind.case === "deployProcess" && o.action.kind.value.spec?.version === "3.0.0")
      .sort((a, b) => timestampMs(a.createdAt!) - timestampMs(b.createdAt!));
    expect(tries.length).toBeGreaterThanOrEqual(failing.failures);
    expect(tries.length).toBeLessThanOrEqual(failing.failures + 1);
    for (let i = 1; i < failing.failures; i++) {
      expect(tries[i - 1]?.result?.code).toBe("SOURCE_UNAVAILABLE");
      expect(timestampMs(tries[i]!.createdAt!) - timestampMs(tries[i - 1]!.finishedAt!)).toBeGreaterThanOrEqual(600 * 2 ** (i - 1));
    }

    // "latest" from a source nobody answers: the newest installed version, 2.0.0, resolved offline.
    await update(spec("latest", `${deadSource}web.tar.gz`));
    const offline = await reached(ProcessModuleReason.RUNNING, (n) => n.activeVersion === "2.0.0" && n.resolvedOffline);
    expect(offline.message).toMatch(/newest installed/);
    expect(await answer()).toBe("2.0.0");
    // What `skipper get processes -o wide` shows of it (the built CLI).
    const cliEnv = { ...process.env, SKIPPER_SERVER: ctl.url, SKIPPER_CA_FILE: ctl.caFile, SKIPPER_TOKEN: E2E_ADMIN_TOKEN, NO_COLOR: "1" };
    // A module resolved offline is asked for again on its backoff, and shows DOWNLOADING while that
    // order runs: the table is read until it shows the module running between two such retries.
    const table = await waitFor("the CLI's table to show the module running offline", async () => {
      const t = await execa(process.execPath, [CLI, "get", "processes", "-o", "wide"], { env: cliEnv, reject: false });
      expect(t.exitCode, t.stderr).toBe(0);
      return t.stdout.includes(`${NODE}:RUNNING@2.0.0(offline)`) ? t : undefined;
    });
    expect(table.stdout, table.stderr).toMatch(new RegExp(`${ID}\\s+${MODULE}\\s+latest\\s+running\\s+1 RUNNING`));

    // The controller goes, the agent restarts without it, the process is killed: the agent runs the newest installed version on its own.
    const ctlPort = Number(new URL(ctl.url).port);
    await ctl.stop();
    await agent.kill();
    const before = await readRunState(workDir, MODULE);
    process.kill(before.pid, "SIGKILL");
    agent = startAgent();
    await waitFor("the agent to start the module again", async () => {
      const s = await readRunState(workDir, MODULE);
      return s.pid !== before.pid && (await isSameProcess(s.pid, s.startTicks)) && (await answer()) === "2.0.0" ? s : undefined;
    });
    expect((await readRunState(workDir, MODULE)).resolvedOffline).toBe(true);
    ctl = await startControllerProcess({ dataDir: join(root, "data"), port: ctlPort, extraArgs: ["--process-interval", "300ms"] });
    await reached(ProcessModuleReason.RUNNING, (n) => n.activeVersion === "2.0.0" && n.resolvedOffline && n.pid !== before.pid);

    // The node disabled takes no orders: a selector it no longer matches leaves the module running
    // there (NODE_DISABLED) rather than freezing the resource on a STOP dispatch refuses.
    const setDisabled = (disabled: boolean) =>
      api().updateResource({ resourceType: "node", id: NODE, desiredState: { kind: { case: "node", value: { disabled } } } as never });
    await setDisabled(true);
    await update(spec("latest", `${deadSource}web.tar.gz`, { role: "nowhere" }));
    await reached(ProcessModuleReason.NODE_DISABLED);
    expect(await answer()).toBe("2.0.0");
    // Enabled again: a selector the node does not match stops it, its versions kept, and it leaves the status.
    await setDisabled(false);
    await update(spec("latest", `${deadSource}web.tar.gz`, { role: "nowhere" }));
    await waitFor("the module to stop", async () => ((await nodeStatus()) === undefined && (await answer()) === "" ? true : undefined));
    expect(await readRunState(workDir, MODULE)).toMatchObject({ desired: "stopped", pid: 0 });
    expect(await installedVersions(workDir, MODULE)).toEqual(["1.0.0", "2.0.0"]);
    // Every order the reconciler made ended, one at a time: none open, none failed but the offline ones.
    const mine = await processOrders();
    expect(mine.filter((o) => o.status === WorkOrderStatus.PENDING || o.status === WorkOrderStatus.RUNNING)).toEqual([]);
  }, 240_000);
});
