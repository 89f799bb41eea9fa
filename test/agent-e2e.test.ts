// End to end on a real Docker engine: the controller and skippy run as separate processes (the
// built dist/ entry points) and talk HTTP/2 over TLS with the generated CA; the agent applies a
// tenant's compose project with the host's Compose and reports back.
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toJsonString } from "@bufbuild/protobuf";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConnectError } from "@connectrpc/connect";
import { ApiErrorSchema } from "../gen/skipper/v1/envelope_pb.js";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderResultSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  RUN_ID,
  freePort,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { markReady } from "./helpers/containers.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! agent-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const IMAGE = "skipper-busybox:local";
const NODE = "e2e-host";
const TENANT = `e2e-shop-${RUN_ID}`;
// A second tenant whose services never become ready.
const SICK = `e2e-sick-${RUN_ID}`;
const SICK_COMPOSE = `services:
  sick:
    image: ${IMAGE}
    command: ["sh", "-c", "while true; do sleep 1; done"]
    healthcheck:
      test: ["CMD", "false"]
      interval: 1s
      retries: 2
    stop_grace_period: 1s
  crashy:
    image: ${IMAGE}
    command: ["sh", "-c", "exit 3"]
`;

function composeFile(opts: { slowWeb?: boolean; broken?: boolean; unpullable?: boolean } = {}): string {
  // YAML the controller accepts when the tenant is written, which Compose's schema refuses.
  if (opts.broken) return "services:\n  web:\n    image: busybox\n    ports: 8080\n";
  // slowWeb: healthy only once the test creates /tmp/ready in the container (webReady()).
  const web = opts.slowWeb
    ? `    command: ["sh", "-c", "mkdir -p /www && echo \\"$$GREETING\\" > /www/index.html && exec httpd -f -p 8080 -h /www"]
    healthcheck:
      test: ["CMD", "test", "-f", "/tmp/ready"]
      interval: 1s
      retries: 60
`
    : `    command: ["sh", "-c", "mkdir -p /www && echo \\"$$GREETING\\" > /www/index.html && exec httpd -f -p 8080 -h /www"]
`;
  // unpullable: no registry answers here, so web's image cannot be pulled.
  return `services:
  web:
    image: ${opts.unpullable ? "registry.invalid/skipper/app:1.2" : IMAGE}
${web}    environment:
      GREETING: \${GREETING}
    ports:
      - "127.0.0.1:\${WEB_PORT}:8080"
    stop_grace_period: 1s
  worker:
    image: ${IMAGE}
    command: ["sh", "-c", "while true; do sleep 1; done"]
    environment:
      WORKER_MODE: \${WORKER_MODE}
    stop_grace_period: 1s
`;
}

function tenant(
  port: number,
  opts: { greeting?: string; workerMode?: string; slowWeb?: boolean; broken?: boolean; unpullable?: boolean } = {},
): Resource {
  return create(ResourceSchema, {
    id: TENANT,
    resourceType: "tenant",
    desiredState: {
      kind: {
        case: "tenant",
        value: {
          displayName: "E2E shop",
          deploymentPolicy: { targetNodeId: NODE },
          serviceIds: ["e2e-web", "e2e-worker"],
          compose: {
            projectName: TENANT,
            composeFile: composeFile(opts),
            env: {
              GREETING: opts.greeting ?? "hello e2e",
              WEB_PORT: String(port),
              WORKER_MODE: opts.workerMode ?? "a",
              API_TOKEN: "super-secret-value-123",
            },
          },
        },
      },
    },
  });
}

function service(id: string, composeService: string): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "service",
    desiredState: { kind: { case: "service", value: { tenantId: TENANT, kind: "compose_service", image: IMAGE, composeService } } },
  });
}

async function projectContainers(project: string): Promise<string[]> {
  const r = await execa("docker", ["ps", "-a", "-q", "--filter", `label=com.docker.compose.project=${project}`], {
    env: { DOCKER_HOST: dockerHost! },
  });
  return r.stdout.split("\n").filter(Boolean);
}

async function containerIds(): Promise<Record<string, string>> {
  const r = await execa(
    "docker",
    [
      "ps",
      "--no-trunc",
      "--filter",
      `label=com.docker.compose.project=${TENANT}`,
      "--format",
      '{{.ID}} {{.Label "com.docker.compose.service"}}',
    ],
    {
      env: { DOCKER_HOST: dockerHost! },
    },
  );
  const out: Record<string, string> = {};
  for (const line of r.stdout.split("\n").filter(Boolean)) {
    const [id, svc] = line.split(" ");
    out[svc!] = id!;
  }
  return out;
}

/** Makes the tenant's running web container(s) healthy (see slowWeb). */
const webReady = () => markReady(dockerHost!, TENANT, "web");

describe.skipIf(!dockerHost)("agent end to end (real engine, real processes)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;
  let port: number;
  let token: string;
  let stateDir: string;
  let workDir: string;

  const resources = () => ctl.admin(ResourceService);
  // A short readiness deadline, so an order whose services never get healthy fails within a test.
  const startAgent = () =>
    startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir,
      workDir,
      dockerHost: dockerHost!,
      extraArgs: ["--ready-timeout", "10s"],
    });

  // Apply as a script would: when an order for an older desired state is still in flight (the
  // reconciler's own, or a retry), wait for it to end and ask again.
  async function apply(tenantId = TENANT): Promise<string> {
    for (let i = 0; ; i++) {
      try {
        const res = await ctl.admin(DeploymentService).apply({ tenantId });
        return res.workOrder!.id;
      } catch (e) {
        const inFlight = ConnectError.from(e).findDetails(ApiErrorSchema)[0]?.details?.work_order_id;
        if (typeof inFlight !== "string" || i > 5) throw e;
        await finished(inFlight);
      }
    }
  }

  async function finished(id: string, timeoutMs = 90_000): Promise<WorkOrder> {
    return waitFor(
      `work order ${id} to finish`,
      async () => {
        const o = (await ctl.admin(WorkOrderService).getWorkOrder({ id })).workOrder!;
        return o.status === WorkOrderStatus.SUCCESS || o.status === WorkOrderStatus.FAILED ? o : undefined;
      },
      timeoutMs,
    );
  }

  async function setTenant(next: Resource): Promise<void> {
    // Unconditional: the agent's state report for the previous order may land at any moment.
    await resources().updateResource({ resourceType: "tenant", id: TENANT, desiredState: next.desiredState });
  }

  beforeAll(async () => {
    for (const project of [TENANT, SICK]) {
      await execa("docker-compose", ["-p", project, "down"], { env: { DOCKER_HOST: dockerHost! }, reject: false });
    }
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-agent-"));
    stateDir = join(root, "state");
    workDir = join(root, "work");
    port = await freePort();
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE, displayName: "e2e", labels: { env: "test" } })).token;
    // Services name their tenant, so the tenant comes first; it is placed on the node once its
    // services exist, so the first order already maps them.
    const unplaced = tenant(port);
    if (unplaced.desiredState?.kind.case === "tenant") unplaced.desiredState.kind.value.deploymentPolicy = undefined;
    await resources().createResource({ resourceType: "tenant", resource: unplaced });
    await resources().createResource({ resourceType: "service", resource: service("e2e-web", "web") });
    await resources().createResource({ resourceType: "service", resource: service("e2e-worker", "worker") });
    await setTenant(tenant(port));
    agent = startAgent();
  }, 120_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    for (const project of workDir ? [TENANT, SICK] : []) {
      await execa(
        "docker-compose",
        [
          "-p",
          project,
          "-f",
          join(workDir, "tenants", project, "docker-compose.yml"),
          "--env-file",
          join(workDir, "tenants", project, ".env"),
          "down",
          "-t",
          "1",
        ],
        {
          env: { DOCKER_HOST: dockerHost! },
          reject: false,
        },
      );
    }
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 120_000);

  it("heartbeats with the engine and compose it found", async () => {
    const node = await waitFor("a heartbeat", async () => {
      const n = (await resources().getResource({ resourceType: "node", id: NODE })).resource!;
      return n.currentState?.kind.case === "node" ? n.currentState.kind.value : undefined;
    });
    expect(node.capabilities?.dockerAvailable).toBe(true);
    expect(node.capabilities?.dockerVersion).toMatch(/^\d+\./);
    expect(node.capabilities?.composeVersion).toMatch(/^\d+\./);
    expect(node.agentVersion).toMatch(/^\d+\.\d+\.\d+/);
  });

  it("applies the project: success, the port answers, services report their containers", async () => {
    const order = await finished(await apply());
    expect(order.result?.code, order.result?.message).toBe("APPLY_OK");
    // Changes are named by service resource id, as the seed's result schema shows.
    expect(order.result?.details?.changedResources).toEqual(["e2e-web", "e2e-worker"]);
    // Every deploy writes the tenant's version sticker on the node, and returns it.
    const sticker = order.result?.details?.sticker;
    expect(sticker?.releaseId).toBe(order.desiredState?.specHash);
    expect(sticker?.deploymentId).toBe(order.desiredState?.deploymentId);
    expect(Object.keys(sticker?.imageDigests ?? {}).sort()).toEqual(["web", "worker"]);
    expect(sticker?.imageDigests.web).toMatch(/^sha256:[0-9a-f]{64}$/);
    const onDisk = JSON.parse(await readFile(join(workDir, "tenants", TENANT, ".skipper-sticker.json"), "utf8"));
    expect(onDisk).toMatchObject({
      schema_version: "v1",
      release_id: sticker?.releaseId,
      deployment_id: sticker?.deploymentId,
      node_id: NODE,
    });
    const body = await (await fetch(`http://127.0.0.1:${port}/`)).text();
    expect(body.trim()).toBe("hello e2e");
    const ids = await containerIds();
    // The agent reports each service's containers right after the result.
    const webState = await waitFor("e2e-web's observed state", async () => {
      const web = (await resources().getResource({ resourceType: "service", id: "e2e-web" })).resource!;
      return web.currentState?.kind.case === "service" ? web.currentState.kind.value : undefined;
    });
    expect(webState?.state).toBe("running");
    expect(webState?.containers.map((c) => c.containerId)).toEqual([ids.web]);
    const envFile = join(workDir, "tenants", TENANT, ".env");
    expect(((await stat(envFile)).mode & 0o777).toString(8)).toBe("600");
    // The secret-shaped env value never reaches the controller's view of the command output.
    expect(toJsonString(WorkOrderResultSchema, order.result!)).not.toContain("super-secret-value-123");
    expect(await readFile(agent.logFile, "utf8")).not.toContain("super-secret-value-123");
  });

  it("a second apply of the same spec changes no container", async () => {
    const before = await containerIds();
    const order = await finished(await apply());
    expect(order.result?.code).toBe("APPLY_OK");
    expect(order.result?.details?.changedResources).toEqual([]);
    expect(order.result?.details?.unchangedResources).toEqual(["e2e-web", "e2e-worker"]);
    expect(await containerIds()).toEqual(before);
  });

  it("an env change recreates only the service that uses it", async () => {
    const before = await containerIds();
    await setTenant(tenant(port, { workerMode: "b" }));
    const order = await finished(await apply());
    expect(order.result?.code).toBe("APPLY_OK");
    expect(order.result?.details?.changedResources).toEqual(["e2e-worker"]);
    const after = await containerIds();
    expect(after.web).toBe(before.web);
    expect(after.worker).not.toBe(before.worker);
  });

  it("a broken compose file is COMPOSE_INVALID and leaves the running project as it was", async () => {
    const before = await containerIds();
    const composePath = join(workDir, "tenants", TENANT, "docker-compose.yml");
    const fileBefore = await readFile(composePath, "utf8");
    const envBefore = await readFile(join(workDir, "tenants", TENANT, ".env"), "utf8");
    // Without pre-deploy hooks `up` itself is Compose's check of the file: the live files wait
    // aside and come back when Compose refuses the new one.
    await setTenant(tenant(port, { workerMode: "b", broken: true }));
    const order = await finished(await apply());
    expect(order.status).toBe(WorkOrderStatus.FAILED);
    expect(order.result?.code).toBe("COMPOSE_INVALID");
    expect(order.result?.details?.command?.exitCode).not.toBe(0);
    expect(await containerIds()).toEqual(before);
    expect(await readFile(composePath, "utf8")).toBe(fileBefore);
    expect(await readFile(join(workDir, "tenants", TENANT, ".env"), "utf8")).toBe(envBefore);
    expect((await readdir(join(workDir, "tenants", TENANT))).filter((n) => n.startsWith(".staging-"))).toEqual([]);
    expect(order.result?.message).toMatch(/compose rejected the file: .*ports/);
    expect((await (await fetch(`http://127.0.0.1:${port}/`)).text()).trim()).toBe("hello e2e");
  });

  it("an image that cannot be pulled fails at once, naming the image and service, and leaves the running project as it was", async () => {
    const before = await containerIds();
    await setTenant(tenant(port, { unpullable: true }));
    const order = await finished(await apply());
    expect(order.result?.code).toBe("IMAGE_PULL_FAILED");
    expect(order.result?.message).toContain("image registry.invalid/skipper/app:1.2 (service web) could not be pulled");
    expect(order.attempts).toHaveLength(1);
    expect(await containerIds()).toEqual(before);
  });

  it("an agent killed mid-order finishes the order after a restart", async () => {
    // The web service is not healthy until the test makes it so: the order is still under way
    // when the agent is killed, however long the test takes to see it claimed.
    await setTenant(tenant(port, { workerMode: "b", slowWeb: true, greeting: "after restart" }));
    const id = await apply();
    await waitFor("the order to be claimed", async () => {
      const o = (await ctl.admin(WorkOrderService).getWorkOrder({ id })).workOrder!;
      return o.status === WorkOrderStatus.RUNNING ? o : undefined;
    });
    await agent.kill();
    // (A journal write cut by the kill may leave a .tmp beside it; the next start removes it.)
    expect((await readdir(join(stateDir, "orders"))).filter((f) => !f.endsWith(".tmp"))).toEqual([`${id}.json`]);
    agent = startAgent();
    const order = await waitFor(
      `work order ${id} to finish`,
      async () => {
        await webReady();
        const o = (await ctl.admin(WorkOrderService).getWorkOrder({ id })).workOrder!;
        return o.status === WorkOrderStatus.SUCCESS || o.status === WorkOrderStatus.FAILED ? o : undefined;
      },
      90_000,
    );
    expect(order.result?.code, order.result?.message).toBe("APPLY_OK");
    expect((await (await fetch(`http://127.0.0.1:${port}/`)).text()).trim()).toBe("after restart");
    await waitFor("the journal to empty", async () => ((await readdir(join(stateDir, "orders"))).length === 0 ? true : undefined));
  }, 90_000);

  it("services that never get healthy or exit are SERVICES_NOT_RUNNING, with what the engine saw", async () => {
    await resources().createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id: SICK,
        resourceType: "tenant",
        desiredState: {
          kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE }, compose: { composeFile: SICK_COMPOSE } } },
        },
      }),
    });
    // SERVICES_NOT_RUNNING is retriable: the first attempt's result sends the order to wait for
    // another (retry_pending), with what the engine saw.
    const id = await apply(SICK);
    const order = await waitFor(
      "the first attempt's result",
      async () => {
        const o = (await ctl.admin(WorkOrderService).getWorkOrder({ id })).workOrder!;
        return o.result ? o : undefined;
      },
      60_000,
    );
    expect([WorkOrderStatus.RETRY_PENDING, WorkOrderStatus.PENDING, WorkOrderStatus.RUNNING, WorkOrderStatus.FAILED]).toContain(
      order.status,
    );
    expect(order.result?.retriable).toBe(true);
    expect(order.result?.code, order.result?.message).toBe("SERVICES_NOT_RUNNING");
    // Compose itself succeeded: a zero exit code alone is not success.
    expect(order.result?.details?.command?.exitCode).toBe(0);
    const seen = Object.fromEntries((order.result?.details?.services ?? []).map((s) => [s.service, s]));
    expect(seen.sick?.state).toBe("unhealthy");
    expect(seen.sick?.containers[0]?.health).toBe("unhealthy");
    expect(seen.crashy?.state).toBe("not_running");
    expect(seen.crashy?.containers[0]?.state).toBe("exited");
    // Deleting the tenant cancels nothing by itself: the waiting order is superseded when it is
    // pending, or finishes its attempt; then the reconciler sends a remove_service order.
    await resources().deleteResource({ resourceType: "tenant", id: SICK });
    await waitFor(
      "the sick project's containers to go",
      async () => ((await projectContainers(SICK)).length === 0 ? true : undefined),
      60_000,
    );
    const tomb = (await resources().getResource({ resourceType: "tenant", id: SICK, includeDeleted: true })).resource!;
    expect(tomb.deletion?.deletedAt).toBeDefined();
    const removal = await waitFor("the removal order's result", async () =>
      (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId: SICK })).workOrders.find(
        (o) => o.type === WorkOrderType.REMOVE_SERVICE && o.result,
      ),
    );
    expect(removal.result?.code).toBe("REMOVE_OK");
  }, 90_000);

  it("rides out a controller restart: retries with growing backoff, never exits, then takes new work", async () => {
    // The agent must be idle, so its main loop is what meets the stopped controller: the last
    // order's result can be stored before the agent hears back (then it retries the report).
    // (Orders list oldest first: the newest is the last one, and none may still be under way,
    // such as a retry of an earlier test's order.)
    const last = await waitFor(
      "no order to be under way",
      async () => {
        const all = (await ctl.admin(WorkOrderService).listWorkOrders({ pageSize: 1000 })).workOrders;
        const busy = all.some((o) => [WorkOrderStatus.PENDING, WorkOrderStatus.RUNNING, WorkOrderStatus.RETRY_PENDING].includes(o.status));
        return busy ? undefined : all[all.length - 1];
      },
      60_000,
    );
    await waitFor("the agent to hear its last result was stored", async () =>
      (await readFile(agent.logFile, "utf8"))
        .split("\n")
        .some((l) => l.includes(last.id) && l.includes('"action":"report_result","result":"ok"'))
        ? true
        : undefined,
    );
    const logBefore = (await readFile(agent.logFile, "utf8")).length;
    const ctlPort = Number(new URL(ctl.url).port);
    await ctl.stop();
    const retries = await waitFor(
      "the agent to retry three times",
      async () => {
        const lines = (await readFile(agent.logFile, "utf8"))
          .slice(logBefore)
          .split("\n")
          .filter((l) => l.includes('"controller_unreachable"'));
        return lines.length >= 3 ? lines.map((l) => JSON.parse(l) as { metadata: { attempt: number; retry_in_ms: number } }) : undefined;
      },
      30_000,
    );
    expect(retries.slice(0, 3).map((r) => r.metadata.attempt)).toEqual([1, 2, 3]);
    // Full jitter below a doubling ceiling: 0.5 s, 1 s, 2 s.
    retries.slice(0, 3).forEach((r, i) => expect(r.metadata.retry_in_ms).toBeLessThanOrEqual(500 * 2 ** i));
    expect(agent.child.exitCode).toBeNull();
    ctl = await startControllerProcess({ dataDir: ctl.dataDir, port: ctlPort });
    await setTenant(tenant(port, { workerMode: "c", greeting: "after controller restart" }));
    const order = await finished(await apply());
    expect(order.result?.code, order.result?.message).toBe("APPLY_OK");
    expect((await (await fetch(`http://127.0.0.1:${port}/`)).text()).trim()).toBe("after controller restart");
    expect(agent.child.exitCode).toBeNull();
  }, 90_000);
});
