// Streaming dispatch end to end: with a 30 s poll interval, an order reaches a connected agent
// through WatchWorkOrders in well under a second; with the stream off, the agent waits for its
// poll. Controller and skippy as processes, a real engine.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
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

  async function dispatchMs(nodeId: string, pollInterval: string, extraArgs: string[]): Promise<number> {
    const token = (await ctl.admin(NodeService).registerNode({ nodeId })).token;
    const agent = startAgentProcess({
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
    // Let it settle into its poll sleep (first heartbeat and poll done, stream open).
    await waitFor(`${nodeId}'s first heartbeat`, async () => {
      const n = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: nodeId })).resource!;
      return n.currentState?.kind.case === "node" ? true : undefined;
    });
    await new Promise((r) => setTimeout(r, 1500));
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
    const order = await waitFor(
      "the order to be claimed",
      async () => {
        const o = (await ctl.admin(WorkOrderService).listWorkOrders({ tenantId: tenant })).workOrders[0];
        return o?.startedAt ? o : undefined;
      },
      45_000,
      50,
    );
    return timestampDate(order.startedAt!).getTime() - timestampDate(order.createdAt!).getTime();
  }

  it("a connected agent claims a new order within a second despite a 30 s poll", async () => {
    expect(await dispatchMs("watch-on", "30s", [])).toBeLessThan(1000);
  }, 60_000);

  it("an idle agent makes one call per interval, its heartbeat, and asks for work only when there is some", async () => {
    const nodeId = "idle-calls";
    const token = (await ctl.admin(NodeService).registerNode({ nodeId })).token;
    const agent = startAgentProcess({
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
    // Settled 1.5 s after a poll with an 8 s interval: the next poll is about 6.5 s away.
    expect(await dispatchMs("watch-off", "8s", ["--no-watch"])).toBeGreaterThan(3000);
  }, 60_000);
});
