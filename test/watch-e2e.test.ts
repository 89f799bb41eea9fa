// Streaming dispatch end to end: with a 30 s poll interval, an order reaches a connected agent
// through WatchWorkOrders before its next poll; with the stream off, the agent waits for its
// poll. Which it was is read from the order of the agent's calls in the controller's log, not
// from how long dispatch took. Controller and skippy as processes, a real engine.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { startAgentProcess, startControllerProcess, waitFor, type AgentProcess, type ControllerProcess } from "./helpers/processes.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! watch-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

describe.skipIf(!dockerHost)("pushed work orders (real processes)", () => {
  let ctl: ControllerProcess;
  const agents: AgentProcess[] = [];
  let root: string;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-watch-"));
    // Debug logging: one line per call, which the idle-agent test counts.
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--log-level", "debug"] });
  });
  afterAll(async () => {
    for (const a of agents) await a.stop();
    await ctl?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  /** The controller's log lines (one per call at debug level) of `nodeId`'s calls, in order: their actions. */
  const callsOf = async (nodeId: string) =>
    (await readFile(join(root, "controller.out"), "utf8"))
      .split("\n")
      .filter((l) => l.includes(`"node_id":"${nodeId}"`))
      .map((l) => /"action":"([^"]+)"/.exec(l)?.[1] ?? "");
  const count = (calls: string[], action: string) => calls.filter((a) => a === action).length;

  /**
   * Starts an agent, waits until it has settled into its poll sleep (first heartbeat and first
   * look for work done, stream open when it watches), queues an order for it and waits for the
   * claim. Returns the node's calls as they stood when it settled and up to the claim.
   */
  async function dispatch(nodeId: string, pollInterval: string, extraArgs: string[]): Promise<{ settled: string[]; toClaim: string[] }> {
    const token = (await ctl.admin(NodeService).registerNode({ nodeId })).token;
    const agent = startAgentProcess({
      transport: "poll", // the unary path itself: WatchWorkOrders and polling
      controller: ctl,
      nodeId,
      token,
      stateDir: join(root, nodeId, "state"),
      workDir: join(root, nodeId, "work"),
      dockerHost: dockerHost!,
      pollInterval,
      extraArgs,
    });
    agents.push(agent);
    const watching = !extraArgs.includes("--no-watch");
    const settled = await waitFor(
      `${nodeId} to settle into its poll sleep`,
      async () => {
        const calls = await callsOf(nodeId);
        if (count(calls, "NodeService.Heartbeat") < 1 || count(calls, "NodeService.GetNextWorkOrder") < 1) return undefined;
        if (watching && !(await readFile(agent.logFile, "utf8")).includes('"action":"watch","result":"connected"')) return undefined;
        return calls;
      },
      45_000,
      50,
    );
    const tenant = `${nodeId}-t`;
    await ctl.admin(ResourceService).createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id: tenant,
        resourceType: "tenant",
        desiredState: {
          kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: nodeId }, compose: { composeFile: "services: {}\n" } } },
        },
      }),
    });
    await waitFor(
      "the order to be claimed",
      async () => {
        const o = (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId: tenant })).workOrders[0];
        return o?.startedAt ? o : undefined;
      },
      45_000,
      50,
    );
    const calls = await waitFor(
      "the claim in the controller's log",
      async () => {
        const c = await callsOf(nodeId);
        return c.includes("WorkOrderService.ClaimWorkOrder") ? c : undefined;
      },
      10_000,
      50,
    );
    return { settled, toClaim: calls.slice(0, calls.indexOf("WorkOrderService.ClaimWorkOrder")) };
  }

  it("a connected agent claims a new order as soon as it is pushed, before its next (30 s) poll", async () => {
    const { settled, toClaim } = await dispatch("watch-on", "30s", []);
    // No heartbeat (the poll) came between settling and the claim: the stream rang the doorbell
    // and the agent asked for the order at once.
    expect(count(toClaim, "NodeService.Heartbeat")).toBe(count(settled, "NodeService.Heartbeat"));
    expect(count(toClaim, "NodeService.GetNextWorkOrder")).toBe(count(settled, "NodeService.GetNextWorkOrder") + 1);
    expect(toClaim).toContain("NodeService.WatchWorkOrders");
  }, 60_000);

  it("an idle agent makes one call per interval, its heartbeat, and asks for work only when there is some", async () => {
    const nodeId = "idle-calls";
    const token = (await ctl.admin(NodeService).registerNode({ nodeId })).token;
    const agent = startAgentProcess({
      transport: "poll", // the unary path itself: WatchWorkOrders and polling
      controller: ctl,
      nodeId,
      token,
      stateDir: join(root, nodeId, "state"),
      workDir: join(root, nodeId, "work"),
      dockerHost: dockerHost!,
      pollInterval: "250ms",
    });
    agents.push(agent);
    const calls = async (action: string) =>
      (await readFile(join(root, "controller.out"), "utf8"))
        .split("\n")
        .filter((l) => l.includes(`"node_id":"${nodeId}"`) && l.includes(`"action":"${action}"`)).length;
    await waitFor("a few heartbeats", async () => ((await calls("NodeService.Heartbeat")) >= 12 ? true : undefined), 20_000, 100);
    // One look at start; nothing was pending since.
    expect(await calls("NodeService.GetNextWorkOrder")).toBe(1);
    const tenant = `${nodeId}-t`;
    await ctl.admin(ResourceService).createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id: tenant,
        resourceType: "tenant",
        desiredState: {
          kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: nodeId }, compose: { composeFile: "services: {}\n" } } },
        },
      }),
    });
    await waitFor(
      "the order to finish",
      async () => {
        const o = (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId: tenant })).workOrders[0];
        return o?.finishedAt ? o : undefined;
      },
      30_000,
      50,
    );
  }, 60_000);

  it("without the stream an agent waits for its poll", async () => {
    const { settled, toClaim } = await dispatch("watch-off", "8s", ["--no-watch"]);
    // The claim came only after a heartbeat made since the agent settled (its poll, which told
    // it an order was pending), and no stream was ever opened.
    expect(count(toClaim, "NodeService.Heartbeat")).toBeGreaterThan(count(settled, "NodeService.Heartbeat"));
    expect(toClaim.lastIndexOf("NodeService.Heartbeat")).toBeLessThan(toClaim.lastIndexOf("NodeService.GetNextWorkOrder"));
    expect(toClaim).not.toContain("NodeService.WatchWorkOrders");
  }, 60_000);
});
