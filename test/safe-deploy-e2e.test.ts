// Safe deploys and rollbacks end to end: a controller and an agent as processes on a real Docker
// engine. A tenant with a health gate deploys a spec whose probe fails: the agent restores the
// previous spec on its own (ROLLED_BACK, both specs in the result), the page still answers from
// the previous containers' spec, and the reconciler does not push the failed spec again. An
// admin's rollback order restores the last good spec; Apply deploys the desired one again.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { CommandSpecSchema } from "../gen/skipper/v1/safety_pb.js";
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
import { res } from "./helpers/resources.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! safe-deploy-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const IMAGE = "skipper-busybox:local";
const TENANT = `sd-shop-${RUN_ID}`;
const NODE = "sd-node";
const SWEEP_MS = 2000;

describe.skipIf(!dockerHost)("safe deploys and rollback (real engine)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;
  let port: number;
  const api = () => ctl.admin(ResourceService);
  const orders = () => ctl.admin(WorkOrderService);
  const page = async () => (await (await fetch(`http://127.0.0.1:${port}/`)).text()).trim();
  const webContainer = async () =>
    (
      await execa("docker", ["ps", "-q", "--no-trunc", "--filter", `label=dev.skipper.tenant-id=${TENANT}`], {
        env: { DOCKER_HOST: dockerHost! },
      })
    ).stdout.trim();

  async function setGreeting(greeting: string, healthy: boolean): Promise<void> {
    const current = (await api().getResource({ resourceType: "service", id: "sd-web" })).resource!;
    const spec = current.desiredState!.kind.case === "service" ? current.desiredState!.kind.value : undefined;
    spec!.env = { GREETING: greeting, HEALTHY: healthy ? "yes" : "no" };
    await api().updateResource({ resourceType: "service", id: "sd-web", desiredState: current.desiredState });
  }
  const tenantStatus = async () => (await api().getResource({ resourceType: "tenant", id: TENANT })).resource!;
  const convergence = async () => (await tenantStatus()).convergence?.status;
  const tenantOrders = async (): Promise<WorkOrder[]> => (await orders().listWorkOrders({ tenantId: TENANT, pageSize: 100 })).workOrders;
  const finished = (id: string) =>
    waitFor(
      `order ${id} to finish`,
      async () => {
        const o = (await orders().getWorkOrder({ id })).workOrder!;
        return [WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED].includes(o.status) ? o : undefined;
      },
      90_000,
    );

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-safe-"));
    port = await freePort();
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--reconcile-interval", `${SWEEP_MS}ms`] });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      extraArgs: ["--ready-timeout", "20s", "--allow-command", "true", "--allow-command", "false"],
    });
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, {
        case: "tenant",
        value: {
          deploymentPolicy: { targetNodeId: NODE },
          safety: {
            healthGate: {
              probes: [
                {
                  kind: { case: "http", value: { url: `http://127.0.0.1:${port}/health.html`, expectStatus: 200 } },
                  timeout: durationFromMs(1000),
                },
              ],
              deadline: durationFromMs(4000),
            },
          },
        },
      }),
    });
    await api().createResource({
      resourceType: "service",
      resource: res("service", "sd-web", {
        case: "service",
        value: {
          tenantId: TENANT,
          image: IMAGE,
          // sh stays PID 1 and exits on TERM, so a recreate does not wait out the stop timeout.
          command: [
            "sh",
            "-c",
            'mkdir -p /www && echo "$GREETING" > /www/index.html && if [ "$HEALTHY" = yes ]; then echo ok > /www/health.html; fi; httpd -f -p 8080 -h /www & trap "exit 0" TERM; wait',
          ],
          env: { GREETING: "v1", HEALTHY: "yes" },
          ports: [{ hostIp: "127.0.0.1", hostPort: port, containerPort: 8080 }],
        },
      }),
    });
  }, 120_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    const ids = (await webContainer().catch(() => "")).split("\n").filter(Boolean);
    if (ids.length > 0) await execa("docker", ["rm", "-f", ...ids], { env: { DOCKER_HOST: dockerHost! }, reject: false });
    if (dockerHost) await removeComposeProject(dockerHost, TENANT);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("a spec that fails its health gate is rolled back to the previous one automatically", async () => {
    await waitFor("v1 to converge", async () => ((await convergence()) === ConvergenceStatus.CONVERGED ? true : undefined), 90_000);
    expect(await page()).toBe("v1");
    const v1Container = await webContainer();

    await setGreeting("v2", false);
    const order = await waitFor(
      "the v2 order to end",
      async () => {
        const o = (await tenantOrders()).find((x) => x.type === WorkOrderType.DEPLOY_SERVICE && x.status === WorkOrderStatus.FAILED);
        return o;
      },
      90_000,
    );
    expect(order.result?.code).toBe("ROLLED_BACK");
    const rb = order.result?.details?.rollback;
    expect(rb?.failedSpecHash).toBe(order.desiredState?.specHash);
    expect(rb?.restoredSpecHash).not.toBe("");
    expect(rb?.restoredSpecHash).not.toBe(rb?.failedSpecHash);
    expect(rb?.failedProject?.composeFile).toContain("sd-web");
    expect(rb?.restoredProject?.composeFile).toContain("sd-web");
    expect(order.result?.details?.probes.some((p) => !p.ok && p.message.includes("404"))).toBe(true);
    // The previous spec runs again: the page is v1's (from a container recreated with v1's spec).
    expect(await page()).toBe("v1");
    expect(await webContainer()).not.toBe("");
    expect(v1Container).not.toBe("");

    // The reconciler holds the failed spec: ROLLED_BACK, and no new order through a few sweeps.
    await waitFor("ROLLED_BACK", async () => ((await convergence()) === ConvergenceStatus.ROLLED_BACK ? true : undefined), 20_000);
    const count = (await tenantOrders()).length;
    await new Promise((r) => setTimeout(r, SWEEP_MS * 2 + 500));
    expect((await tenantOrders()).length).toBe(count);
    expect(await convergence()).toBe(ConvergenceStatus.ROLLED_BACK);
    const targets =
      (await tenantStatus()).currentState?.kind.case === "tenant" ? (await tenantStatus()).currentState!.kind.value : undefined;
    expect((targets as { targets: { rolledBackHash: string }[] }).targets[0]!.rolledBackHash).toBe(rb?.failedSpecHash);
  }, 150_000);

  it("a changed desired state deploys again; an admin's rollback order restores the last good spec until Apply", async () => {
    await setGreeting("v3", true);
    await waitFor(
      "v3 to converge",
      async () => ((await convergence()) === ConvergenceStatus.CONVERGED && (await page().catch(() => "")) === "v3" ? true : undefined),
      90_000,
    );

    // Refused without changing anything: no tenant, or a deployment of another tenant.
    await expect(
      orders().createWorkOrder({
        type: WorkOrderType.ROLLBACK,
        target: { nodeId: NODE },
        action: { kind: { case: "rollback", value: {} } },
      }),
    ).rejects.toThrow(/tenant_id/);

    const { workOrder } = await orders().createWorkOrder({
      type: WorkOrderType.ROLLBACK,
      target: { nodeId: NODE, tenantId: TENANT },
      action: { kind: { case: "rollback", value: {} } },
    });
    expect(workOrder?.action?.kind.case === "rollback" && workOrder.action.kind.value.resolvedFrom).toMatch(/^work_order\//);
    const done = await finished(workOrder!.id);
    expect(done.result?.code).toBe("ROLLBACK_OK");
    expect(await page()).toBe("v1");
    await waitFor(
      "ROLLED_BACK after the rollback order",
      async () => ((await convergence()) === ConvergenceStatus.ROLLED_BACK ? true : undefined),
      20_000,
    );
    expect(await page()).toBe("v1");

    // Apply deploys the desired state (v3) again.
    await ctl.admin(DeploymentService).apply({ tenantId: TENANT });
    await waitFor(
      "v3 again after Apply",
      async () => ((await convergence()) === ConvergenceStatus.CONVERGED && (await page().catch(() => "")) === "v3" ? true : undefined),
      90_000,
    );
  }, 200_000);

  it("a failing pre-deploy hook changes nothing; a failing post-deploy hook rolls the deploy back", async () => {
    const container = await webContainer();
    const setHooks = async (pre: string, post: string) => {
      const t = (await api().getResource({ resourceType: "tenant", id: TENANT })).resource!;
      const spec = t.desiredState!.kind.value as { safety: { preDeploy: unknown[]; postDeploy: unknown[] } };
      spec.safety.preDeploy = [create(CommandSpecSchema, { argv: [pre] })];
      spec.safety.postDeploy = [create(CommandSpecSchema, { argv: [post] })];
      await api().updateResource({ resourceType: "tenant", id: TENANT, desiredState: t.desiredState });
    };
    const known = new Set((await tenantOrders()).map((o) => o.id));
    const next = (code: string) =>
      waitFor(
        `an order ending ${code}`,
        async () => (await tenantOrders()).find((o) => !known.has(o.id) && o.result?.code === code),
        90_000,
      );

    await setHooks("false", "true");
    await setGreeting("v4", true);
    const refused = await next("PRE_DEPLOY_FAILED");
    expect(refused.result?.message).toContain("pre-deploy hook false");
    expect(refused.result?.details?.command?.exitCode).toBe(1);
    expect(await webContainer()).toBe(container);
    expect(await page()).toBe("v3");

    // The hooks change; the reconciler's next attempt at v4 takes them: v4 comes up, its
    // post-deploy hook fails, and v3 is restored.
    await setHooks("true", "false");
    const rolled = await next("ROLLED_BACK");
    expect(rolled.result?.message).toContain("post-deploy hook false");
    expect(rolled.desiredState?.safety?.postDeploy[0]?.argv).toEqual(["false"]);
    expect(await page()).toBe("v3");

    // Fixing the hook alone (what runs is the same v4) releases the rolled-back spec: v4 deploys.
    await waitFor("ROLLED_BACK", async () => ((await convergence()) === ConvergenceStatus.ROLLED_BACK ? true : undefined), 20_000);
    await setHooks("true", "true");
    await waitFor(
      "v4 once the hook was fixed",
      async () => ((await convergence()) === ConvergenceStatus.CONVERGED && (await page().catch(() => "")) === "v4" ? true : undefined),
      90_000,
    );
  }, 200_000);
});
