// Failure causes end to end: a controller and an agent as processes on a real engine, and tenants
// that fail for the causes the README's table lists: a host port held by a listener this test
// opens, an unknown registry host, and a private registry (Debian's docker-registry) that asks
// for credentials or, logged in, has no such image. Each order fails after exactly the attempts
// the table promises (one: none of these is retried, by the order or by the reconciler), and its
// cause, first, is in the order's result, the events, the deployment, explain and the CLI's
// rollout status, explain and get.
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import http2 from "node:http2";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { FailureReason } from "../gen/skipper/v1/failure_cause_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
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
import { parsePrometheusText, sampleSum } from "./helpers/prometheus-text.js";
import { registryInstalled, startRegistry, type TestRegistry } from "./helpers/registry.js";
import { res } from "./helpers/resources.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const haveRegistry = await registryInstalled();
if (!dockerHost) console.warn("!!! failure-causes-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");
else if (!haveRegistry)
  console.warn(
    "!!! failure-causes-e2e.test.ts: the private-registry cases are SKIPPED: no docker-registry/htpasswd (scripts/docker-engine.sh install)",
  );

const CLI = fileURLToPath(new URL("../dist/cli/main.js", import.meta.url));
const NODE = "fc-node";
const IMAGE = "skipper-busybox:local";
const T = { port: `fc-port-${RUN_ID}`, dns: `fc-dns-${RUN_ID}`, auth: `fc-auth-${RUN_ID}`, missing: `fc-miss-${RUN_ID}` };
const PASSWORD = `fc-registry-pass-${RUN_ID}`;
const SLEEP = ["sh", "-c", 'trap "exit 0" TERM; sleep 3600 & wait'];

describe.skipIf(!dockerHost)("failure causes (real engine)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;
  let holder: Server;
  let heldPort: number;
  let registry: TestRegistry | undefined;
  const api = () => ctl.admin(ResourceService);
  const deployOrders = async (tenantId: string) =>
    (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId, pageSize: 100 })).workOrders.filter(
      (o) => o.type === WorkOrderType.DEPLOY_SERVICE,
    );

  async function tenantWithService(tenantId: string, image: string, extra: object = {}): Promise<void> {
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", tenantId, { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE } } }),
    });
    await api().createResource({
      resourceType: "service",
      resource: res("service", `${tenantId}-web`, { case: "service", value: { tenantId, image, command: SLEEP, ...extra } }),
    });
  }

  /** The tenant's one deploy order once it failed (never RETRY_PENDING: it is not retried). */
  async function failedOnce(tenantId: string): Promise<WorkOrder> {
    const failed = await waitFor(
      `${tenantId}'s deploy to fail`,
      async () => {
        const orders = await deployOrders(tenantId);
        expect(orders.filter((o) => o.status === WorkOrderStatus.RETRY_PENDING)).toEqual([]);
        return orders.find((o) => o.status === WorkOrderStatus.FAILED);
      },
      120_000,
    );
    expect(failed.attempts).toHaveLength(1);
    expect(failed.result?.retriable).toBe(false);
    return failed;
  }

  /** The reconciler's passes so far (every tenant's, from /metrics). */
  async function passes(): Promise<number> {
    const session = http2.connect(ctl.url, { ca: ctl.ca });
    try {
      const body = await new Promise<string>((resolve, reject) => {
        const req = session.request({ ":path": "/metrics", "x-admin-token": E2E_ADMIN_TOKEN });
        let text = "";
        req.setEncoding("utf8");
        req.on("data", (c: string) => (text += c));
        req.on("end", () => resolve(text));
        req.on("error", reject);
        req.end();
      });
      return sampleSum(parsePrometheusText(body), "skipper_reconcile_pass_duration_seconds_count");
    } finally {
      session.close();
    }
  }

  /** After several more passes of the reconciler, the tenant still has exactly one deploy order. */
  async function noRetryAfterPasses(tenantId: string): Promise<void> {
    const before = await passes();
    await waitFor(
      "the reconciler to pass every tenant several times more",
      async () => ((await passes()) >= before + 12 ? true : undefined),
      60_000,
    );
    expect(await deployOrders(tenantId)).toHaveLength(1);
  }

  function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(SKIPPER_|SKIPPY_|NO_COLOR)/.test(k)));
      Object.assign(env, {
        SKIPPER_SERVER: ctl.url,
        SKIPPER_CA_FILE: ctl.caFile,
        SKIPPER_TOKEN: E2E_ADMIN_TOKEN,
        XDG_CONFIG_HOME: join(root, "config"),
      });
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
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-causes-"));
    // Something else holds the port the service wants: a listener of this test.
    holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    heldPort = (holder.address() as { port: number }).port;
    if (haveRegistry) registry = await startRegistry(dockerHost!, "deployer", PASSWORD);
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--reconcile-interval", "1s"] });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      env: { HOME: join(root, "home") },
    });
  }, 180_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    await registry?.stop();
    await new Promise((resolve) => holder?.close(resolve));
    if (dockerHost) for (const t of Object.values(T)) await removeComposeProject(dockerHost, t);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("a host port held by something else: PORT_IN_USE naming the port, one attempt, and the cause first on every surface", async () => {
    await tenantWithService(T.port, IMAGE, { ports: [{ hostPort: heldPort, containerPort: 80, hostIp: "127.0.0.1" }] });
    const failed = await failedOnce(T.port);
    const cause = failed.result!.cause!;
    const headline = `port 127.0.0.1:${heldPort} is already in use`;
    expect(cause.reason).toBe(FailureReason.PORT_IN_USE);
    expect(cause.summary).toBe(headline);
    expect(cause.line).toContain(`127.0.0.1:${heldPort}`);
    expect(failed.result!.message).not.toMatch(/Encountered errors while bringing up the project/);

    // The tenant: failed at once (not backing off for another try), its cause first.
    const tenant = await waitFor("the tenant to show ORDER_FAILED", async () => {
      const t = (await api().getResource({ resourceType: "tenant", id: T.port })).resource!;
      return t.convergence?.status === ConvergenceStatus.ORDER_FAILED ? t : undefined;
    });
    expect(tenant.convergence!.message.startsWith(`${headline} (COMPOSE_FAILED)`)).toBe(true);

    // Events (and so webhooks, which carry them) and the deployment.
    const events = (await ctl.admin(EventService).listEvents({ workOrderId: failed.id, pageSize: 100 })).events;
    const failedEvent = events.find((e) => e.type === "work_order_failed");
    expect(failedEvent?.data).toMatchObject({ code: "COMPOSE_FAILED", reason: "port_in_use", cause: headline });
    expect(events.some((e) => e.type === "work_order_retry_scheduled")).toBe(false);
    const deploymentId = failed.desiredState?.deploymentId ?? "";
    const deployment = (await api().getResource({ resourceType: "deployment", id: deploymentId })).resource!;
    const dstatus = deployment.currentState?.kind.case === "deployment" ? deployment.currentState.kind.value : undefined;
    expect(dstatus?.message.startsWith(headline)).toBe(true);
    expect(dstatus?.cause?.reason).toBe(FailureReason.PORT_IN_USE);

    // explain, over the API: the result step and the verdict start with the cause.
    const explained = await api().explainResource({ resourceType: "tenant", id: T.port });
    expect(explained.steps.find((s) => s.workOrderId === failed.id && s.code === "COMPOSE_FAILED")?.summary).toMatch(
      new RegExp(`^${headline.replaceAll(".", "\\.")} \\(COMPOSE_FAILED\\)`),
    );

    // The CLI: rollout status, explain and get (wide) show it.
    const status = await cli(["rollout", "status", T.port]);
    expect(status.stdout + status.stderr).toContain(`${headline} (COMPOSE_FAILED)`);
    const explain = await cli(["explain", "tenant", T.port]);
    expect(explain.stdout).toContain(`${headline} (COMPOSE_FAILED)`);
    const get = await cli(["get", "tenants", "-o", "wide"]);
    expect(get.stdout).toContain(headline);

    // And it stays at one compose up: the reconciler does not issue the same spec again.
    await noRetryAfterPasses(T.port);
  }, 240_000);

  it("an unknown registry host: REGISTRY_HOST_UNKNOWN, one attempt, and no talk of credentials", async () => {
    await tenantWithService(T.dns, "nonexistent.invalid:5000/x:1");
    const failed = await failedOnce(T.dns);
    expect(failed.result!.cause).toMatchObject({
      reason: FailureReason.REGISTRY_HOST_UNKNOWN,
      summary: "registry host nonexistent.invalid is unknown (DNS: no such host)",
    });
    expect(failed.result!.message).toContain("nonexistent.invalid:5000/x:1");
    expect(failed.result!.message).not.toMatch(/credential/);
    await noRetryAfterPasses(T.dns);
  }, 240_000);

  it.skipIf(!haveRegistry)(
    "a private registry: without a login UNAUTHORIZED (and then credentials are named); logged in, a missing image is IMAGE_NOT_FOUND",
    async () => {
      const image = `${registry!.host}/skipper/missing:${RUN_ID}`;
      await tenantWithService(T.auth, image);
      const asked = await failedOnce(T.auth);
      expect(asked.result!.cause?.reason).toBe(FailureReason.UNAUTHORIZED);
      expect(asked.result!.message).toMatch(
        /asked for credentials and there is no credential for it: a registry secret of the tenant provides one/,
      );

      await api().createResource({
        resourceType: "tenant",
        resource: res("tenant", T.missing, { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE } } }),
      });
      await api().createResource({
        resourceType: "secret",
        resource: res("secret", `${T.missing}-login`, {
          case: "secret",
          value: { tenantId: T.missing, registry: registry!.host, values: { username: "deployer", password: PASSWORD } },
        }),
      });
      await api().createResource({
        resourceType: "service",
        resource: res("service", `${T.missing}-web`, { case: "service", value: { tenantId: T.missing, image, command: SLEEP } }),
      });
      const missing = await failedOnce(T.missing);
      expect(missing.result!.code).toBe("IMAGE_NOT_FOUND");
      expect(missing.result!.cause).toMatchObject({
        reason: FailureReason.IMAGE_NOT_FOUND,
        summary: `image ${image} was not found in its registry`,
      });
      expect(missing.result!.message).not.toMatch(/credential/);
      await noRetryAfterPasses(T.missing);
    },
    240_000,
  );
});
