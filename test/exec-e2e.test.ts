// `skipper exec TENANT SERVICE -- CMD` end to end: the built CLI against a controller and two agents
// as processes, each on its own real Docker engine, a tenant placed on both. Asserted: each node's
// output comes from its own container (the hostname Docker gave it, read from that engine), the
// exit code is the command's (the first non-zero one across nodes), --node picks one node and
// drops the prefix, stdin (-i without -t: with the order, refused over its cap before anything is
// queued) and env reach the command, a viewer's key is refused with nothing queued, and the audit
// trail names each queued order, which holds the argv. Terminals (-t: TerminalService.Attach
// relayed over the node's session, the CLI a child process with pipes, the tty the container's): a
// tty, its size from the open and from a resize frame, typed input and the exit code, stdin
// streamed without a tty byte-exact past 1 MiB, a viewer refused with nothing run, the client
// going closes the command, the audit entry and event name the terminal and argv.
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { AuditService } from "../gen/skipper/v1/audit_service_pb.js";
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
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { res, tenantConverged } from "./helpers/resources.js";
import { terminalCases } from "./helpers/terminal-cases.js";

const hostA = process.env.SKIPPER_TEST_DOCKER_HOST;
const hostB = process.env.SKIPPER_TEST_DOCKER_HOST_B;
if (!hostA || !hostB) console.warn("!!! exec-e2e.test.ts SKIPPED: needs two Docker engines (see test/global-setup.ts)");

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const TENANT = `exec-shop-${RUN_ID}`;
const SERVICE = "exec-web";
const NODES = [
  ["exec-a", hostA],
  ["exec-b", hostB],
] as const;

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe.skipIf(!hostA || !hostB)("skipper exec (two nodes, real processes and engines)", () => {
  let ctl: ControllerProcess;
  const agents: AgentProcess[] = [];
  let root: string;
  let env: NodeJS.ProcessEnv;
  /** Each node's container hostname, as its own engine reports it. */
  const hostnames = new Map<string, string>();
  const orders = () => ctl.admin(WorkOrderService);
  const execOrders = async () =>
    (await orders().listWorkOrders({ tenantId: TENANT, pageSize: 500 })).workOrders.filter((o) => o.type === WorkOrderType.EXEC_SERVICE);

  function cli(args: string[], opts: { token?: string; input?: string | Buffer; env?: NodeJS.ProcessEnv } = {}): Promise<CliRun> {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [CLI, ...args], {
        env: { ...env, ...opts.env, ...(opts.token ? { SKIPPER_TOKEN: opts.token } : {}) },
        stdio: [opts.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout?.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
      child.stderr?.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
      child.once("error", reject);
      child.once("close", (code) => resolve({ code, stdout, stderr }));
      // The CLI may leave before it read all of it (input over a cap is refused unread): no EPIPE.
      child.stdin?.on("error", () => undefined);
      if (opts.input !== undefined) child.stdin?.end(opts.input);
    });
  }

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-exec-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    for (const [nodeId, dockerHost] of NODES) {
      const token = (await ctl.admin(NodeService).registerNode({ nodeId, labels: { pool: "exec" } })).token;
      agents.push(
        startAgentProcess({
          controller: ctl,
          nodeId,
          token,
          stateDir: join(root, nodeId, "state"),
          workDir: join(root, nodeId, "work"),
          dockerHost: dockerHost!,
          extraArgs: ["--ready-timeout", "30s"],
        }),
      );
    }
    const api = ctl.admin(ResourceService);
    await api.createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, { case: "tenant", value: { deploymentPolicy: { nodeSelector: { pool: "exec" } } } }),
    });
    await api.createResource({
      resourceType: "service",
      resource: res("service", SERVICE, {
        case: "service",
        value: {
          tenantId: TENANT,
          image: "skipper-busybox:local",
          command: ["sh", "-c", 'trap "exit 0" TERM; sleep 3600 & wait'],
          env: { GREETING: "hello" },
        },
      }),
    });
    await tenantConverged(api, TENANT, 120_000);
    for (const [nodeId, dockerHost] of NODES) {
      const docker = (...args: string[]) => execa("docker", args, { env: { DOCKER_HOST: dockerHost! } });
      const ids = (
        await docker(
          "ps",
          "-q",
          "--filter",
          `label=com.docker.compose.project=${TENANT}`,
          "--filter",
          `label=com.docker.compose.service=${SERVICE}`,
        )
      ).stdout
        .split("\n")
        .filter(Boolean);
      expect(ids, `${nodeId} runs one container of ${SERVICE}`).toHaveLength(1);
      hostnames.set(nodeId, (await docker("inspect", "-f", "{{.Config.Hostname}}", ids[0]!)).stdout.trim());
    }
    expect(new Set(hostnames.values()).size).toBe(2);
    env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(SKIPPER_|SKIPPY_)/.test(k)));
    Object.assign(env, {
      XDG_CONFIG_HOME: join(root, "config"),
      SKIPPER_SERVER: ctl.url,
      SKIPPER_CA_FILE: ctl.caFile,
      SKIPPER_TOKEN: E2E_ADMIN_TOKEN,
    });
  }, 180_000);

  afterAll(async () => {
    for (const a of agents) await a.stop();
    await ctl?.stop();
    for (const [, h] of NODES) if (h) await removeComposeProject(h, TENANT);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("runs on every node the tenant runs on, each line prefixed with its node, from that node's own container", async () => {
    const r = await cli(["exec", TENANT, SERVICE, "--", "sh", "-c", 'cat /etc/hostname; echo "$GREETING" >&2']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split("\n").filter(Boolean).sort()).toEqual([
      `exec-a | ${hostnames.get("exec-a")}`,
      `exec-b | ${hostnames.get("exec-b")}`,
    ]);
    expect(r.stderr.split("\n").filter(Boolean).sort()).toEqual(["exec-a | hello", "exec-b | hello"]);
  }, 60_000);

  it("the exit code is the command's: the first non-zero one across nodes", async () => {
    // Exits 7 only in exec-b's container.
    const r = await cli(["exec", TENANT, SERVICE, "--", "sh", "-c", `test "$(hostname)" = "${hostnames.get("exec-b")}" && exit 7; exit 0`]);
    expect(r.code).toBe(7);
    expect(r.stderr).toContain("exec-b: exit code 7");
    expect(r.stderr).not.toContain("exec-a: exit code");
  }, 60_000);

  it("--node picks one node: its output unprefixed, its exit code, stdin and env passed", async () => {
    const one = await cli(["exec", TENANT, SERVICE, "--node", "exec-a", "--", "cat", "/etc/hostname"]);
    expect([one.code, one.stdout]).toEqual([0, `${hostnames.get("exec-a")}\n`]);
    const failed = await cli(["exec", TENANT, SERVICE, "--node", "exec-b", "--", "sh", "-c", "echo out; echo err >&2; exit 3"]);
    expect([failed.code, failed.stdout, failed.stderr]).toEqual([3, "out\n", "err\n"]);
    const input = await cli(
      ["exec", TENANT, SERVICE, "--node", "exec-b", "-i", "-e", "SUFFIX=!", "--", "sh", "-c", 'read l; echo "$l$SUFFIX"'],
      {
        input: "from stdin\n",
      },
    );
    expect([input.code, input.stdout]).toEqual([0, "from stdin!\n"]);
    // -i without -t is the work order (a polling agent without a session runs it too), stdin with it.
    const withStdin = (await execOrders()).filter(
      (o) => o.action?.kind.case === "execService" && new TextDecoder().decode(o.action.kind.value.stdin) === "from stdin\n",
    );
    expect(withStdin.map((o) => o.target?.nodeId)).toEqual(["exec-b"]);
  }, 60_000);

  it("-i without -t refuses stdin over the order's cap, saying so, before anything is queued", async () => {
    const before = (await execOrders()).length;
    const r = await cli(["exec", TENANT, SERVICE, "--node", "exec-a", "-i", "--", "cat"], { input: Buffer.alloc(5 * 1024 * 1024, 1) });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("stdin is over 64 KiB");
    expect(r.stderr).toContain("-it");
    expect((await execOrders()).length).toBe(before);
  }, 60_000);

  it("a service without a container exits 1 saying so; -t across two nodes asks for one, before anything is queued", async () => {
    const before = (await execOrders()).length;
    const tty = await cli(["exec", TENANT, SERVICE, "-t", "--", "sh"]);
    expect(tty.code).toBe(1);
    expect(tty.stderr).toContain("-t needs one node");
    expect((await execOrders()).length).toBe(before);
    const missing = await cli(["exec", TENANT, "no-such", "--node", "exec-a", "--", "true"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/exec-a: SERVICE_NOT_RUNNING: project \S+ has no service no-such/);
  }, 60_000);

  it("a viewer's key is refused and nothing is queued", async () => {
    const viewer = (await ctl.admin(AccessService).createApiKey({ name: "exec-viewer", role: Role.VIEWER })).secret;
    const before = (await execOrders()).length;
    const r = await cli(["exec", TENANT, SERVICE, "--node", "exec-a", "--", "touch", "/tmp/viewer-was-here"], { token: viewer });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/FORBIDDEN|PERMISSION/);
    expect((await execOrders()).length).toBe(before);
    const check = await cli(["exec", TENANT, SERVICE, "--node", "exec-a", "--", "test", "-e", "/tmp/viewer-was-here"]);
    expect(check.code).toBe(1);
  }, 60_000);

  it("each exec is in the audit trail: the entry names the order and its tenant, and the order holds the argv", async () => {
    const argv = ["echo", "audited", `run-${RUN_ID}`];
    const r = await cli(["exec", TENANT, SERVICE, "--node", "exec-a", "--", ...argv]);
    expect(r.code, r.stderr).toBe(0);
    const order = (await execOrders()).find(
      (o) => o.action?.kind.case === "execService" && o.action.kind.value.argv.join(" ") === argv.join(" "),
    );
    expect(order?.status).toBe(WorkOrderStatus.SUCCESS);
    expect(order?.result?.details?.exec?.stdout).toBe(`audited run-${RUN_ID}\n`);
    const entries = (await ctl.admin(AuditService).listAuditEntries({ pageSize: 1000 })).entries;
    const entry = entries.find((e) => e.target === `work_order/${order!.id}`);
    expect(entry).toMatchObject({ rpc: "skipper.v1.WorkOrderService/CreateWorkOrder", tenantId: TENANT, outcome: "OK" });
    // The viewer's refused attempt is on record too, under its key.
    expect(
      entries.some(
        (e) => e.rpc === "skipper.v1.WorkOrderService/CreateWorkOrder" && e.outcome === "FORBIDDEN" && e.actor?.name === "exec-viewer",
      ),
    ).toBe(true);
  }, 60_000);

  describe("terminals (-it)", () => terminalCases(() => ({ ctl, env, tenant: TENANT, service: SERVICE, cli })));
});
