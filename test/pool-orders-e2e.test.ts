// Pool orders and capability routing end to end: the built controller and five skippy processes
// over HTTP/2 + TLS. Three agents form the pool role=web (two on sessions, one polling, so both
// dispatch paths offer pool orders), a fourth is outside it (role=db) and a fifth is in it but
// disabled. Every agent allows `true`, so each reports command.true. 20 execute_command orders to
// the pool each end exactly once (SUCCESS, one attempt, claimed by a pool node, the claimer named
// by target.node_id and by the work_order_started event), more than one node takes part, and the
// outside and disabled nodes take none. An order whose pool has no node holding its required
// capability waits and says why (WorkOrder.wait), is refused to a node outside the pool that asks
// for it by id, is read by no node it does not admit, and expires as orders do. Nodes are listed
// by capability and liveness. Every wait is for observed progress.
import { mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { NodeLiveness } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { isFinishedStatus } from "../common/order-status.js";
import {
  E2E_ADMIN_TOKEN,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { rawRequest } from "./helpers/https.js";

const POOL = ["pool-a-5e1c", "pool-b-5e1c", "pool-c-5e1c"];
const OUTSIDE = "outside-5e1c";
const DISABLED = "disabled-5e1c";
const ORDERS = 20;

describe("pool orders (real processes)", () => {
  let root: string;
  let ctl: ControllerProcess;
  const agents: AgentProcess[] = [];
  const tokens = new Map<string, string>();

  const pending = (argv: string[], required: string[], expiresInMs?: number) => ({
    type: WorkOrderType.EXECUTE_COMMAND,
    target: { pool: { nodeSelector: { role: "web" } }, requiredCapabilities: required },
    action: { kind: { case: "executeCommand" as const, value: { command: { argv } } } },
    expiresAt: expiresInMs ? timestampFromDate(new Date(Date.now() + expiresInMs)) : undefined,
  });
  const asNode = (nodeId: string) => {
    const auth: Interceptor = (next) => (req) => (req.header.set("authorization", `Bearer ${tokens.get(nodeId)}`), next(req));
    const transport = createConnectTransport({
      baseUrl: `${ctl.url}/v1`,
      httpVersion: "2",
      nodeOptions: { ca: ctl.ca },
      interceptors: [auth],
    });
    return createClient(WorkOrderService, transport);
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-pool-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    const nodes = ctl.admin(NodeService);
    const setups: [string, string, "session" | "poll"][] = [
      [POOL[0]!, "web", "session"],
      [POOL[1]!, "web", "session"],
      [POOL[2]!, "web", "poll"],
      [OUTSIDE, "db", "session"],
      [DISABLED, "web", "session"],
    ];
    for (const [id, role] of setups) {
      tokens.set(id, (await nodes.registerNode({ nodeId: id, labels: { role } })).token);
      await mkdir(join(root, id, "work"), { recursive: true });
    }
    await ctl.admin(ResourceService).updateResource({
      resourceType: "node",
      id: DISABLED,
      desiredState: { kind: { case: "node", value: { labels: { role: "web" }, disabled: true } } },
    });
    for (const [id, , transport] of setups) {
      agents.push(
        startAgentProcess({
          controller: ctl,
          nodeId: id,
          token: tokens.get(id)!,
          stateDir: join(root, id, "state"),
          workDir: join(root, id, "work"),
          // execute_command needs no engine.
          dockerHost: "unix:///nonexistent.sock",
          transport,
          extraArgs: ["--allow-command", "true"],
        }),
      );
    }
  }, 60_000);

  afterAll(async () => {
    await Promise.all(agents.map((a) => a.stop()));
    await ctl?.stop();
  });

  it("lists nodes by capability and liveness once their agents report", async () => {
    const resources = ctl.admin(ResourceService);
    const listed = await waitFor(
      "every node online with command.true",
      async () => {
        const res = await resources.listResources({
          resourceType: "node",
          capabilities: ["command.true"],
          liveness: [NodeLiveness.ONLINE],
        });
        return res.resources.length === 5 ? res.resources : undefined;
      },
      60_000,
    );
    const caps = listed[0]!.currentState?.kind.case === "node" ? listed[0]!.currentState.kind.value.capabilities?.capabilities : [];
    expect(caps).toContain("command.true");
    // No engine here: nothing that needs one is claimed.
    expect(caps).not.toContain("compose.deploy");
    expect((await resources.listResources({ resourceType: "node", capabilities: ["compose.deploy"] })).resources).toEqual([]);
    // The REST route takes the same filters as query parameters.
    const rest = async (query: string) => {
      const r = await rawRequest(ctl, "GET", `/v1/resources?resource_type=node&${query}`, { "x-admin-token": E2E_ADMIN_TOKEN });
      expect(r.status).toBe(200);
      return (JSON.parse(r.body) as { data: { resources: { id: string }[] } }).data.resources.map((n) => n.id).sort();
    };
    expect(await rest("capabilities=command.true&liveness=online&liveness=degraded")).toEqual([...POOL, DISABLED, OUTSIDE].sort());
    expect(await rest("capabilities=command.true&liveness=offline")).toEqual([]);
    expect(await rest("capabilities=proxy.haproxy")).toEqual([]);
  }, 90_000);

  it("an order no node of its pool can take waits saying why, is refused to an outsider, and expires", async () => {
    const orders = ctl.admin(WorkOrderService);
    const created = (await orders.createWorkOrder(pending(["true"], ["proxy.haproxy"], 4000))).workOrder!;
    expect(created.status).toBe(WorkOrderStatus.PENDING);
    expect(created.wait?.reason).toBe("NO_ELIGIBLE_NODE");
    expect(created.wait?.message).toContain("proxy.haproxy");
    const read = (await orders.getWorkOrder({ id: created.id })).workOrder!;
    expect([read.wait?.reason, read.wait?.eligibleNodes]).toEqual(["NO_ELIGIBLE_NODE", 0]);
    // A node outside the pool asking for it by id is refused, and says why.
    const refused = await asNode(OUTSIDE)
      .claimWorkOrder({ id: created.id })
      .then(
        () => undefined,
        (e: Error) => e.message,
      );
    expect(refused).toMatch(/not_claimable|may not claim/i);
    // Nor may it, or a pool node lacking the capability, read the order's action.
    for (const id of [OUTSIDE, POOL[0]!]) {
      const read = await asNode(id)
        .getWorkOrder({ id: created.id })
        .then(
          (r) => `read ${r.workOrder?.action?.kind.case}`,
          (e: Error) => e.message,
        );
      expect(read).toMatch(/permission_denied.*may not claim or read pool order/);
    }
    const ended = await waitFor(
      "the unclaimable order to expire",
      async () => {
        const o = (await orders.getWorkOrder({ id: created.id })).workOrder!;
        return isFinishedStatus(o.status) ? o : undefined;
      },
      30_000,
    );
    expect([WorkOrderStatus[ended.status], ended.result?.code, ended.attempts.length]).toEqual(["FAILED", "EXPIRED", 0]);
  }, 60_000);

  it(`${ORDERS} orders to a pool of three each end once, on a pool node, spread over more than one`, async () => {
    const orders = ctl.admin(WorkOrderService);
    const ids: string[] = [];
    for (let i = 0; i < ORDERS; i++) ids.push((await orders.createWorkOrder(pending(["true"], ["command.true"]))).workOrder!.id);
    const ended = await waitFor(
      `all ${ORDERS} pool orders to end`,
      async () => {
        const all: WorkOrder[] = [];
        for (const id of ids) all.push((await orders.getWorkOrder({ id })).workOrder!);
        return all.every((o) => isFinishedStatus(o.status)) ? all : undefined;
      },
      120_000,
      250,
    );
    const byNode = new Map<string, number>();
    for (const o of ended) {
      expect([o.id, WorkOrderStatus[o.status], o.result?.code]).toEqual([o.id, "SUCCESS", "COMMAND_OK"]);
      expect(o.attempts).toHaveLength(1);
      expect(o.attempts[0]!.outcome).toBe("finished");
      const node = o.target?.nodeId ?? "";
      expect(POOL).toContain(node);
      expect(o.claim?.nodeId).toBe(node);
      expect(o.target?.pool?.nodeSelector).toEqual({ role: "web" });
      expect(o.wait).toBeUndefined();
      byNode.set(node, (byNode.get(node) ?? 0) + 1);
    }
    expect(byNode.size).toBeGreaterThan(1);
    expect(byNode.has(OUTSIDE)).toBe(false);
    expect(byNode.has(DISABLED)).toBe(false);
    // The events name the claiming node: one start and one end each.
    const events = ctl.admin(EventService);
    for (const o of ended) {
      const evs = (await events.listEvents({ workOrderId: o.id })).events;
      const started = evs.filter((e) => e.type === "work_order_started");
      expect(started.map((e) => e.nodeId)).toEqual([o.target?.nodeId]);
      expect(evs.filter((e) => e.type === "work_order_succeeded")).toHaveLength(1);
    }
    // The listing by node finds each node's share.
    for (const [node, n] of byNode) {
      const listed = (await orders.listWorkOrders({ nodeId: node, pageSize: 1000 })).workOrders.filter((o) => ids.includes(o.id));
      expect(listed).toHaveLength(n);
    }
    console.log(`pool orders by node: ${JSON.stringify(Object.fromEntries(byNode))}`);
  }, 180_000);
});
