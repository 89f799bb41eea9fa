// Leases end to end: the controller (short lease) and skippy as processes on a real engine. An
// agent frozen with SIGSTOP past its lease loses the order back to pending; when it wakes, its
// late result carries an old fencing token and is refused; the order is claimed again and ends
// exactly once.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Client } from "@connectrpc/connect";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  RUN_ID,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { markReady } from "./helpers/containers.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! lease-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const NODE = "lease-host";
const TENANT = `lease-shop-${RUN_ID}`;
// Healthy only once the test says so (ready(): /tmp/ready in the container), so an order runs
// until the test has seen what it waits for, however slow the machine. ROUND changes recreate
// the container (a fresh one is not ready).
const COMPOSE = `services:
  slow:
    image: skipper-busybox:local
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    environment:
      ROUND: \${ROUND}
    healthcheck:
      test: ["CMD", "test", "-f", "/tmp/ready"]
      interval: 1s
      retries: 60
    stop_grace_period: 1s
`;
const spec = (round: number) => ({
  kind: {
    case: "tenant" as const,
    value: { deploymentPolicy: { targetNodeId: NODE }, compose: { composeFile: COMPOSE, env: { ROUND: String(round) } } },
  },
});

describe.skipIf(!dockerHost)("work-order leases (real engine, real processes)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-lease-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--lease-duration", "2s"] });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      extraArgs: ["--ready-timeout", "30s"],
    });
  }, 60_000);

  afterAll(async () => {
    if (agent) {
      agent.child.kill("SIGCONT");
      await agent.stop();
    }
    await ctl?.stop();
    if (root) {
      const dir = join(root, "work", "tenants", TENANT);
      await execa(
        "docker-compose",
        ["-p", TENANT, "-f", join(dir, "docker-compose.yml"), "--env-file", join(dir, ".env"), "down", "-t", "1"],
        { env: { DOCKER_HOST: dockerHost! }, reject: false },
      );
      if (!process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
    }
  }, 60_000);

  /** Makes the running slow container(s) healthy. */
  const ready = () => markReady(dockerHost!, TENANT, "slow");

  /** Waits for the order to end, making its container healthy meanwhile. */
  const finishReady = (orders: Client<typeof WorkOrderService>, id: string) =>
    waitFor(
      `order ${id} to finish`,
      async () => {
        await ready();
        const o = (await orders.getWorkOrder({ id })).workOrder!;
        return o.status === WorkOrderStatus.SUCCESS || o.status === WorkOrderStatus.FAILED ? o : undefined;
      },
      60_000,
    );

  it("an agent frozen past its lease loses the order; its late result is refused; the order ends once", async () => {
    await ctl.admin(ResourceService).createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, { id: TENANT, resourceType: "tenant", desiredState: spec(1) }),
    });
    const orders = ctl.admin(WorkOrderService);
    // An order that outlives its lease (2 s) keeps it by renewals: it is made ready only once it
    // has been seen running under a renewed lease past the end of its first one.
    const firstId = (await ctl.admin(DeploymentService).apply({ tenantId: TENANT })).workOrder!.id;
    const claimed = await waitFor(
      "the first order's claim",
      async () => {
        const o = (await orders.getWorkOrder({ id: firstId })).workOrder!;
        return o.status === WorkOrderStatus.RUNNING ? o : undefined;
      },
      30_000,
      50,
    );
    const firstLeaseEnd = timestampDate(claimed.claim!.leaseExpiresAt!).getTime();
    const renewed = await waitFor(
      "the first order to outlive its first lease",
      async () => {
        const o = (await orders.getWorkOrder({ id: firstId })).workOrder!;
        return Date.now() > firstLeaseEnd &&
          o.status === WorkOrderStatus.RUNNING &&
          timestampDate(o.claim!.leaseExpiresAt!).getTime() > firstLeaseEnd
          ? o
          : undefined;
      },
      30_000,
      100,
    );
    expect(renewed.claim?.fencingToken).toBe(1n);
    const renewedRun = await finishReady(orders, firstId);
    expect(renewedRun.result?.code, renewedRun.result?.message).toBe("APPLY_OK");
    expect(renewedRun.attempts.map((a) => a.outcome)).toEqual(["finished"]);

    // A change recreates the slow container; this time the agent is frozen mid-order (it cannot
    // finish before the freeze: its new container is not ready until the test makes it so).
    await ctl.admin(ResourceService).updateResource({ resourceType: "tenant", id: TENANT, desiredState: spec(2) });
    const orderId = (await ctl.admin(DeploymentService).apply({ tenantId: TENANT })).workOrder!.id;
    const first = await waitFor(
      "the first claim",
      async () => {
        const o = (await orders.getWorkOrder({ id: orderId })).workOrder!;
        return o.status === WorkOrderStatus.RUNNING ? o : undefined;
      },
      30_000,
      50,
    );
    expect(first.claim?.fencingToken).toBe(1n);

    agent.child.kill("SIGSTOP");
    const lapsed = await waitFor(
      "the lease to lapse",
      async () => {
        const o = (await orders.getWorkOrder({ id: orderId })).workOrder!;
        return o.status === WorkOrderStatus.PENDING ? o : undefined;
      },
      15_000,
      100,
    );
    expect(lapsed.attempts.map((a) => a.outcome)).toEqual(["lease_expired"]);
    agent.child.kill("SIGCONT");

    const done = await finishReady(orders, orderId);
    expect(done.result?.code, done.result?.message).toBe("APPLY_OK");
    expect(done.claim?.fencingToken).toBe(2n);
    expect(done.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([
      [1n, "lease_expired"],
      [2n, "finished"],
    ]);
    // Events follow the order's own write.
    const events = await waitFor("the outcome events", async () => {
      const t = (await ctl.admin(EventService).listEvents({ workOrderId: orderId })).events.map((e) => e.type);
      return t.includes("work_order_succeeded") || t.includes("work_order_failed") ? t : undefined;
    });
    expect(events.filter((t) => t === "work_order_lease_expired")).toHaveLength(1);
    expect(events.filter((t) => t === "work_order_succeeded" || t === "work_order_failed")).toEqual(["work_order_succeeded"]);
    // The stale run (the same agent, which could claim again only once it was done) reported its
    // result with the old fencing token and was refused: WORK_ORDER_NOT_CLAIMABLE
    // (FailedPrecondition), not a success that overwrote the new claim's. (The order was pending
    // again at that moment, so that is what the refusal says.)
    const refusals = (await readFile(agent.logFile, "utf8"))
      .split("\n")
      .filter((l) => l.includes(orderId) && l.includes('"action":"report_result"') && l.includes("controller refused the result"));
    expect(refusals).toHaveLength(1);
    expect(JSON.parse(refusals[0]!)).toMatchObject({
      result: "FailedPrecondition",
      metadata: { message: expect.stringMatching(/fencing token 1/) },
    });
    expect(await readFile(agent.logFile, "utf8")).not.toContain("PermissionDenied");
    // One order per desired state: nothing else ran.
    expect(
      (await orders.listWorkOrders({ tenantId: TENANT })).workOrders.filter((o) => o.result?.code !== "SUPERSEDED").map((o) => o.id),
    ).toEqual([firstId, orderId]);
  }, 120_000);

  it("an admin cancels a running order: the agent stops it, reports CANCELLED, and nothing retries it", async () => {
    const orders = ctl.admin(WorkOrderService);
    // The order recreates the container and waits for it to get ready, which it never does
    // here: the cancel always finds it running.
    await ctl.admin(ResourceService).updateResource({ resourceType: "tenant", id: TENANT, desiredState: spec(3) });
    const orderId = (await ctl.admin(DeploymentService).apply({ tenantId: TENANT })).workOrder!.id;
    await waitFor(
      "the order to run",
      async () => ((await orders.getWorkOrder({ id: orderId })).workOrder!.status === WorkOrderStatus.RUNNING ? true : undefined),
      30_000,
      50,
    );
    const asked = await orders.cancelWorkOrder({ id: orderId, reason: "bad release" });
    expect(asked.workOrder?.cancelRequest?.reason).toBe("bad release");
    const done = await waitFor(
      "the agent to stop it",
      async () => {
        const o = (await orders.getWorkOrder({ id: orderId })).workOrder!;
        return o.finishedAt ? o : undefined;
      },
      20_000,
      100,
    );
    expect(done.status).toBe(WorkOrderStatus.CANCELLED);
    expect(done.result?.code).toBe("CANCELLED");
    const events = await waitFor("the cancel events", async () => {
      const t = (await ctl.admin(EventService).listEvents({ workOrderId: orderId })).events.map((e) => e.type);
      return t.includes("work_order_cancelled") ? t : undefined;
    });
    expect(events).toContain("work_order_cancel_requested");
    // The reconciler leaves a cancelled desired state alone until it changes or someone applies.
    await waitFor(
      "the tenant to say so",
      async () => {
        const t = (await ctl.admin(ResourceService).getResource({ resourceType: "tenant", id: TENANT })).resource!;
        return t.convergence?.status === ConvergenceStatus.ORDER_FAILED && t.convergence.message.includes("CANCELLED") ? true : undefined;
      },
      10_000,
    );
    await new Promise((r) => setTimeout(r, 2500));
    const after = (await orders.listWorkOrders({ tenantId: TENANT })).workOrders.filter(
      (o) => o.status === WorkOrderStatus.PENDING || o.status === WorkOrderStatus.RUNNING,
    );
    expect(after).toEqual([]);
    // A pending order is cancelled at once.
    const again = (await ctl.admin(DeploymentService).apply({ tenantId: TENANT })).workOrder!;
    agent.child.kill("SIGSTOP");
    try {
      const c = await orders.cancelWorkOrder({ id: again.id, reason: "not now" });
      if (c.workOrder?.status !== WorkOrderStatus.RUNNING) expect(c.workOrder?.status).toBe(WorkOrderStatus.CANCELLED);
    } finally {
      agent.child.kill("SIGCONT");
    }
    await waitFor(
      "the second order to end",
      async () => ((await orders.getWorkOrder({ id: again.id })).workOrder!.finishedAt ? true : undefined),
      30_000,
      100,
    );
  }, 120_000);
});
