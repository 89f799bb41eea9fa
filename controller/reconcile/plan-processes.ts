// The process reconciler's planner, pure: one process resource (desired spec and the status the
// last pass wrote), the nodes as they report, and the orders that status names -> the orders to
// queue, the next status, and an event per node whose reason changed. Nothing here reads the
// store or the clock; process-pass.ts reads, calls this and acts.
//
// Per node the plan repairs drift: a module not installed, on another version (or another
// sha256, argv or env) gets a deploy_process; one that should run and does not (stopped through
// a one-off order, killed and not revived) a control_process START; one that runs while declared
// stopped, or on a node no longer selected, a STOP (its versions stay installed: nothing is
// uninstalled). One order per node at a time: while the order the status names is open, nothing
// new is queued; a failed one waits a backoff that doubles per failure in a row. A "latest" module
// resolved offline (the source unreachable: the node runs its newest installed version) is asked
// again on the same backoff until the source answers. Order ids are derived from the resource's
// creation time and the count of orders the status records, so a pass repeated after a crash finds
// the order it made, and a resource re-created under the same id never finds its predecessor's.
// A disabled node takes no orders (dispatch refuses them): it keeps its status, NODE_DISABLED.
// A module the node's supervisor is about to restart (systemd, or the agent's own in its crash
// backoff: reported "restarting") gets no START: the supervisor's backoff is the one that applies.
import { clone, create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import { createHash } from "node:crypto";
import { processSourceAllowed } from "../../common/action-rules.js";
import { launchDigest } from "../../common/process-launch.js";
import { ProcessOperation } from "../../gen/skipper/v1/order_action_pb.js";
import {
  ProcessModuleReason as Reason,
  ProcessModuleRun,
  ProcessModuleStatusSchema,
  ProcessNodeStatusSchema,
  type ProcessModuleSpec,
  type ProcessModuleStatus,
  type ProcessNodeStatus,
} from "../../gen/skipper/v1/process_pb.js";
import type { ProcessObservation } from "../../gen/skipper/v1/resource_pb.js";
import { matchesSelector } from "../domain/label-selector.js";

/** A node as the planner needs it. */
export interface ProcessNodeView {
  id: string;
  /** Its placement labels (reconcile/placement.ts nodeLabels). */
  labels: Record<string, string>;
  /** Online (or degraded): orders for it are taken. */
  reachable: boolean;
  disabled: boolean;
  allowedSources: readonly string[];
  /** When the node's report was received (0: never). */
  observedAtMs: number;
  /** The module as the node reports it (absent: not on the node). */
  process?: ProcessObservation;
}

/** An order the status names. */
export interface ProcessOrderView {
  id: string;
  open: boolean;
  /** A deploy_process (else control_process). */
  deploy: boolean;
  succeeded: boolean;
  code: string;
  message: string;
  finishedAtMs: number;
  /** The module after the order (its result's details.process). */
  process?: ProcessObservation;
}

/** The resource to plan. */
export interface ProcessDesired {
  id: string;
  /** When the resource was created (ms): part of its order ids, so a re-created one has its own. */
  createdAtMs: number;
  spec: ProcessModuleSpec;
  status: ProcessModuleStatus;
  /** Deleted: every node it was on stops the module. */
  deleted: boolean;
  /** A tenant declaring the same module (then nothing is ordered). */
  claimedBy?: string;
}

/** An order to queue on one node, under a fixed id. */
export type ProcessOrder =
  | { kind: "deploy"; id: string; nodeId: string }
  | { kind: "control"; id: string; nodeId: string; operation: ProcessOperation.START | ProcessOperation.STOP };

/** A node's reason changed. */
export interface ProcessTransition {
  nodeId: string;
  from: Reason;
  to: Reason;
  message: string;
  version: string;
}

export interface ProcessPlan {
  orders: ProcessOrder[];
  status: ProcessModuleStatus;
  transitions: ProcessTransition[];
  /** When a backoff ends, if one is pending. */
  wakeAtMs?: number;
}

export interface PlanTimes {
  nowMs: number;
  /** First backoff after a failure; doubles per failure in a row. */
  backoffMs: number;
  backoffCapMs: number;
}

/** Plans one process resource against its nodes. */
export function planProcess(
  d: ProcessDesired,
  nodes: readonly ProcessNodeView[],
  orders: ReadonlyMap<string, ProcessOrderView>,
  t: PlanTimes,
): ProcessPlan {
  const before = new Map(d.status.nodes.map((n) => [n.nodeId, n]));
  const placed = new Set(
    d.deleted ? [] : nodes.filter((n) => !n.disabled && matchesSelector(n.labels, d.spec.nodeSelector)).map((n) => n.id),
  );
  const plan: ProcessPlan = { orders: [], status: create(ProcessModuleStatusSchema), transitions: [] };
  for (const node of [...nodes].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) {
    const prev = before.get(node.id);
    if (!placed.has(node.id) && !prev) continue;
    const next = planNode(d, node, placed.has(node.id), prev, orders, t, plan);
    if (!next) continue;
    if (!prev || prev.reason !== next.reason) {
      next.changedAt = timestampFromMs(t.nowMs);
      plan.transitions.push({
        nodeId: node.id,
        from: prev?.reason ?? Reason.UNSPECIFIED,
        to: next.reason,
        message: next.message,
        version: next.activeVersion,
      });
    }
    plan.status.nodes.push(next);
  }
  plan.status.summary = summary(plan.status.nodes);
  return plan;
}

// One node: its next status (undefined: it leaves the status), and its order if one is due.
function planNode(
  d: ProcessDesired,
  node: ProcessNodeView,
  placed: boolean,
  prev: ProcessNodeStatus | undefined,
  orders: ReadonlyMap<string, ProcessOrderView>,
  t: PlanTimes,
  plan: ProcessPlan,
): ProcessNodeStatus | undefined {
  // A copy: the status read from the store is frozen.
  const next = prev ? clone(ProcessNodeStatusSchema, prev) : create(ProcessNodeStatusSchema, { nodeId: node.id, reason: Reason.PENDING });
  const order = prev?.workOrderId ? orders.get(prev.workOrderId) : undefined;
  const obs = freshest(node, order);
  Object.assign(next, { activeVersion: obs?.activeVersion ?? "", pid: obs?.pid ?? 0, resolvedOffline: obs?.resolvedOffline ?? false });
  const set = (reason: Reason, message: string) => Object.assign(next, { reason, message });
  if (order && !order.open && !next.orderSettled) settle(d, next, order, t);
  // Failures of an earlier spec do not hold back a new one.
  if (next.failures > 0 && next.failedDigest !== specDigest(d.spec))
    Object.assign(next, { failures: 0, retryAt: undefined, failedDigest: "" });
  // While its order is open, a node keeps the reason queueing it gave.
  if (order?.open) return next;
  if (d.claimedBy)
    return set(Reason.MODULE_CLAIMED_BY_TENANT, `tenant ${d.claimedBy} declares module ${d.spec.spec?.module}: its deploys own it`);
  if (!node.reachable) return set(Reason.NODE_OFFLINE, "the node is offline: its work waits");
  // Dispatch refuses orders for a disabled node: it is left as it is, not stopped or repaired.
  if (node.disabled) return set(Reason.NODE_DISABLED, "the node is disabled: no order reaches it, what runs there is left as it is");
  const running = obs?.state === "running";
  if (!placed || d.spec.run === ProcessModuleRun.STOPPED) {
    if (running) {
      const why = placed ? "runs; declared stopped" : "runs; the node is no longer selected (its versions stay installed)";
      return queue(next, plan, d, node, { kind: "control", operation: ProcessOperation.STOP }, Reason.STOPPING, why);
    }
    if (!placed) return undefined;
    return set(Reason.STOPPED, obs?.activeVersion ? "stopped, as declared" : "not installed (declared stopped: nothing to install)");
  }
  if (!processSourceAllowed(d.spec.spec?.source?.kind ?? { case: undefined }, node.allowedSources))
    return set(Reason.SOURCE_NOT_ALLOWED, "the node's --allow-process-source does not admit the module's source");
  const drift = deployDrift(d.spec, next, obs);
  const runningMessage = next.resolvedOffline
    ? `runs ${obs?.activeVersion}, the newest installed version: the source could not be reached`
    : `runs ${obs?.activeVersion}`;
  if (!drift && running) return set(Reason.RUNNING, runningMessage);
  // Its supervisor starts it again itself (systemd's Restart=, or the agent's after its crash
  // backoff): a START now would race it, and reset the backoff a crashing module is held to.
  if (!drift && obs?.state === "restarting") {
    // A START that died at once keeps the failure settle recorded (its log tail).
    if (order && !order.succeeded && next.failures > 0) return next;
    return set(
      Reason.EXITED,
      obs.systemdUnit ? "exited; its systemd unit restarts it" : "exited; the agent restarts it after its crash backoff",
    );
  }
  const retryAt = msOf(next.retryAt);
  if (next.failures > 0 && t.nowMs < retryAt) {
    plan.wakeAtMs = Math.min(plan.wakeAtMs ?? retryAt, retryAt);
    // A deploy that succeeded offline runs; a failed one keeps the reason settle gave it.
    if (running && order?.succeeded) set(Reason.RUNNING, runningMessage);
    return next;
  }
  if (drift) {
    const installed = obs?.installedVersions.includes(d.spec.spec?.version ?? "") ?? false;
    return queue(next, plan, d, node, { kind: "deploy" }, installed ? Reason.INSTALLING : Reason.DOWNLOADING, drift);
  }
  return queue(
    next,
    plan,
    d,
    node,
    { kind: "control", operation: ProcessOperation.START },
    Reason.STARTING,
    `${obs?.state || "not running"}: starting it`,
  );
}

// What makes a deploy due, or undefined: not installed, another version, sha256 or launch; for
// "latest", a spec not yet deployed, or resolved offline (asked again once the backoff is over).
function deployDrift(spec: ProcessModuleSpec, st: ProcessNodeStatus, obs: ProcessObservation | undefined): string | undefined {
  const s = spec.spec!;
  if (!obs?.activeVersion) return "not installed";
  if (s.version === "latest") {
    if (st.appliedDigest !== specDigest(spec)) return "latest: not yet deployed from this spec";
    if (obs.activeVersion !== st.resolvedVersion) return `runs ${obs.activeVersion}, latest resolved to ${st.resolvedVersion}`;
    if (obs.resolvedOffline) return "latest was resolved offline: asking the source again";
  } else if (obs.activeVersion !== s.version) return `runs ${obs.activeVersion}, declared ${s.version}`;
  if (obs.activeSha256 && obs.activeSha256 !== s.sha256.toLowerCase() && s.version !== "latest")
    return `version ${obs.activeVersion} is installed with another sha256`;
  if (obs.launchDigest && obs.launchDigest !== launchDigest({ version: obs.activeVersion, argv: s.argv, env: s.env }))
    return "argv or env differ from the spec";
  return undefined;
}

// Counts an ended order once: a success clears the failures (and for a deploy records what it
// resolved), a failure starts or lengthens the backoff.
function settle(d: ProcessDesired, st: ProcessNodeStatus, order: ProcessOrderView, t: PlanTimes): void {
  st.orderSettled = true;
  const offline = order.process?.resolvedOffline === true;
  if (order.succeeded && order.deploy && order.process) {
    st.resolvedVersion = order.process.activeVersion;
    st.appliedDigest = specDigest(d.spec);
  }
  if (order.succeeded && !offline) {
    st.failures = 0;
    st.retryAt = undefined;
    return;
  }
  st.failures += 1;
  st.failedDigest = specDigest(d.spec);
  const at = Math.max(order.finishedAtMs, 0) || t.nowMs;
  st.retryAt = timestampFromMs(at + Math.min(t.backoffCapMs, t.backoffMs * 2 ** Math.min(st.failures - 1, 20)));
  if (order.succeeded) return;
  st.reason = failedReason(order.code);
  st.message = `order ${order.id} failed (${order.code}): ${order.message.slice(0, 300)}`;
}

function failedReason(code: string): Reason {
  if (code === "SOURCE_UNAVAILABLE" || code === "VERSION_NOT_INSTALLED" || code === "MODULE_NOT_INSTALLED")
    return Reason.VERSION_UNAVAILABLE;
  if (code === "PROCESS_EXITED") return Reason.EXITED;
  return Reason.FAILED;
}

function queue(
  st: ProcessNodeStatus,
  plan: ProcessPlan,
  d: ProcessDesired,
  node: ProcessNodeView,
  o: { kind: "deploy" } | { kind: "control"; operation: ProcessOperation.START | ProcessOperation.STOP },
  reason: Reason,
  why: string,
): ProcessNodeStatus {
  st.ordersIssued += 1;
  st.workOrderId = processOrderId(d.id, d.createdAtMs, node.id, st.ordersIssued);
  st.orderSettled = false;
  st.reason = reason;
  st.message = why;
  plan.orders.push({ ...o, id: st.workOrderId, nodeId: node.id });
  return st;
}

/**
 * The n-th order of process resource `id` (created at `createdAtMs`) on `nodeId`: the same inputs
 * give the same id; a resource deleted and created again under the same id gets other ids.
 */
export function processOrderId(id: string, createdAtMs: number, nodeId: string, n: number): string {
  return `prc-${createHash("sha256").update(`${id}\0${createdAtMs}\0${nodeId}`).digest("hex").slice(0, 16)}-${n}`;
}

/**
 * The plan's order for `nodeId` could not be queued (dispatch refused it): that node's status says
 * why (FAILED), names no order, and waits a backoff like a failed order; the other nodes' plans
 * stand, so the status is still written.
 */
export function orderNotQueued(plan: ProcessPlan, d: ProcessDesired, nodeId: string, message: string, t: PlanTimes): void {
  const st = plan.status.nodes.find((n) => n.nodeId === nodeId);
  if (!st) return;
  const from = st.reason;
  st.failures += 1;
  st.failedDigest = specDigest(d.spec);
  st.retryAt = timestampFromMs(t.nowMs + Math.min(t.backoffCapMs, t.backoffMs * 2 ** Math.min(st.failures - 1, 20)));
  Object.assign(st, { workOrderId: "", orderSettled: true, reason: Reason.FAILED });
  st.message = `order ${plan.orders.find((o) => o.nodeId === nodeId)?.id ?? ""} could not be queued: ${message.slice(0, 300)}`;
  plan.orders = plan.orders.filter((o) => o.nodeId !== nodeId);
  // The reason before this pass is the transition's from: FAILED again is no transition.
  const was = plan.transitions.find((x) => x.nodeId === nodeId)?.from ?? from;
  plan.transitions = plan.transitions.filter((x) => x.nodeId !== nodeId);
  if (was !== Reason.FAILED)
    plan.transitions.push({ nodeId, from: was, to: Reason.FAILED, message: st.message, version: st.activeVersion });
  st.changedAt = timestampFromMs(t.nowMs);
  const at = msOf(st.retryAt);
  plan.wakeAtMs = Math.min(plan.wakeAtMs ?? at, at);
  plan.status.summary = summary(plan.status.nodes);
}

/** What a deploy of the spec depends on: a changed spec deploys again (for "latest" too). */
export function specDigest(spec: ProcessModuleSpec): string {
  const s = spec.spec;
  return createHash("sha256")
    .update(
      JSON.stringify([
        s?.module,
        s?.version,
        s?.source?.kind,
        s?.sha256.toLowerCase(),
        launchDigest({ version: "", argv: s?.argv ?? [], env: s?.env ?? {} }),
      ]),
    )
    .digest("hex")
    .slice(0, 32);
}

// The newer of the node's report and the last order's result (reported before the order ended,
// a heartbeat may show the module as it was).
function freshest(node: ProcessNodeView, order: ProcessOrderView | undefined): ProcessObservation | undefined {
  if (order && !order.open && order.process && order.finishedAtMs >= node.observedAtMs) return order.process;
  return node.process;
}

function summary(nodes: readonly ProcessNodeStatus[]): string {
  if (nodes.length === 0) return "no matching node";
  const counts = new Map<string, number>();
  for (const n of nodes) {
    const name = Reason[n.reason] ?? String(n.reason);
    counts.set(name, (counts.get(name) ?? 0) + 1);
  }
  return [...counts].map(([k, v]) => `${v} ${k}`).join(", ");
}

/** When a status time is, in ms (0 when unset). */
export function msOf(ts: Timestamp | undefined): number {
  return ts ? timestampDate(ts).getTime() : 0;
}
