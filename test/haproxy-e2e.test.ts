// Two controllers on one PostgreSQL database behind HAProxy (TCP, TLS passed through), four real
// agents (skippy) given only HAProxy's address: their connections spread over both controllers;
// orders created through either controller's own port, for every node, end exactly once (so half
// of them reach their agent by the relay between controllers); kill -9 of one controller
// mid-traffic moves its agents through HAProxy to the other, and every acknowledged order and a
// tenant's deployment still end once. Then the killed one is restarted and the other is killed.
import { cp, mkdir, mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus, NodeLiveness } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { haproxyBinary, haproxyConfig, startHaproxy, type HaproxyProcess } from "./helpers/haproxy.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import {
  freePort,
  removeComposeProject,
  RUN_ID,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const pg = pgUrl();
const haproxyBin = haproxyBinary();
if (!dockerHost || !pg || !haproxyBin)
  console.warn(
    "!!! haproxy-e2e.test.ts SKIPPED: it needs a Docker engine, PostgreSQL (see test/global-setup.ts) and haproxy (apt-get install haproxy)",
  );

const NODES = ["hp-a", "hp-b", "hp-c", "hp-d"];
const FINAL = [WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED];
const END_EVENTS = ["work_order_succeeded", "work_order_failed", "work_order_cancelled"];

it("the README's HAProxy configuration is the one this test runs", async () => {
  const readme = await readFile(new URL("../README.md", import.meta.url), "utf8");
  const block = /```haproxy\n([\s\S]*?)```/.exec(readme)?.[1];
  expect(block).toBe(
    haproxyConfig({ listen: "0.0.0.0:8443", backends: ["10.0.0.11:8443", "10.0.0.12:8443"], caFile: "/etc/haproxy/skipper-ca.crt" }),
  );
});

describe.skipIf(!dockerHost || !pg || !haproxyBin)("two controllers behind HAProxy (real agents, kill -9 of either)", () => {
  let root: string;
  let store: string;
  let proxy: HaproxyProcess;
  const ports: number[] = [];
  const controllers: ControllerProcess[] = [];
  const agents: AgentProcess[] = [];
  const tenants: string[] = [];

  const startNth = async (i: number) => {
    await mkdir(join(root, `controller-${i}`, "data"), { recursive: true });
    controllers[i] = await startControllerProcess({
      dataDir: join(root, `controller-${i}`, "data"),
      port: ports[i],
      // A short lease: a claim whose answer died with a controller is retried within seconds. Not
      // shorter: an agent whose controller is killed renews through the survivor only after HAProxy
      // marks the dead one down (1-2.5 s) and the agent reconnects, and a renewal must come within
      // 75 % of the lease (with 5 s, one order of 24 lost its lease on a loaded CI machine).
      extraArgs: ["--store", store, "--lease-duration", "10s"],
    });
  };
  // An echo order for `node`, created through controller `via`'s own port.
  const echo = async (via: number, node: string, text: string) => {
    const { workOrder } = await controllers[via]!.admin(WorkOrderService).createWorkOrder({
      type: WorkOrderType.EXECUTE_COMMAND,
      target: { nodeId: node },
      action: { kind: { case: "executeCommand", value: { command: { argv: ["echo", text] } } } },
    });
    return { id: workOrder!.id, text };
  };
  const finished = (via: ControllerProcess, ids: string[]): Promise<WorkOrder[]> =>
    waitFor(
      `${ids.length} orders to finish`,
      async () => {
        const all = await Promise.all(ids.map(async (id) => (await via.admin(WorkOrderService).getWorkOrder({ id })).workOrder!));
        return all.every((o) => FINAL.includes(o.status)) ? all : undefined;
      },
      90_000,
    );
  // Ended once: success, the echoed text, one attempt that finished, one end event.
  const expectRanOnce = async (via: ControllerProcess, orders: WorkOrder[], texts: Map<string, string>) => {
    for (const o of orders) {
      expect(o.status, `${o.id}: ${o.result?.code} ${o.result?.message}`).toBe(WorkOrderStatus.SUCCESS);
      if (texts.has(o.id)) expect(o.result?.details?.command?.stdout, o.id).toBe(`${texts.get(o.id)}\n`);
      expect(
        o.attempts.filter((a) => a.outcome === "finished"),
        o.id,
      ).toHaveLength(1);
      const { events } = await via.admin(EventService).listEvents({ workOrderId: o.id, pageSize: 1000 });
      expect(
        events.filter((e) => END_EVENTS.includes(e.type)).map((e) => e.type),
        o.id,
      ).toEqual(["work_order_succeeded"]);
    }
  };
  // HAProxy's view: how many connections each controller holds, and whether it is up.
  const spread = async () => {
    const s = await proxy.stats();
    return [0, 1].map((i) => s.get(`controller-${i}`) ?? { sessions: 0, status: "?" });
  };
  const tenantSpec = (node: string) => {
    const compose = ["services:", "  app:", "    image: skipper-busybox:local", '    command: ["sleep", "3600"]', ""].join("\n");
    return { deploymentPolicy: { targetNodeId: node }, compose: { composeFile: compose } };
  };
  const createTenant = async (via: number, id: string, node: string) => {
    tenants.push(id);
    await controllers[via]!.admin(ResourceService).createResource({
      resourceType: "tenant",
      resource: { id, resourceType: "tenant", desiredState: { kind: { case: "tenant", value: tenantSpec(node) } } },
    });
  };
  // The tenant converges, and each of its orders ended once.
  const expectDeployed = async (via: ControllerProcess, id: string) => {
    await waitFor(
      `tenant ${id} to converge`,
      async () => {
        const t = (await via.admin(ResourceService).getResource({ resourceType: "tenant", id })).resource;
        return t?.convergence?.status === ConvergenceStatus.CONVERGED ? t : undefined;
      },
      90_000,
    );
    const { workOrders } = await via.admin(WorkOrderService).listWorkOrders({ tenantId: id, pageSize: 100 });
    expect(workOrders.length).toBeGreaterThan(0);
    await expectRanOnce(
      via,
      await finished(
        via,
        workOrders.map((o) => o.id),
      ),
      new Map(),
    );
  };

  // Orders for every node through both controllers while `victim` is killed after the first third;
  // returns the acknowledged ones, which must all end once on the survivor.
  const killMidTraffic = async (victim: number) => {
    const survivor = 1 - victim;
    const tenant = `hp-${victim}-${RUN_ID}`;
    await createTenant(victim, tenant, NODES[victim]!);
    const texts = new Map<string, string>();
    let killedAt = 0;
    for (let k = 0; k < 36; k++) {
      if (k === 12) {
        controllers[victim]!.child.kill("SIGKILL");
        killedAt = Date.now();
      }
      const via = k % 2 === 0 ? victim : survivor;
      try {
        const m = await echo(via, NODES[k % 4]!, `kill-${victim}-${k}`);
        texts.set(m.id, m.text);
      } catch (e) {
        // Not acknowledged (the controller died mid-call, or is gone): no promise was made.
        if (via === survivor) throw e;
      }
    }
    expect(texts.size).toBeGreaterThanOrEqual(24);
    // Its agents came back through HAProxy to the survivor.
    const moved = await waitFor(
      "every agent's connection on the survivor",
      async () => {
        const s = await spread();
        return s[victim]!.status === "DOWN" && s[survivor]!.sessions >= NODES.length ? s : undefined;
      },
      30_000,
      50,
    );
    console.log(
      `kill -9 of controller ${victim}: ${texts.size} orders acknowledged; haproxy ${moved.map((c) => `${c.status}:${c.sessions}`).join(" / ")} within ${Date.now() - killedAt} ms`,
    );
    const orders = await finished(controllers[survivor]!, [...texts.keys()]);
    await expectRanOnce(controllers[survivor]!, orders, texts);
    await expectDeployed(controllers[survivor]!, tenant);
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-haproxy-"));
    store = await freshDatabase(`haproxy_${RUN_ID}`);
    for (let i = 0; i < 2; i++) ports.push(await freePort());
    await startNth(0);
    // One address, one certificate: the second controller serves the first one's TLS material
    // (CA, server certificate, client CA, secret key ring, ticket key), as an operator copies it.
    await cp(join(root, "controller-0", "data", "tls"), join(root, "controller-1", "data", "tls"), { recursive: true });
    await startNth(1);
    proxy = await startHaproxy(
      haproxyBin!,
      root,
      ports.map((p) => `127.0.0.1:${p}`),
      controllers[0]!.caFile,
    );
    // The agents know HAProxy's address only, and trust the shared CA. They run on sessions, as
    // skippy does by default (multi-controller-e2e covers polling agents across controllers): an
    // order created through the other controller reaches a node's session by the database's
    // notification.
    const viaProxy = { url: proxy.url, caFile: controllers[0]!.caFile } as ControllerProcess;
    for (let i = 0; i < NODES.length; i++) {
      const { token } = await controllers[i % 2]!.admin(NodeService).registerNode({ nodeId: NODES[i]! });
      await mkdir(join(root, `agent-${i}`, "work"), { recursive: true });
      agents[i] = startAgentProcess({
        controller: viaProxy,
        nodeId: NODES[i]!,
        token,
        stateDir: join(root, `agent-${i}`, "state"),
        workDir: join(root, `agent-${i}`, "work"),
        dockerHost: dockerHost!,
        pollInterval: "1s",
        extraArgs: ["--allow-command", "echo", "--transport", "session"],
      });
    }
    await waitFor(
      "every node online",
      async () => {
        const nodes = (await controllers[1]!.admin(ResourceService).listResources({ resourceType: "node" })).resources;
        const online = nodes.filter(
          (n) => n.currentState?.kind.case === "node" && n.currentState.kind.value.liveness === NodeLiveness.ONLINE,
        );
        return online.length === NODES.length ? true : undefined;
      },
      60_000,
    );
  }, 120_000);

  afterAll(async () => {
    await Promise.all(agents.map((a) => a?.stop()));
    await Promise.all(controllers.map((c) => c?.stop()));
    await proxy?.stop();
    if (dockerHost) for (const t of tenants) await removeComposeProject(dockerHost, t);
  });

  it("spreads the agents over both controllers, and orders created through either one's port end once", async () => {
    const s = await waitFor("both controllers to hold agents' connections", async () => {
      const now = await spread();
      return now.every((c) => c.status === "UP" && c.sessions >= 1) ? now : undefined;
    });
    console.log(`haproxy: connections per controller ${s.map((c) => c.sessions).join(" / ")}`);
    // Every node gets orders through both controllers: whichever holds its agent, half of its
    // orders reach it by the relay from the other one.
    const texts = new Map<string, string>();
    const made = await Promise.all(Array.from({ length: 24 }, (_, k) => echo(k % 2, NODES[Math.floor(k / 2) % 4]!, `hello-${k}`)));
    for (const m of made) texts.set(m.id, m.text);
    await expectRanOnce(controllers[1]!, await finished(controllers[0]!, [...texts.keys()]), texts);
  }, 120_000);

  it("kill -9 of controller 0 mid-traffic: its agents move through haproxy to controller 1, every acknowledged order ends once", async () => {
    await killMidTraffic(0);
  }, 180_000);

  it("restarted, controller 0 takes agents again when controller 1 is killed: the same holds", async () => {
    await startNth(0);
    await waitFor("haproxy to see controller 0 up", async () => ((await spread())[0]!.status === "UP" ? true : undefined), 20_000);
    await killMidTraffic(1);
  }, 180_000);

  it("a hung controller (SIGSTOP) is marked down by the health check, and shutdown-sessions moves its agents at once", async () => {
    await startNth(1);
    await waitFor("haproxy to see controller 1 up", async () => ((await spread())[1]!.status === "UP" ? true : undefined), 20_000);
    // Every agent is on controller 0 now (it survived the last kill); its kernel still accepts
    // connections while it is stopped, and the agents' connections stay open until haproxy closes them.
    expect((await spread())[0]!.sessions).toBeGreaterThanOrEqual(NODES.length);
    const stoppedAt = Date.now();
    controllers[0]!.child.kill("SIGSTOP");
    try {
      const moved = await waitFor(
        "every agent's connection on controller 1",
        async () => {
          const s = await spread();
          return s[0]!.status === "DOWN" && s[1]!.sessions >= NODES.length ? s : undefined;
        },
        30_000,
        50,
      );
      console.log(
        `SIGSTOP of controller 0: haproxy ${moved.map((c) => `${c.status}:${c.sessions}`).join(" / ")} within ${Date.now() - stoppedAt} ms`,
      );
      const texts = new Map<string, string>();
      for (const m of await Promise.all(NODES.map((n, k) => echo(1, n, `hung-${k}`)))) texts.set(m.id, m.text);
      await expectRanOnce(controllers[1]!, await finished(controllers[1]!, [...texts.keys()]), texts);
    } finally {
      controllers[0]!.child.kill("SIGCONT");
    }
  }, 120_000);
});
