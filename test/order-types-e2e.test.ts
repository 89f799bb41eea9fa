// Every ad-hoc order type end to end: a controller and an agent as processes, the agent on a real
// Docker engine with an allow-list. Orders are queued with CreateWorkOrder, pushed to the agent,
// run by their executors and reported; what is asserted is what an operator relies on — the
// command output, the file on disk, the restarted container, the sticker, the engine facts, the
// probe verdicts, the process answering on its port — plus order timeouts and expiry.
import { createHash } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { durationFromMs, timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ProcessOperation, type WorkOrderAction } from "../gen/skipper/v1/order_action_pb.js";
import { ConvergenceStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeLiveness } from "../gen/skipper/v1/resource_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { WorkOrderActionSchema } from "../gen/skipper/v1/order_action_pb.js";
import { OFFLINE_AFTER } from "../controller/nodes/node-liveness.js";
import { rpcError } from "./helpers/errors.js";
import {
  RUN_ID,
  removeComposeProject,
  freePort,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! order-types-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const NODE = "ot-node";
const TENANT = `ot-app-${RUN_ID}`;

describe.skipIf(!dockerHost)("ad-hoc work orders of every type (real agent, real engine)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;
  let workDir: string;
  let webPort: number;
  const orders = () => ctl.admin(WorkOrderService);
  const engine = (args: string[]) => execa("docker", args, { env: { DOCKER_HOST: dockerHost! } });

  async function run(
    type: WorkOrderType,
    action: MessageInitShape<typeof WorkOrderActionSchema>["kind"],
    extra: { tenantId?: string; nodeId?: string; timeoutMs?: number; expiresAt?: Date } = {},
  ): Promise<WorkOrder> {
    const { workOrder } = await orders().createWorkOrder({
      type,
      target: { nodeId: extra.nodeId ?? NODE, tenantId: extra.tenantId ?? "" },
      action: { kind: action } as WorkOrderAction,
      timeout: extra.timeoutMs ? durationFromMs(extra.timeoutMs) : undefined,
      expiresAt: extra.expiresAt ? timestampFromDate(extra.expiresAt) : undefined,
    });
    return waitFor(
      `order ${workOrder!.id} to finish`,
      async () => {
        const o = (await orders().getWorkOrder({ id: workOrder!.id })).workOrder!;
        return [WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED].includes(o.status) ? o : undefined;
      },
      60_000,
    );
  }

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-orders-"));
    workDir = join(root, "work");
    webPort = await freePort();
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    const nodes = ctl.admin(NodeService);
    const token = (await nodes.registerNode({ nodeId: NODE })).token;
    await nodes.registerNode({ nodeId: "ot-ghost" }); // registered, never runs an agent
    agent = startAgentProcess({
      transport: "poll", // counts stored heartbeats at the agent's interval; a session beats at the controller's (10 s)
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir,
      dockerHost: dockerHost!,
      // A 1 s interval: the node is judged offline only after 6 s without a heartbeat.
      pollInterval: "1s",
      extraArgs: [
        "--allow-command",
        "echo",
        "--allow-command",
        "sleep",
        "--allow-command",
        "touch",
        "--allow-process-source",
        join(root, "artifacts"),
      ],
    });
    const compose = [
      "services:",
      "  web:",
      "    image: skipper-busybox:local",
      `    command: ["sh", "-c", "mkdir -p /www && echo up > /www/index.html && httpd -f -p 8080 -h /www & trap 'exit 0' TERM; wait"]`,
      "    ports:",
      `      - "127.0.0.1:${webPort}:8080"`,
      "",
    ].join("\n");
    await ctl.admin(ResourceService).createResource({
      resourceType: "tenant",
      resource: {
        id: TENANT,
        resourceType: "tenant",
        desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE }, compose: { composeFile: compose } } } },
      },
    });
    await waitFor(
      "the tenant to converge",
      async () => {
        const t = (await ctl.admin(ResourceService).getResource({ resourceType: "tenant", id: TENANT })).resource;
        return t?.convergence?.status === ConvergenceStatus.CONVERGED ? true : undefined;
      },
      90_000,
    );
  }, 150_000);

  afterAll(async () => {
    await run(WorkOrderType.CONTROL_PROCESS, {
      case: "controlProcess",
      value: { module: "hello", operation: ProcessOperation.STOP },
    }).catch(() => undefined);
    await agent?.stop();
    await ctl?.stop();
    const ids = (await engine(["ps", "-aq", "--filter", `label=com.docker.compose.project=${TENANT}`]).catch(() => ({ stdout: "" }))).stdout
      .split("\n")
      .filter(Boolean);
    if (ids.length > 0) await engine(["rm", "-f", ...ids]).catch(() => undefined);
    if (dockerHost) await removeComposeProject(dockerHost, TENANT);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("execute_command runs an allow-listed program with its arguments taken literally", async () => {
    const node = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource!;
    const caps = node.currentState?.kind.case === "node" ? node.currentState.kind.value.capabilities : undefined;
    expect(caps?.allowedCommands).toEqual(["echo", "sleep", "touch"]);
    const trap = join(root, "pwned");
    const o = await run(WorkOrderType.EXECUTE_COMMAND, {
      case: "executeCommand",
      value: { command: { argv: ["echo", `a; touch ${trap}`, `$(touch ${trap})`, `\`touch ${trap}\``] } },
    });
    expect(o.result?.code).toBe("COMMAND_OK");
    expect(o.result?.details?.command?.stdout).toBe(`a; touch ${trap} $(touch ${trap}) \`touch ${trap}\`\n`);
    await expect(stat(trap)).rejects.toThrow();
    // Off the list: the controller refuses it before anything is queued.
    const before = (await orders().listWorkOrders({ nodeId: NODE, pageSize: 500 })).workOrders.length;
    const refused = await rpcError(
      orders().createWorkOrder({
        type: WorkOrderType.EXECUTE_COMMAND,
        target: { nodeId: NODE },
        action: { kind: { case: "executeCommand", value: { command: { argv: ["sh", "-c", `touch ${trap}`] } } } },
      }),
    );
    expect(refused).toMatchObject({
      code: "CONFLICT",
      connectCode: Code.Aborted,
      details: { reason: "COMMAND_NOT_ALLOWED", node_id: NODE },
    });
    expect(refused.message).toMatch(/allow-list/);
    expect((await orders().listWorkOrders({ nodeId: NODE, pageSize: 500 })).workOrders.length).toBe(before);
    await expect(stat(trap)).rejects.toThrow();
  }, 60_000);

  it("an order's timeout stops it on the node (TIMEOUT); an order no node claims in time expires (EXPIRED)", async () => {
    const o = await run(
      WorkOrderType.EXECUTE_COMMAND,
      { case: "executeCommand", value: { command: { argv: ["sleep", "30"] } } },
      { timeoutMs: 1000 },
    );
    expect(o.status).toBe(WorkOrderStatus.FAILED);
    expect(o.result?.code).toBe("TIMEOUT");
    // Stopped, not waited out: `sleep 30` was killed by a signal (no exit code) instead of
    // exiting 0 after its 30 s.
    expect(o.result?.message).toMatch(/stopped/);
    expect(o.result?.details?.command?.program).toBe("sleep");
    expect(o.result?.details?.command?.exitCode).toBe(-1);
    // expires_at must still be in the future when the controller gets the order: on a machine
    // too slow for that, the window widens and the order is queued again.
    let e: WorkOrder | undefined;
    for (let windowMs = 800; !e; windowMs *= 2) {
      const expiresAt = new Date(Date.now() + windowMs);
      e = await run(WorkOrderType.INSPECT, { case: "inspect", value: {} }, { nodeId: "ot-ghost", expiresAt }).catch((err: unknown) => {
        const refused = ConnectError.from(err);
        if (refused.code === Code.InvalidArgument && refused.rawMessage.includes("expires_at must be in the future") && windowMs < 60_000)
          return undefined;
        throw err;
      });
    }
    expect(e.status).toBe(WorkOrderStatus.FAILED);
    expect(e.result?.code).toBe("EXPIRED");
    expect(e.attempts).toHaveLength(0);
  }, 60_000);

  it("a node stays online while an order runs for many heartbeat intervals", async () => {
    // The order runs until the controller has seen more heartbeats from the node during it than
    // the silence that would mark the node offline (six intervals), then it is cancelled. (Three
    // missed intervals make it degraded, which a stalled machine may cause; offline would need
    // a six-interval (6 s) stall.)
    const since = timestampFromDate(new Date());
    const { workOrder } = await orders().createWorkOrder({
      type: WorkOrderType.EXECUTE_COMMAND,
      target: { nodeId: NODE },
      action: { kind: { case: "executeCommand", value: { command: { argv: ["sleep", "600"] } } } },
    });
    const id = workOrder!.id;
    const running = await waitFor(
      "the order to run",
      async () => {
        const o = (await orders().getWorkOrder({ id })).workOrder!;
        return o.status === WorkOrderStatus.RUNNING ? o : undefined;
      },
      30_000,
      50,
    );
    const startedAt = timestampDate(running.startedAt!).getTime();
    const beats = new Set<number>();
    await waitFor(
      "heartbeats during the order",
      async () => {
        const n = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource!;
        const at =
          n.currentState?.kind.case === "node" && n.currentState.kind.value.lastHeartbeatAt
            ? timestampDate(n.currentState.kind.value.lastHeartbeatAt).getTime()
            : 0;
        if (at > startedAt) beats.add(at);
        return beats.size > OFFLINE_AFTER ? true : undefined;
      },
      60_000,
      100,
    );
    // They all came while it ran.
    expect((await orders().getWorkOrder({ id })).workOrder!.status).toBe(WorkOrderStatus.RUNNING);
    await orders().cancelWorkOrder({ id, reason: "enough heartbeats seen" });
    const o = await waitFor(
      "the order to stop",
      async () => {
        const w = (await orders().getWorkOrder({ id })).workOrder!;
        return w.finishedAt ? w : undefined;
      },
      30_000,
    );
    expect(o.result?.code).toBe("CANCELLED");
    expect((await ctl.admin(EventService).listEvents({ type: "node_offline", resourceId: NODE, since })).events.map((e) => e.type)).toEqual(
      [],
    );
    await waitFor("the node online", async () => {
      const node = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource!;
      return node.currentState?.kind.case === "node" && node.currentState.kind.value.liveness === NodeLiveness.ONLINE ? true : undefined;
    });
  }, 90_000);

  it("upload_files writes the tenant's file atomically with its mode; a second upload changes nothing", async () => {
    const content = Buffer.from("listen 8080\n");
    const sha256 = createHash("sha256").update(content).digest("hex");
    const file = { path: "conf/app.conf", content, sha256, mode: 0o640 };
    const o = await run(WorkOrderType.UPLOAD_FILES, { case: "uploadFiles", value: { files: [file] } }, { tenantId: TENANT });
    expect(o.result?.code).toBe("UPLOAD_OK");
    const path = join(workDir, "tenants", TENANT, "conf", "app.conf");
    expect(await readFile(path, "utf8")).toBe("listen 8080\n");
    expect((await stat(path)).mode & 0o777).toBe(0o640);
    expect(o.result?.details?.files[0]).toMatchObject({ path, sha256, changed: true });
    const again = await run(WorkOrderType.UPLOAD_FILES, { case: "uploadFiles", value: { files: [file] } }, { tenantId: TENANT });
    expect(again.result?.details?.files[0]?.changed).toBe(false);
  }, 60_000);

  it("restart_service restarts the container in place; health_check and inspect report what runs", async () => {
    const id = (await engine(["ps", "-q", "--no-trunc", "--filter", `label=com.docker.compose.project=${TENANT}`])).stdout.trim();
    const startedAt = async () => (await engine(["inspect", "--format", "{{.State.StartedAt}}", id])).stdout.trim();
    const before = await startedAt();
    const r = await run(WorkOrderType.RESTART_SERVICE, { case: "restartService", value: { services: ["web"] } }, { tenantId: TENANT });
    expect(r.result?.code).toBe("RESTART_OK");
    expect(await startedAt()).not.toBe(before);
    expect((await engine(["ps", "-q", "--no-trunc", "--filter", `label=com.docker.compose.project=${TENANT}`])).stdout.trim()).toBe(id);

    const healthy = await run(
      WorkOrderType.HEALTH_CHECK,
      {
        case: "healthCheck",
        value: {
          probes: [
            { kind: { case: "tcp", value: { host: "127.0.0.1", port: webPort } } },
            { kind: { case: "http", value: { url: `http://127.0.0.1:${webPort}/` } } },
          ],
        },
      },
      { tenantId: TENANT },
    );
    expect(healthy.result?.code).toBe("HEALTHY");
    expect(healthy.result?.details?.probes.map((p) => p.ok)).toEqual([true, true]);
    const closed = await freePort();
    const sick = await run(WorkOrderType.HEALTH_CHECK, {
      case: "healthCheck",
      value: { probes: [{ kind: { case: "tcp", value: { host: "127.0.0.1", port: closed } } }] },
    });
    expect(sick.result?.code).toBe("UNHEALTHY");
    expect(sick.result?.message).toContain(`tcp 127.0.0.1:${closed}`);

    const facts = await run(WorkOrderType.INSPECT, { case: "inspect", value: {} });
    expect(facts.result?.code).toBe("INSPECT_OK");
    expect(facts.result?.details?.projects.map((p) => p.tenantId)).toContain(TENANT);
    expect(facts.result?.details?.images.some((i) => i.repoTags.includes("skipper-busybox:local"))).toBe(true);
  }, 90_000);

  it("write_sticker records the release with the engine's image digests; read_sticker returns it", async () => {
    const w = await run(
      WorkOrderType.WRITE_STICKER,
      { case: "writeSticker", value: { sticker: { releaseId: "2026.11.23-1", deploymentId: "dep-1" } } },
      { tenantId: TENANT },
    );
    expect(w.result?.code).toBe("STICKER_OK");
    const imageId = (await engine(["image", "inspect", "--format", "{{.Id}}", "skipper-busybox:local"])).stdout.trim();
    expect(w.result?.details?.sticker?.imageDigests).toEqual({ web: imageId });
    const r = await run(WorkOrderType.READ_STICKER, { case: "readSticker", value: {} }, { tenantId: TENANT });
    expect(r.result?.code).toBe("STICKER_OK");
    expect(r.result?.details?.sticker).toMatchObject({
      releaseId: "2026.11.23-1",
      deploymentId: "dep-1",
      tenantId: TENANT,
      nodeId: NODE,
      imageDigests: { web: imageId },
    });
  }, 60_000);

  it("exec_service runs a command in the service's container with its exit code and output", async () => {
    const ok = await run(
      WorkOrderType.EXEC_SERVICE,
      { case: "execService", value: { service: "web", argv: ["cat", "/www/index.html"] } },
      { tenantId: TENANT },
    );
    expect(ok.result?.code).toBe("EXEC_OK");
    expect(ok.result?.details?.exec).toMatchObject({ service: "web", exitCode: 0, stdout: "up\n" });
    const failed = await run(
      WorkOrderType.EXEC_SERVICE,
      { case: "execService", value: { service: "web", argv: ["sh", "-c", "echo nope >&2; exit 4"] } },
      { tenantId: TENANT },
    );
    expect(failed.status).toBe(WorkOrderStatus.FAILED);
    expect(failed.result).toMatchObject({ code: "EXEC_FAILED", retriable: false });
    expect(failed.result?.details?.exec).toMatchObject({ exitCode: 4, stderr: "nope\n" });
  }, 60_000);

  it("deploy_process installs a versioned process that answers and shows in the node's status; control_process stops it", async () => {
    const port = await freePort();
    const src = join(root, "hello-src");
    await mkdir(join(root, "artifacts"), { recursive: true });
    await mkdir(join(src, "bin"), { recursive: true });
    await mkdir(join(src, "www"), { recursive: true });
    await writeFile(join(src, "VERSION"), "1.2.0\n");
    await writeFile(join(src, "www", "index.html"), "hello 1.2.0\n");
    await writeFile(join(src, "bin", "server"), `#!/bin/sh\nexec busybox httpd -f -p "127.0.0.1:$PORT" -h www\n`);
    await chmod(join(src, "bin", "server"), 0o755);
    const artifact = join(root, "artifacts", "hello-1.2.0.tar.gz");
    await execa("tar", ["-czf", artifact, "-C", src, "."]);
    const sha256 = createHash("sha256")
      .update(await readFile(artifact))
      .digest("hex");
    // A source outside the node's --allow-process-source is refused before anything is queued.
    const outside = await rpcError(
      orders().createWorkOrder({
        type: WorkOrderType.DEPLOY_PROCESS,
        target: { nodeId: NODE },
        action: {
          kind: {
            case: "deployProcess",
            value: {
              spec: {
                module: "hello",
                version: "1.2.0",
                source: { kind: { case: "path", value: join(root, "hello-src", "x.tgz") } },
                sha256,
                argv: ["bin/server"],
              },
            },
          },
        },
      }),
    );
    expect(outside).toMatchObject({ code: "CONFLICT", details: { reason: "PROCESS_SOURCE_NOT_ALLOWED" } });
    const d = await run(WorkOrderType.DEPLOY_PROCESS, {
      case: "deployProcess",
      value: {
        spec: {
          module: "hello",
          version: "1.2.0",
          source: { kind: { case: "path", value: artifact } },
          sha256,
          argv: ["bin/server"],
          env: { PORT: String(port) },
        },
      },
    });
    expect(d.result?.code).toBe("PROCESS_OK");
    expect(d.result?.details?.process).toMatchObject({ module: "hello", activeVersion: "1.2.0", state: "running" });
    expect((await (await fetch(`http://127.0.0.1:${port}/`)).text()).trim()).toBe("hello 1.2.0");
    await waitFor(
      "the node to report the module",
      async () => {
        const n = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource!;
        const procs = n.currentState?.kind.case === "node" ? n.currentState.kind.value.processes : [];
        return procs.some((p) => p.module === "hello" && p.state === "running" && p.activeVersion === "1.2.0") ? true : undefined;
      },
      30_000,
    );
    const s = await run(WorkOrderType.CONTROL_PROCESS, {
      case: "controlProcess",
      value: { module: "hello", operation: ProcessOperation.STOP },
    });
    expect(s.result?.code).toBe("PROCESS_OK");
    await expect(fetch(`http://127.0.0.1:${port}/`)).rejects.toThrow();
  }, 90_000);
});
