// The agent update planner (plan-agent-update.ts): which update takes which node, what the rollout
// machinery is told of each node, and what the status says of the nodes that lag. Pure.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { AgentUpdateReportSchema, AgentUpdateSpecSchema, AgentUpdateState } from "../../gen/skipper/v1/agent_update_pb.js";
import { RolloutNodeState as S, RolloutSchema, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { decideRollout } from "../rollouts/rollout-start.js";
import {
  agentHash,
  assignNodes,
  fleetOf,
  lagging,
  notUpdatable,
  observeNodes,
  rollbackObservations,
  runningHash,
  versionOfHash,
  type AgentNodeView,
  type UpdateOrderView,
} from "./plan-agent-update.js";

const SHA_A = "a".repeat(64);
const SHA_B = "b".repeat(64);
const NOW = 1_000_000;

function node(
  id: string,
  extra: Partial<AgentNodeView> & { sha?: string; state?: AgentUpdateState; target?: [string, string]; at?: number } = {},
): AgentNodeView {
  const { sha = SHA_A, state = AgentUpdateState.IDLE, target, at, ...rest } = extra;
  return {
    id,
    labels: {},
    disabled: false,
    ssh: false,
    online: true,
    version: "1.0.0",
    report: create(AgentUpdateReportSchema, {
      supervised: true,
      runningSha256: sha,
      state,
      targetVersion: target?.[0] ?? "",
      targetSha256: target?.[1] ?? "",
      previousVersion: "1.0.0",
      message: state === AgentUpdateState.ROLLED_BACK ? "no heartbeat within 15000 ms" : "",
      changedAt: at === undefined ? undefined : timestampFromMs(at),
    }),
    ...rest,
  };
}

const spec = (selector: Record<string, string> = {}) => create(AgentUpdateSpecSchema, { version: "2.0.0", nodeSelector: selector });
const TARGET = agentHash("2.0.0", SHA_B);

function rolloutOf(
  nodes: { id: string; state: S; order?: string; startedAt?: number; rollbackOrder?: string }[],
  status = RolloutStatus.PROGRESSING,
) {
  return create(RolloutSchema, {
    id: "r1",
    status,
    waves: [
      {
        name: "all",
        nodes: nodes.map((n) => ({
          nodeId: n.id,
          state: n.state,
          fromSpecHash: agentHash("1.0.0", SHA_A),
          toSpecHash: TARGET,
          workOrderId: n.order ?? "",
          rollbackWorkOrderId: n.rollbackOrder ?? "",
          startedAt: n.startedAt === undefined ? undefined : timestampFromMs(n.startedAt),
        })),
      },
    ],
  });
}

describe("agent update planning", () => {
  it("names versions as hashes and reads them back", () => {
    expect(agentHash("2.0.0", SHA_B)).toBe("agent:2.0.0@bbbbbbbbbbbb");
    expect(versionOfHash("agent:2.0.0@bbbbbbbbbbbb")).toEqual({ version: "2.0.0", sha12: "bbbbbbbbbbbb" });
    expect(versionOfHash("3f2a")).toBeUndefined();
    expect(runningHash(node("n1"))).toBe(agentHash("1.0.0", SHA_A));
    expect(runningHash({ ...node("n1"), report: undefined })).toBe("");
  });

  it("gives each node to the one update whose selector takes it; a node two take is neither's", () => {
    const nodes = [node("web-1", { labels: { role: "web" } }), node("db-1", { labels: { role: "db" } }), node("ssh-1", { ssh: true })];
    const a = assignNodes(
      [
        { id: "all", spec: spec() },
        { id: "web", spec: spec({ role: "web" }) },
      ],
      nodes,
    );
    expect(a.get("all")!.taken.map((n) => n.id)).toEqual(["db-1"]);
    expect(a.get("web")!.taken).toEqual([]);
    expect(a.get("all")!.contested.map((c) => [c.node.id, c.others])).toEqual([["web-1", ["web"]]]);
    expect(a.get("web")!.contested.map((c) => [c.node.id, c.others])).toEqual([["web-1", ["all"]]]);
    const lines = lagging(a.get("web")!.taken, a.get("web")!.contested, TARGET, undefined);
    expect(lines[0]!.reason).toMatch(/also selected by agent_update all/);
  });

  it("says why a node cannot be updated: disabled, never reported, not supervised", () => {
    expect(notUpdatable(node("n1"))).toBeUndefined();
    expect(notUpdatable(node("n1", { disabled: true }))).toMatch(/disabled/);
    expect(notUpdatable(node("n1", { version: "" }))).toMatch(/never reported/);
    const bare = node("n1");
    bare.report!.supervised = false;
    expect(notUpdatable(bare)).toMatch(/skippy-updater/);
  });

  it("starts a rollout over the nodes behind the version, and none when all run it", () => {
    const fleet = fleetOf([node("n1"), node("n2", { sha: SHA_B, version: "2.0.0" })], TARGET);
    const d = decideRollout({
      tenantId: "",
      tenantIncarnation: "agent_update/fleet/1",
      fleet,
      started: { actor: "controller" } as never,
      now: NOW,
    });
    expect(d.start?.waves.flatMap((w) => w.nodes.map((n) => n.nodeId))).toEqual(["n1"]);
    const none = decideRollout({
      tenantId: "",
      tenantIncarnation: "agent_update/fleet/1",
      fleet: fleetOf([node("n2", { sha: SHA_B, version: "2.0.0" })], TARGET),
      started: { actor: "controller" } as never,
      now: NOW,
    });
    expect(none.start).toBeUndefined();
  });

  it("observes a node converged once it runs the version and is online", () => {
    const r = rolloutOf([{ id: "n1", state: S.DEPLOYING, startedAt: NOW - 10 }]);
    const on = observeNodes(r, new Map([["n1", node("n1", { sha: SHA_B, version: "2.0.0" })]]), new Map());
    expect(on.get("n1")).toEqual({ converged: true, failure: undefined, offline: false });
    const off = observeNodes(r, new Map([["n1", node("n1", { sha: SHA_B, version: "2.0.0", online: false })]]), new Map());
    expect(off.get("n1")).toMatchObject({ converged: false, offline: true });
  });

  it("observes a failure when the order failed or the updater went back after the node started", () => {
    const r = rolloutOf([{ id: "n1", state: S.DEPLOYING, order: "agu-1", startedAt: NOW - 1000 }]);
    const failedOrder: UpdateOrderView = { id: "agu-1", open: false, failed: true, code: "BUNDLE_REJECTED", message: "bad signature" };
    expect(observeNodes(r, new Map([["n1", node("n1")]]), new Map([["agu-1", failedOrder]])).get("n1")?.failure).toBe(
      "update_agent order agu-1 failed: BUNDLE_REJECTED: bad signature",
    );
    const back = node("n1", { state: AgentUpdateState.ROLLED_BACK, target: ["2.0.0", SHA_B], at: NOW - 500 });
    expect(observeNodes(r, new Map([["n1", back]]), new Map()).get("n1")?.failure).toMatch(
      /updater went back to 1.0.0: no heartbeat within 15000 ms/,
    );
    // A rollback of an earlier attempt (before the node started in this rollout) is not this one's failure.
    const earlier = node("n1", { state: AgentUpdateState.ROLLED_BACK, target: ["2.0.0", SHA_B], at: NOW - 5000 });
    expect(observeNodes(r, new Map([["n1", earlier]]), new Map()).get("n1")?.failure).toBeUndefined();
    // Nor one of another version.
    const other = node("n1", { state: AgentUpdateState.ROLLED_BACK, target: ["3.0.0", SHA_B], at: NOW });
    expect(observeNodes(r, new Map([["n1", other]]), new Map()).get("n1")?.failure).toBeUndefined();
  });

  it("tells a rollback which nodes are back and which order is in flight", () => {
    const r = rolloutOf([{ id: "n1", state: S.DONE, rollbackOrder: "agr-1" }], RolloutStatus.ROLLING_BACK);
    const open: UpdateOrderView = { id: "agr-1", open: true, failed: false, code: "", message: "" };
    expect(
      rollbackObservations(r, new Map([["n1", node("n1", { sha: SHA_B, version: "2.0.0" })]]), new Map([["agr-1", open]])).get("n1"),
    ).toEqual({
      appliedHash: TARGET,
      lastWorkOrderId: "agr-1",
      lastResultCode: "",
      inFlight: true,
    });
  });

  it("lists the lagging nodes with the rollout's reason, and leaves out those that run the version", () => {
    const r = rolloutOf([{ id: "n1", state: S.WAITING }]);
    const lines = lagging([node("n1"), node("n2", { sha: SHA_B, version: "2.0.0" })], [], TARGET, r);
    expect(lines.map((l) => [l.nodeId, l.runningVersion, l.reason])).toEqual([["n1", "1.0.0", "rollout r1: waiting"]]);
  });
});
