// An agent's counters through NodeService.Heartbeat (nodes/heartbeat.ts, report-checks.ts) with a
// fake clock: they never make a beat a write, ride the writes a beat makes anyway, show on reads
// of the node as the freshest this controller heard, survive the node's own state reports, and a
// beat whose counters are out of bounds is refused whole.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { AgentCountersSchema, type NodeStatus, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { startInMemory, type InMemoryController } from "../../test/helpers/in-memory-controller.js";
import { rpcError } from "../../test/helpers/errors.js";

const START = new Date("2026-11-23T10:00:00Z");
const BOOT = "5f0c1e2a-agent-boot";
type CountersInit = MessageInitShape<typeof AgentCountersSchema>;

const counters = (acked: number, deploys: number, more: CountersInit = {}) =>
  create(AgentCountersSchema, {
    bootId: BOOT,
    heartbeatsAcknowledged: BigInt(acked),
    orders: [{ type: "deploy_service", code: "APPLY_OK", count: BigInt(deploys) }],
    ...more,
  });
const statusOf = (r: Resource | undefined) =>
  (r?.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined) as NodeStatus | undefined;

describe("an agent's counters in heartbeats", () => {
  let c: InMemoryController;
  let clock: number;
  let token = "";
  const beat = (agentCounters?: ReturnType<typeof counters>) =>
    c.asNode(NodeService, token).heartbeat({ nodeId: "n1", agentVersion: "1.0", heartbeatIntervalMs: 5000n, agentCounters });
  const stored = async () => {
    const node = await c.ctl.store.getResource("node", "n1");
    return { version: node?.metadata?.resourceVersion, status: statusOf(node) };
  };
  const shown = async () => statusOf((await c.admin(ResourceService).getResource({ resourceType: "node", id: "n1" })).resource);

  beforeEach(async () => {
    clock = START.getTime();
    c = await startInMemory({ now: () => new Date(clock) });
    token = (await c.admin(NodeService).registerNode({ nodeId: "n1" })).token;
  });
  afterEach(async () => {
    await c.close();
  });

  it("never make a beat a write; reads show the freshest heard, and the minute's write stores them", async () => {
    await beat(counters(0, 0));
    const first = await stored();
    expect(first.status?.agentCounters?.bootId).toBe(BOOT);
    clock += 5000;
    await beat(counters(1, 3, { reportRetries: 2n }));
    const second = await stored();
    expect(second.version).toBe(first.version);
    expect(second.status?.agentCounters?.orders[0]?.count).toBe(0n);
    const read = await shown();
    expect(read?.agentCounters?.orders[0]?.count).toBe(3n);
    expect(read?.agentCounters?.reportRetries).toBe(2n);
    expect(timestampDate(read!.agentCountersAt!).getTime()).toBe(clock);
    clock += 60_000;
    await beat(counters(2, 4));
    const third = await stored();
    expect(third.version).not.toBe(first.version);
    expect(third.status?.agentCounters?.orders[0]?.count).toBe(4n);
    expect(timestampDate(third.status!.agentCountersAt!).getTime()).toBe(clock);
    // Only the time and the counters moved: no changed report.
    expect((await c.events({ resourceId: "n1" })).filter((e) => e.type === "node_heartbeat_received")).toHaveLength(1);
  });

  it("a beat without counters (an older agent) keeps the node's", async () => {
    await beat(counters(0, 2));
    clock += 60_000;
    await beat();
    expect((await stored()).status?.agentCounters?.orders[0]?.count).toBe(2n);
  });

  it("a node's own state report cannot change them", async () => {
    await beat(counters(0, 2));
    await c.asNode(NodeService, token).reportResourceState({
      nodeId: "n1",
      reports: [
        {
          resourceType: "node",
          id: "n1",
          currentState: { kind: { case: "node", value: { agentCounters: counters(9, 99), agentVersion: "1.0" } } },
        },
      ],
    });
    expect((await stored()).status?.agentCounters?.orders[0]?.count).toBe(2n);
  });

  it("out of bounds, the beat is refused whole with INVALID_REQUEST naming the field", async () => {
    const bad: [CountersInit, string][] = [
      [{ bootId: "x" }, "agent_counters.boot_id"],
      [{ orders: [{ type: "Deploy", code: "APPLY_OK", count: 1n }] }, "agent_counters.orders[0].type"],
      [{ orders: [{ type: "inspect", code: "ok", count: 1n }] }, "agent_counters.orders[0].code"],
      [
        {
          orders: [
            { type: "inspect", code: "INSPECT_OK", count: 1n },
            { type: "inspect", code: "INSPECT_OK", count: 2n },
          ],
        },
        "agent_counters.orders[1]",
      ],
      [{ orders: Array.from({ length: 257 }, (_, i) => ({ type: "inspect", code: `C${i}`, count: 1n })) }, "agent_counters.orders"],
      [{ leasesLost: 2n ** 53n }, "agent_counters.leases_lost"],
    ];
    for (const [more, field] of bad) {
      const e = await rpcError(beat(counters(0, 1, more)));
      expect([e.code, e.details.field], field).toEqual(["INVALID_REQUEST", field]);
    }
    // Nothing was recorded: no status, and no counters heard.
    expect((await stored()).status).toBeUndefined();
    expect((await shown())?.agentCounters).toBeUndefined();
  });
});
