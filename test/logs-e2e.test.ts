// Container logs and one-off commands end to end: `skipper logs` (the built CLI) against a controller and an agent as
// processes on a real engine. The lines a container printed come back through a read_logs work
// order, stdout to stdout and stderr to stderr, each prefixed with node and container; --tail
// limits them; a secret value the container prints is blanked on the node; a viewer may not read
// logs (they are an operator's); a tenant not on the node is PROJECT_NOT_FOUND.
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  E2E_ADMIN_TOKEN,
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { rpcError } from "./helpers/errors.js";
import { res, tenantConverged } from "./helpers/resources.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! logs-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const NODE = "logs-node";
const TENANT = `logs-shop-${RUN_ID}`;
const SECRET = `sntl-logs-${RUN_ID}-token`;

describe.skipIf(!dockerHost)("skipper logs (real processes and engine)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;
  let env: NodeJS.ProcessEnv;

  function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
      child.once("error", reject);
      child.once("close", (code) => resolve({ code, stdout, stderr }));
    });
  }

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-logs-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      extraArgs: ["--ready-timeout", "30s", "--allow-command", "echo", "--allow-command", "sh"],
    });
    const api = ctl.admin(ResourceService);
    await api.createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE } } }),
    });
    await api.createResource({
      resourceType: "secret",
      resource: res("secret", "logs-keys", { case: "secret", value: { tenantId: TENANT, values: { token: SECRET } } }),
    });
    await api.createResource({
      resourceType: "service",
      resource: res("service", "logs-app", {
        case: "service",
        value: {
          tenantId: TENANT,
          image: "skipper-busybox:local",
          command: [
            "sh",
            "-c",
            'echo "first line"; echo "hello $GREETING"; echo "token=$API_TOKEN"; echo "oops" >&2; trap "exit 0" TERM; sleep 3600 & wait',
          ],
          env: { GREETING: "from the container" },
          secretEnv: { API_TOKEN: { secretId: "logs-keys", key: "token" } },
        },
      }),
    });
    await tenantConverged(api, TENANT, 120_000);
    env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(SKIPPER_|SKIPPY_)/.test(k)));
    Object.assign(env, {
      XDG_CONFIG_HOME: join(root, "config"),
      SKIPPER_SERVER: ctl.url,
      SKIPPER_CA_FILE: ctl.caFile,
      SKIPPER_TOKEN: E2E_ADMIN_TOKEN,
    });
  }, 180_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    if (dockerHost) await removeComposeProject(dockerHost, TENANT);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("prints what the containers wrote, stdout and stderr apart, with the project's secret blanked", async () => {
    // The container prints at start: wait until all its lines are there (a read of the engine).
    const run = await waitFor(
      "the container's lines",
      async () => {
        const r = await cli(["logs", TENANT]);
        return r.code === 0 && r.stdout.includes("token=") ? r : undefined;
      },
      60_000,
    );
    const prefix = `${NODE}/`;
    expect(run.stdout).toMatch(new RegExp(`^${prefix}\\S+ \\| first line$`, "m"));
    expect(run.stdout).toMatch(new RegExp(`^${prefix}\\S+ \\| hello from the container$`, "m"));
    expect(run.stdout).toMatch(new RegExp(`^${prefix}\\S+ \\| token=\\[REDACTED\\]$`, "m"));
    expect(run.stderr).toMatch(new RegExp(`^${prefix}\\S+ \\| oops$`, "m"));
    expect(run.stdout + run.stderr).not.toContain(SECRET);
    // The order's stored result holds no value either.
    const orders = (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId: TENANT, pageSize: 100 })).workOrders;
    const read = orders.filter((o) => o.type === WorkOrderType.READ_LOGS);
    expect(read.length).toBeGreaterThan(0);
    expect(read.every((o) => o.status === WorkOrderStatus.SUCCESS)).toBe(true);
    expect(JSON.stringify(read.map((o) => o.result?.details?.logs.map((c) => c.lines.map((l) => l.text))))).not.toContain(SECRET);
  }, 120_000);

  it("--tail keeps the newest lines; --timestamps prints their times", async () => {
    const r = await cli(["logs", TENANT, "logs-app", "--tail", "1", "--timestamps"]);
    expect(r.code, r.stderr).toBe(0);
    const lines = [...r.stdout.split("\n"), ...r.stderr.split("\n")].filter((l) => l.startsWith(`${NODE}/`));
    // One per stream at most (the last line is on one of them), each with an RFC 3339 time.
    expect(lines.length).toBeGreaterThanOrEqual(1);
    expect(lines.length).toBeLessThanOrEqual(2);
    for (const l of lines) expect(l).toMatch(/ \| \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z /);
  }, 60_000);

  it("a viewer may not read logs; a tenant the node does not run is PROJECT_NOT_FOUND; bad flags exit 1", async () => {
    const viewer = (await ctl.admin(AccessService).createApiKey({ name: "logs-viewer", role: Role.VIEWER })).secret;
    const refused = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [CLI, "logs", TENANT], {
        env: { ...env, SKIPPER_TOKEN: viewer },
        stdio: ["ignore", "ignore", "pipe"],
      });
      let stderr = "";
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
      child.once("close", (code) => resolve({ code, stderr }));
    });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/FORBIDDEN|permission|not allowed/i);

    await ctl
      .admin(ResourceService)
      .createResource({ resourceType: "tenant", resource: res("tenant", "logs-elsewhere", { case: "tenant", value: {} }) });
    const missing = await cli(["logs", "logs-elsewhere", "--node", NODE]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("PROJECT_NOT_FOUND");

    const bad = await cli(["logs", TENANT, "--tail", "0"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/--tail/);
    const e = await rpcError(
      ctl.admin(WorkOrderService).createWorkOrder({
        type: WorkOrderType.READ_LOGS,
        target: { tenantId: TENANT, nodeId: NODE },
        action: { kind: { case: "readLogs", value: { services: ["no/such"] } } },
      }),
    );
    expect([e.code, e.details.field]).toEqual(["INVALID_REQUEST", "action.read_logs.services[0]"]);
  }, 60_000);

  it("node exec runs an allow-listed command on the node, with its output and its exit code; others are refused saying how to allow them", async () => {
    const ok = await cli(["node", "exec", NODE, "--", "echo", "hi", "there"]);
    expect([ok.code, ok.stdout.trim()]).toEqual([0, "hi there"]);
    const failed = await cli(["node", "exec", NODE, "--", "sh", "-c", "echo to-stderr >&2; exit 3"]);
    expect(failed.code).toBe(3);
    expect(failed.stderr).toContain("to-stderr");
    const refused = await cli(["node", "exec", NODE, "--", "ls", "/"]);
    expect(refused.code).toBe(1);
    // The controller knows the node's allow-list (from its heartbeats) and refuses before queueing.
    expect(refused.stderr).toMatch(/"ls" is not on node \S+'s allow-list \(echo, sh\); the agent's --allow-command sets it/);
  }, 60_000);

  it("a node whose agent never reported is named, not asked: logs go on with the others and exit 1; node exec refuses it", async () => {
    const ghost = "logs-ghost";
    await ctl.admin(NodeService).registerNode({ nodeId: ghost });
    // Asked of both: the node's lines, and the ghost named.
    const both = await cli(["logs", TENANT, "--node", NODE, "--node", ghost]);
    expect(both.code).toBe(1);
    expect(both.stdout).toMatch(new RegExp(`^${NODE}/\\S+ \\| hello from the container$`, "m"));
    expect(both.stderr).toContain(
      `${ghost}: offline: its agent has never sent a heartbeat; its logs cannot be read until its agent is back`,
    );
    const exec = await cli(["node", "exec", ghost, "--", "echo", "hi"]);
    expect(exec.code).toBe(1);
    expect(exec.stderr).toContain(`${ghost} is offline: its agent has never sent a heartbeat: it cannot run a command now`);
    // Nothing was queued for it.
    expect((await ctl.admin(WorkOrderService).listWorkOrders({ nodeId: ghost })).workOrders).toEqual([]);
  }, 60_000);

  it("an order a beating node does not take within --claim-timeout is cancelled, and the command says so", async () => {
    // A node that has sent one heartbeat (so it counts as online) but runs no agent to take orders.
    const mute = "logs-mute";
    const { token } = await ctl.admin(NodeService).registerNode({ nodeId: mute });
    const asNode = createConnectTransport({
      baseUrl: `${ctl.url}/v1`,
      httpVersion: "2",
      nodeOptions: { ca: ctl.ca },
      interceptors: [(next) => (req) => (req.header.set("authorization", `Bearer ${token}`), next(req))],
    });
    await createClient(NodeService, asNode).heartbeat({ nodeId: mute });
    const exec = await cli(["node", "exec", mute, "--claim-timeout", "1s", "--", "echo", "hi"]);
    expect(exec.code).toBe(1);
    expect(exec.stderr).toContain(`${mute}: the node did not take the order within 1s; the order was cancelled`);
    const logs = await cli(["logs", TENANT, "--node", NODE, "--node", mute, "--claim-timeout", "1s"]);
    expect(logs.code).toBe(1);
    expect(logs.stdout).toMatch(new RegExp(`^${NODE}/\\S+ \\| hello from the container$`, "m"));
    expect(logs.stderr).toContain(`${mute}: the node did not take the order within 1s; the order was cancelled`);
    // Both orders are cancelled, with the reason: none is left to run when the node turns up.
    const orders = (await ctl.admin(WorkOrderService).listWorkOrders({ nodeId: mute })).workOrders;
    expect(orders.map((o) => [WorkOrderType[o.type], WorkOrderStatus[o.status]]).sort()).toEqual([
      ["EXECUTE_COMMAND", "CANCELLED"],
      ["READ_LOGS", "CANCELLED"],
    ]);
    expect(orders.every((o) => o.result?.message.includes("did not take the order within 1s"))).toBe(true);
    const bad = await cli(["node", "exec", mute, "--claim-timeout", "soon", "--", "echo", "hi"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("--claim-timeout must be a duration");
  }, 60_000);
});
