// skippy on its Session stream beside skippy polling, one controller (a process, short lease),
// real Docker engine, real HTTP/2 + TLS. The session agent reaches the controller through a TCP
// proxy the test controls (helpers/tcp-proxy.ts), so its session can be cut mid-order.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { markReady } from "./helpers/containers.js";
import {
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { startTcpProxy, type TcpProxy } from "./helpers/tcp-proxy.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! agent-session-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const SESSION_NODE = "session-host";
const POLL_NODE = "poll-host";
const SESSION_TENANT = `sess-shop-${RUN_ID}`;
const POLL_TENANT = `poll-shop-${RUN_ID}`;
// Healthy only once the test says so (markReady: /tmp/ready in the container), so an order runs
// until the test has seen what it waits for. A new ROUND recreates the container (not ready).
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
const spec = (node: string, round: number) => ({
  kind: {
    case: "tenant" as const,
    value: { deploymentPolicy: { targetNodeId: node }, compose: { composeFile: COMPOSE, env: { ROUND: String(round) } } },
  },
});

describe.skipIf(!dockerHost)("skippy on a session beside skippy polling (real engine, real processes)", () => {
  let ctl: ControllerProcess;
  let proxy: TcpProxy;
  let sessionAgent: AgentProcess;
  let pollAgent: AgentProcess;
  let root: string;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-session-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--lease-duration", "2s", "--log-level", "debug"] });
    proxy = await startTcpProxy({ host: "127.0.0.1", port: Number(new URL(ctl.url).port) });
    const nodes = ctl.admin(NodeService);
    const sessionToken = (await nodes.registerNode({ nodeId: SESSION_NODE })).token;
    const pollToken = (await nodes.registerNode({ nodeId: POLL_NODE })).token;
    const common = { workDir: join(root, "work"), dockerHost: dockerHost! };
    sessionAgent = startAgentProcess({
      ...common,
      controller: { ...ctl, url: `https://127.0.0.1:${proxy.port}` },
      nodeId: SESSION_NODE,
      token: sessionToken,
      stateDir: join(root, "state-session"),
      extraArgs: ["--transport", "session", "--ready-timeout", "45s"],
    });
    pollAgent = startAgentProcess({
      ...common,
      controller: ctl,
      nodeId: POLL_NODE,
      token: pollToken,
      stateDir: join(root, "state-poll"),
      extraArgs: ["--transport", "poll", "--ready-timeout", "45s"],
    });
  }, 60_000);

  afterAll(async () => {
    await sessionAgent?.stop();
    await pollAgent?.stop();
    await proxy?.close();
    await ctl?.stop();
    if (root) {
      await removeComposeProject(dockerHost!, SESSION_TENANT);
      await removeComposeProject(dockerHost!, POLL_TENANT);
      if (!process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
    }
  }, 60_000);

  const orders = () => ctl.admin(WorkOrderService);
  const orderOf = async (id: string) => (await orders().getWorkOrder({ id })).workOrder!;
  const running = (id: string) =>
    waitFor(
      `order ${id} to run`,
      async () => ((o) => (o.status === WorkOrderStatus.RUNNING ? o : undefined))(await orderOf(id)),
      30_000,
      50,
    );
  const ended = (id: string, tenant?: string) =>
    waitFor(
      `order ${id} to end`,
      async () => {
        if (tenant) await markReady(dockerHost!, tenant, "slow");
        const o = await orderOf(id);
        return o.finishedAt ? o : undefined;
      },
      60_000,
      100,
    );
  const deploy = async (tenant: string, node: string, round: number, create_ = false): Promise<string> => {
    if (create_) {
      await ctl.admin(ResourceService).createResource({
        resourceType: "tenant",
        resource: create(ResourceSchema, { id: tenant, resourceType: "tenant", desiredState: spec(node, round) }),
      });
    } else await ctl.admin(ResourceService).updateResource({ resourceType: "tenant", id: tenant, desiredState: spec(node, round) });
    return (await ctl.admin(DeploymentService).apply({ tenantId: tenant })).workOrder!.id;
  };
  const endEvents = async (id: string) =>
    (await ctl.admin(EventService).listEvents({ workOrderId: id })).events
      .map((e) => e.type)
      .filter((t) => t === "work_order_succeeded" || t === "work_order_failed" || t === "work_order_cancelled");
  const log = async (a: AgentProcess) => (await readFile(a.logFile, "utf8")).split("\n").filter(Boolean);
  const lines = async (a: AgentProcess, action: string) => (await log(a)).filter((l) => l.includes(`"action":"${action}"`));

  it("both agents deploy and converge; the session agent keeps its lease over the session while its order outlives it", async () => {
    const sessionId = await deploy(SESSION_TENANT, SESSION_NODE, 1, true);
    const pollId = await deploy(POLL_TENANT, POLL_NODE, 1, true);
    const claimed = await running(sessionId);
    const firstLeaseEnd = timestampDate(claimed.claim!.leaseExpiresAt!).getTime();
    // Made ready only once it has been seen running under a lease renewed past its first one.
    await waitFor(
      "the session order to outlive its first lease",
      async () => {
        const o = await orderOf(sessionId);
        return Date.now() > firstLeaseEnd + 1000 &&
          o.status === WorkOrderStatus.RUNNING &&
          timestampDate(o.claim!.leaseExpiresAt!).getTime() > firstLeaseEnd
          ? true
          : undefined;
      },
      30_000,
      100,
    );
    const [s, p] = [await ended(sessionId, SESSION_TENANT), await ended(pollId, POLL_TENANT)];
    expect(s.result?.code, s.result?.message).toBe("APPLY_OK");
    expect(p.result?.code, p.result?.message).toBe("APPLY_OK");
    expect(s.attempts.map((a) => a.outcome)).toEqual(["finished"]);
    expect(s.claim?.fencingToken).toBe(1n);
    // The session agent took its order as pushed (acked on the session) and never asked for one;
    // the polling agent never opened a session.
    expect(await lines(sessionAgent, "session_opened")).not.toHaveLength(0);
    expect((await lines(sessionAgent, "ack")).some((l) => l.includes(sessionId) && l.includes('"result":"ok"'))).toBe(true);
    expect(await lines(sessionAgent, "claim")).toHaveLength(0);
    expect(await lines(pollAgent, "session_opened")).toHaveLength(0);
    expect((await lines(pollAgent, "claim")).some((l) => l.includes(pollId))).toBe(true);
    // Renewals and the result went on the session: the controller logged (at debug) the polling
    // node's unary renewals and reports, and none of the session node's.
    const calls = (await readFile(join(root, "controller.out"), "utf8")).split("\n");
    const unary = (method: string, node: string) =>
      calls.filter((l) => l.includes(`"action":"WorkOrderService.${method}"`) && l.includes(`"node_id":"${node}"`));
    expect(unary("RenewWorkOrderLease", POLL_NODE).length).toBeGreaterThan(0);
    expect(unary("ReportWorkOrderResult", POLL_NODE).length).toBeGreaterThan(0);
    expect(unary("RenewWorkOrderLease", SESSION_NODE)).toHaveLength(0);
    expect(unary("ReportWorkOrderResult", SESSION_NODE)).toHaveLength(0);
    for (const id of [sessionId, pollId]) expect(await endEvents(id)).toEqual(["work_order_succeeded"]);
    // Converged: the heartbeats (full reports on the session) show the project running.
    await waitFor("both tenants to converge", async () => {
      const get = (id: string) => ctl.admin(ResourceService).getResource({ resourceType: "tenant", id });
      const both = [(await get(SESSION_TENANT)).resource!, (await get(POLL_TENANT)).resource!];
      return both.every((t) => t.convergence?.status === ConvergenceStatus.CONVERGED) ? true : undefined;
    });
  }, 120_000);

  it("a cancel of a running order on the session agent ends it CANCELLED", async () => {
    const id = await deploy(SESSION_TENANT, SESSION_NODE, 2);
    await running(id);
    await orders().cancelWorkOrder({ id, reason: "bad release" });
    const done = await ended(id);
    expect(done.status).toBe(WorkOrderStatus.CANCELLED);
    expect(done.result?.code).toBe("CANCELLED");
    expect(await endEvents(id)).toEqual(["work_order_cancelled"]);
    expect((await lines(sessionAgent, "cancel")).some((l) => l.includes(id))).toBe(true);
  }, 120_000);

  it("a session cut mid-order: the agent reconnects and the order ends exactly once", async () => {
    const id = await deploy(SESSION_TENANT, SESSION_NODE, 3);
    await running(id);
    // Mid-order: the agent has its ack answered and runs it (cut before that, the controller
    // releases the claim and pushes the order again with the next token, which is also once).
    await waitFor("the agent to run the order", async () =>
      (await lines(sessionAgent, "ack")).some((l) => l.includes(id) && l.includes('"result":"ok"')) ? true : undefined,
    );
    const opened = (await lines(sessionAgent, "session_opened")).length;
    expect(proxy.cutAll()).toBeGreaterThan(0);
    await waitFor(
      "the agent to open a new session",
      async () => ((await lines(sessionAgent, "session_opened")).length > opened ? true : undefined),
      30_000,
    );
    const done: WorkOrder = await ended(id, SESSION_TENANT);
    expect(done.result?.code, done.result?.message).toBe("APPLY_OK");
    expect(done.claim?.fencingToken).toBe(1n);
    expect(done.attempts.map((a) => a.outcome)).toEqual(["finished"]);
    expect(await endEvents(id)).toEqual(["work_order_succeeded"]);
    // One run: the agent executed it once and reported one result.
    expect((await lines(sessionAgent, "execute")).filter((l) => l.includes(id))).toHaveLength(1);
    expect((await lines(sessionAgent, "controller_unreachable")).length).toBeGreaterThan(0);
  }, 120_000);
});
