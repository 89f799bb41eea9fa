// The agent update planner: pure functions of (the agent_update resources, the nodes as their agents
// report them, the update_agent orders) that say which nodes each update takes, what the rollout
// machinery sees of them (rollouts/rollout-start.ts FleetNode, rollout-step.ts NodeObservation,
// rollout-holds.ts RollbackObservation), and the status to show. The pass (agent-update-pass.ts)
// reads, calls these, and acts.
//
// A version is named in rollouts as a spec hash "agent:<version>@<sha256's first 12 hex>", so the
// rollout records read like a tenant's (from/to), and a node's running hash is the version and
// bundle it reports (NodeStatus.agent_version, agent_update.running_sha256).
import { create } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  AgentUpdateState,
  type AgentUpdateReport,
  type AgentUpdateSpec,
  type AgentUpdateNode,
  AgentUpdateNodeSchema,
} from "../../gen/skipper/v1/agent_update_pb.js";
import { type Rollout, RolloutNodeState as S } from "../../gen/skipper/v1/rollout_pb.js";
import { matchesSelector } from "../domain/label-selector.js";
import type { FleetNode } from "../rollouts/rollout-start.js";
import type { NodeObservation } from "../rollouts/rollout-step.js";
import type { RollbackObservation } from "../rollouts/rollout-holds.js";
import { nodesOf } from "../rollouts/rollout-actions.js";

/** A node as the planner sees it. */
export interface AgentNodeView {
  id: string;
  labels: Record<string, string>;
  disabled: boolean;
  /** An SSH node runs no agent: never updated. */
  ssh: boolean;
  /** Heartbeating (online or degraded). */
  online: boolean;
  /** The version its agent reports; "" when it never reported. */
  version: string;
  report?: AgentUpdateReport;
}

/** An update_agent order as the planner sees it. */
export interface UpdateOrderView {
  id: string;
  open: boolean;
  failed: boolean;
  code: string;
  message: string;
}

/** The hash a rollout names version `version` of bundle `sha256` by. */
export function agentHash(version: string, sha256: string): string {
  return `agent:${version}@${sha256.slice(0, 12)}`;
}

/** The version a hash names, or undefined when it names none. */
export function versionOfHash(hash: string): { version: string; sha12: string } | undefined {
  const m = /^agent:(.+)@([0-9a-f]{12})$/.exec(hash);
  return m ? { version: m[1]!, sha12: m[2]! } : undefined;
}

/** The hash of what a node runs; "" when unknown (no report, or not supervised: no sha). */
export function runningHash(n: AgentNodeView): string {
  const sha = n.report?.runningSha256 ?? "";
  return n.version !== "" && sha !== "" ? agentHash(n.version, sha) : "";
}

/** Which update takes each node: the one selector that matches it; two: none, and both say so. */
export function assignNodes(
  updates: readonly { id: string; spec: AgentUpdateSpec }[],
  nodes: readonly AgentNodeView[],
): Map<string, { taken: AgentNodeView[]; contested: { node: AgentNodeView; others: string[] }[] }> {
  const out = new Map(
    updates.map((u) => [u.id, { taken: [] as AgentNodeView[], contested: [] as { node: AgentNodeView; others: string[] }[] }]),
  );
  for (const n of nodes) {
    if (n.ssh) continue;
    const matching = updates.filter((u) => matchesSelector(n.labels, u.spec.nodeSelector)).map((u) => u.id);
    if (matching.length === 1) out.get(matching[0]!)!.taken.push(n);
    else for (const id of matching) out.get(id)!.contested.push({ node: n, others: matching.filter((m) => m !== id) });
  }
  return out;
}

/** Why a node the update takes cannot be updated, or undefined when it can. */
export function notUpdatable(n: AgentNodeView): string | undefined {
  if (n.disabled) return "the node is disabled: it takes no new work orders";
  if (n.version === "") return "the node's agent has never reported";
  if (!n.report?.supervised)
    return "the agent does not run under skippy-updater (an agent before it, or started without `skippy updater`): reinstall it with `skippy install` or `skippy join`";
  if (!n.report.runningSha256) return "the agent does not report the bundle it runs";
  return undefined;
}

/** The rollout machinery's view of the nodes that can be updated. */
export function fleetOf(nodes: readonly AgentNodeView[], target: string): FleetNode[] {
  return nodes.map((n) => ({ nodeId: n.id, labels: n.labels, desiredHash: target, appliedHash: runningHash(n) }));
}

/** What is observed of each node of `rollout` against the hash it brings it. */
export function observeNodes(
  rollout: Rollout,
  nodes: ReadonlyMap<string, AgentNodeView>,
  orders: ReadonlyMap<string, UpdateOrderView>,
): Map<string, NodeObservation> {
  const out = new Map<string, NodeObservation>();
  for (const rn of nodesOf(rollout)) {
    const n = nodes.get(rn.nodeId);
    if (!n) {
      out.set(rn.nodeId, { converged: false, failure: "the node is gone" });
      continue;
    }
    const converged = n.online && runningHash(n) === rn.toSpecHash;
    const order = rn.workOrderId ? orders.get(rn.workOrderId) : undefined;
    let failure: string | undefined;
    if (!converged && order?.failed)
      failure = `update_agent order ${order.id} failed: ${order.code}${order.message ? `: ${order.message}` : ""}`;
    const back = wentBack(n.report, rn.toSpecHash, rn.startedAt ? timestampMs(rn.startedAt) : 0);
    if (!converged && !failure && back) failure = back;
    out.set(rn.nodeId, { converged, failure, offline: !n.online });
  }
  return out;
}

// The updater went back from the rollout's version after the node started: why, or undefined.
function wentBack(report: AgentUpdateReport | undefined, toHash: string, startedAtMs: number): string | undefined {
  if (!report) return undefined;
  if (report.state !== AgentUpdateState.ROLLED_BACK && report.state !== AgentUpdateState.FAILED) return undefined;
  if (agentHash(report.targetVersion, report.targetSha256) !== toHash) return undefined;
  if (report.changedAt && timestampMs(report.changedAt) < startedAtMs) return undefined;
  const what =
    report.state === AgentUpdateState.ROLLED_BACK ? `went back to ${report.previousVersion || "the previous version"}` : "failed";
  return `the node's updater ${what}: ${report.message || "the new agent did not reach the controller in time"}`;
}

/** What a rollback of `rollout` sees of each of its nodes. */
export function rollbackObservations(
  rollout: Rollout,
  nodes: ReadonlyMap<string, AgentNodeView>,
  orders: ReadonlyMap<string, UpdateOrderView>,
): Map<string, RollbackObservation> {
  const out = new Map<string, RollbackObservation>();
  for (const rn of nodesOf(rollout)) {
    const n = nodes.get(rn.nodeId);
    if (!n) continue;
    const order = rn.rollbackWorkOrderId ? orders.get(rn.rollbackWorkOrderId) : undefined;
    // An order to the new version still open (a cancel asked of its runner) may yet switch the
    // node: it is not back until that order ended too.
    const forward = rn.workOrderId ? orders.get(rn.workOrderId) : undefined;
    out.set(rn.nodeId, {
      appliedHash: runningHash(n),
      lastWorkOrderId: order?.id ?? "",
      lastResultCode: order && !order.open ? (order.failed ? order.code || "FAILED" : "") : "",
      inFlight: (order?.open ?? false) || (forward?.open ?? false),
    });
  }
  return out;
}

/** One line per node that does not run the target, for the status. */
export function lagging(
  taken: readonly AgentNodeView[],
  contested: readonly { node: AgentNodeView; others: string[] }[],
  target: string,
  rollout: Rollout | undefined,
): AgentUpdateNode[] {
  const inRollout = new Map(rollout ? nodesOf(rollout).map((n) => [n.nodeId, n]) : []);
  const out: AgentUpdateNode[] = [];
  for (const n of taken) {
    if (runningHash(n) === target) continue;
    const rn = inRollout.get(n.id);
    const reason =
      notUpdatable(n) ??
      (rn?.reason ||
        (rn ? `rollout ${rollout!.id}: ${(S[rn.state] ?? "").toLowerCase()}` : n.online ? "waiting for a rollout" : "the node is offline"));
    out.push(create(AgentUpdateNodeSchema, { nodeId: n.id, runningVersion: n.version, state: n.report?.state ?? 0, reason }));
  }
  for (const { node, others } of contested)
    out.push(
      create(AgentUpdateNodeSchema, {
        nodeId: node.id,
        runningVersion: node.version,
        state: node.report?.state ?? 0,
        reason: `also selected by agent_update ${others.join(", ")}: a node follows one agent_update, so neither updates it`,
      }),
    );
  return out.sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
}
