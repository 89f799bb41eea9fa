// Three controllers on one PostgreSQL database, each with a real agent (skippy) of its own, over
// HTTP/2 + TLS: orders created through any controller reach agents streaming from another and
// finish exactly once; kill -9 of the leader mid-traffic hands the loops to another controller
// within seconds, and no acknowledged order is lost or run twice; each controller's sums of the
// agents' counters count the heartbeats it received itself, so their sum counts each order once.
// The agents hold sessions: a node goes offline within seconds when its agent's session ends on
// another controller, and when the controller holding it is killed with it.
import { mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HealthService } from "../gen/skipper/v1/health_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus, NodeLiveness } from "../gen/skipper/v1/resource_pb.js";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import { rawRequest } from "./helpers/https.js";
import { parsePrometheusText, sampleSum } from "./helpers/prometheus-text.js";
import {
  E2E_ADMIN_TOKEN,
  freePort,
  RUN_ID,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const pg = pgUrl();
if (!dockerHost || !pg)
  console.warn("!!! multi-controller-e2e.test.ts SKIPPED: it needs a Docker engine and PostgreSQL (see test/global-setup.ts)");

const NODES = ["mc-a", "mc-b", "mc-c"];
const FINAL = [WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED];

describe.skipIf(!dockerHost || !pg)("several controllers on one PostgreSQL database (real agents)", () => {
  let root: string;
  let store: string;
  const ports: number[] = [];
  const controllers: ControllerProcess[] = [];
  const agents: AgentProcess[] = [];

  const startNth = async (i: number) => {
    await mkdir(join(root, `controller-${i}`), { recursive: true });
    controllers[i] = await startControllerProcess({
      dataDir: join(root, `controller-${i}`, "data"),
      port: ports[i],
      // A short lease: a claim whose answer died with a controller is retried within seconds.
      extraArgs: ["--store", store, "--lease-duration", "5s"],
    });
  };
  const health = (c: ControllerProcess) => c.admin(HealthService).check({});
  const leaderIndex = async (): Promise<number | undefined> => {
    const states = await Promise.all(
      controllers.map((c) =>
        health(c)
          .then((h) => h.leading)
          .catch(() => false),
      ),
    );
    const leaders = states.flatMap((l, i) => (l ? [i] : []));
    expect(leaders.length).toBeLessThanOrEqual(1);
    return leaders[0];
  };
  // An echo order for `node`, created through controller `via`; its id and the text it echoes.
  const echo = async (via: number, node: string, text: string) => {
    const { workOrder } = await controllers[via]!.admin(WorkOrderService).createWorkOrder({
      type: WorkOrderType.EXECUTE_COMMAND,
      target: { nodeId: node },
      action: { kind: { case: "executeCommand", value: { command: { argv: ["echo", text] } } } },
    });
    return { id: workOrder!.id, text };
  };
  const finished = async (via: ControllerProcess, ids: string[]): Promise<WorkOrder[]> =>
    waitFor(
      `${ids.length} orders to finish`,
      async () => {
        const all = await Promise.all(ids.map(async (id) => (await via.admin(WorkOrderService).getWorkOrder({ id })).workOrder!));
        return all.every((o) => FINAL.includes(o.status)) ? all : undefined;
      },
      90_000,
    );
  // Finished once: success, the echoed text, exactly one attempt that finished.
  const expectRanOnce = (orders: WorkOrder[], texts: Map<string, string>) => {
    for (const o of orders) {
      expect(o.status, `${o.id}: ${o.result?.code} ${o.result?.message}`).toBe(WorkOrderStatus.SUCCESS);
      expect(o.result?.details?.command?.stdout, o.id).toBe(`${texts.get(o.id)}\n`);
      expect(
        o.attempts.filter((a) => a.outcome === "finished"),
        o.id,
      ).toHaveLength(1);
    }
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-multi-"));
    store = await freshDatabase(`multi_${RUN_ID}`);
    for (let i = 0; i < 3; i++) ports.push(await freePort());
    for (let i = 0; i < 3; i++) await startNth(i);
    // Registered through one controller, each node's agent talks to another.
    for (let i = 0; i < 3; i++) {
      const { token } = await controllers[0]!.admin(NodeService).registerNode({ nodeId: NODES[i]! });
      await mkdir(join(root, `agent-${i}`, "work"), { recursive: true });
      agents[i] = startAgentProcess({
        controller: controllers[i]!,
        nodeId: NODES[i]!,
        token,
        stateDir: join(root, `agent-${i}`, "state"),
        workDir: join(root, `agent-${i}`, "work"),
        dockerHost: dockerHost!,
        pollInterval: "1s",
        extraArgs: ["--allow-command", "echo"],
      });
    }
    await waitFor(
      "every node online",
      async () => {
        const nodes = (await controllers[2]!.admin(ResourceService).listResources({ resourceType: "node" })).resources;
        const online = nodes.filter(
          (n) => n.currentState?.kind.case === "node" && n.currentState.kind.value.liveness === NodeLiveness.ONLINE,
        );
        return online.length === 3 ? true : undefined;
      },
      60_000,
    );
  }, 120_000);

  afterAll(async () => {
    await Promise.all(agents.map((a) => a?.stop()));
    await Promise.all(controllers.map((c) => c?.stop()));
  });

  it("exactly one controller leads, and orders created through any of them finish once on agents of the others", async () => {
    expect(await leaderIndex()).toBeDefined();
    const texts = new Map<string, string>();
    const made = await Promise.all(
      Array.from({ length: 30 }, (_, k) => echo(k % 3, NODES[(k + 1) % 3]!, `hello-${k}`)), // never the agent's own controller
    );
    for (const m of made) texts.set(m.id, m.text);
    const orders = await finished(controllers[1]!, [...texts.keys()]);
    expectRanOnce(orders, texts);
  }, 120_000);

  it("each controller sums the agent counters of the heartbeats it received itself, so their sum counts every order once", async () => {
    // Each agent heartbeats to its own controller; the 30 echoes above ran 10 on each node.
    const ran = (i: number) =>
      rawRequest(controllers[i]!, "GET", "/metrics", { "x-admin-token": E2E_ADMIN_TOKEN }).then((r) =>
        sampleSum(parsePrometheusText(r.body), "skipper_agent_orders_total", { type: "execute_command", code: "COMMAND_OK" }),
      );
    const sums = await waitFor("every agent's ten orders in its controller's sum", async () => {
      const each = await Promise.all([0, 1, 2].map(ran));
      return each.every((n) => n === 10) ? each : undefined;
    });
    expect(sums.reduce((a, b) => a + b, 0)).toBe(30);
  }, 60_000);

  it("a tenant created and applied through followers is deployed by the leader's reconciler to an agent on a third controller", async () => {
    const leader = (await waitFor("a leader", leaderIndex, 10_000))!;
    const [f1, f2] = [0, 1, 2].filter((i) => i !== leader) as [number, number];
    const tenant = `mc-app-${RUN_ID}`;
    const compose = ["services:", "  app:", "    image: skipper-busybox:local", '    command: ["sleep", "3600"]', ""].join("\n");
    await controllers[f1]!.admin(ResourceService).createResource({
      resourceType: "tenant",
      resource: {
        id: tenant,
        resourceType: "tenant",
        desiredState: {
          kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODES[leader]! }, compose: { composeFile: compose } } },
        },
      },
    });
    const converged = (via: number) =>
      waitFor(
        "the tenant to converge",
        async () => {
          const t = (await controllers[via]!.admin(ResourceService).getResource({ resourceType: "tenant", id: tenant })).resource;
          return t?.convergence?.status === ConvergenceStatus.CONVERGED ? t : undefined;
        },
        90_000,
      );
    await converged(f2);
    // Apply through the other follower: its pass runs there, under the tenant's lock held in the database.
    const applied = await controllers[f2]!.admin(DeploymentService).apply({ tenantId: tenant });
    const [order] = await finished(controllers[f1]!, [applied.workOrder!.id]);
    expect(order!.status).toBe(WorkOrderStatus.SUCCESS);
    await converged(leader);
    await controllers[f1]!.admin(ResourceService).deleteResource({ resourceType: "tenant", id: tenant });
    await waitFor(
      "the tenant's removal order to succeed",
      async () => {
        const { workOrders } = await controllers[leader]!.admin(WorkOrderService).listWorkOrders({ tenantId: tenant, pageSize: 100 });
        return workOrders.some((o) => o.type === WorkOrderType.REMOVE_SERVICE && o.status === WorkOrderStatus.SUCCESS) ? true : undefined;
      },
      90_000,
    );
  }, 180_000);

  it("kill -9 of the leader mid-traffic moves the loops to another controller, and every acknowledged order ends once", async () => {
    const leader = (await waitFor("a leader", leaderIndex, 10_000))!;
    const texts = new Map<string, string>();
    let killedAt = 0;
    // Orders keep coming through every live controller while the leader dies.
    for (let k = 0; k < 45; k++) {
      if (k === 15) {
        controllers[leader]!.child.kill("SIGKILL");
        killedAt = Date.now();
      }
      const via = (leader + 1 + (k % 2)) % 3; // the others, alternately
      const viaLeader = k < 15 && k % 5 === 0; // and the leader, while it lives
      try {
        const m = await echo(viaLeader ? leader : via, NODES[k % 3]!, `after-${k}`);
        texts.set(m.id, m.text);
      } catch (e) {
        // Not acknowledged (the leader died mid-call): no promise was made.
        if (!viaLeader) throw e;
      }
    }
    const survivors = [0, 1, 2].filter((i) => i !== leader);
    const next = await waitFor(
      "another controller to lead",
      async () => {
        const l = await Promise.all(survivors.map((i) => health(controllers[i]!).then((h) => h.leading)));
        return l.some(Boolean) ? survivors[l.indexOf(true)] : undefined;
      },
      15_000,
      50,
    );
    const handover = Date.now() - killedAt;
    console.log(`leadership moved from controller ${leader} to ${next} within ${handover} ms of the kill`);
    expect(handover).toBeLessThan(15_000);

    // A supervisor restarts the dead controller where its agent expects it; it rejoins as a follower.
    await startNth(leader);
    expect((await health(controllers[leader]!)).leading).toBe(false);
    const orders = await finished(controllers[next]!, [...texts.keys()]);
    expectRanOnce(orders, texts);

    // The new leader runs the liveness loop: a node whose agent's session ended on another
    // controller (relayed to the leader) goes offline within seconds.
    const victim = next === 0 ? 1 : 0;
    const agentKilledAt = Date.now();
    await agents[victim]!.kill();
    await offline(next, victim, "session_ended");
    console.log(
      `node ${NODES[victim]} offline ${Date.now() - agentKilledAt} ms after its agent was killed (its session was on controller ${victim})`,
    );

    // kill -9 of a follower, then of its agent: the session's end is never said, and the leader
    // finds it through the follower's presence lapsing.
    const third = 3 - next - victim;
    const controllerKilledAt = Date.now();
    const exited = new Promise((r) => controllers[third]!.child.once("exit", r));
    controllers[third]!.child.kill("SIGKILL");
    await exited;
    await agents[third]!.kill();
    await offline(next, third, "controller_lost");
    console.log(
      `node ${NODES[third]} offline ${Date.now() - controllerKilledAt} ms after kill -9 of controller ${third}, which held its session`,
    );
  }, 180_000);

  // Waits for node `i` to be offline as controller `via` shows it, its node_offline event naming `cause`.
  const offline = async (via: number, i: number, cause: string) => {
    await waitFor(
      `node ${NODES[i]} offline`,
      async () => {
        const n = (await controllers[via]!.admin(ResourceService).getResource({ resourceType: "node", id: NODES[i]! })).resource;
        return n?.currentState?.kind.case === "node" && n.currentState.kind.value.liveness === NodeLiveness.OFFLINE ? true : undefined;
      },
      60_000,
    );
    const { events } = await controllers[via]!.admin(EventService).listEvents({
      type: "node_offline",
      resourceId: NODES[i]!,
      newestFirst: true,
      pageSize: 1,
    });
    expect(events[0]?.data?.cause).toBe(cause);
  };
});
