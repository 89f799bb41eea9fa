// The reconciler's decision for one (tenant, node) target, as a pure function of what should run
// there, the durable record of what was done, any order in flight, the node's state and what the
// node last observed. It returns the actions to take and the target's convergence status; a
// separate executor (reconciler.ts) carries the actions out.
//
//   order in flight                         -> wait            ORDER_IN_FLIGHT (NODE_OFFLINE)
//   should run, node disabled               -> wait            NODE_DISABLED
//   a rollout returns it to its old spec    -> rollback        ORDER_IN_FLIGHT
//   a rollout holds it on the spec it runs  -> wait            ROLLOUT_WAITING
//     ... and that spec drifted             -> repair it       DRIFT_DETECTED
//   should run, that spec was rolled back   -> wait            ROLLED_BACK (until it changes)
//   should run, applied, observed as applied-> nothing         CONVERGED
//   should run, applied, observed otherwise -> deploy (drift)  DRIFT_DETECTED (until the repair ends)
//     (otherwise: another spec, a service not running, or no project at all where the node's
//     last list of projects, newer than the last order, does not name it)
//   should run, not applied                 -> deploy          ORDER_IN_FLIGHT (NODE_OFFLINE)
//   should not run, something is there      -> remove          ORDER_IN_FLIGHT
//   should not run, nothing there           -> forget target   CONVERGED
// Failed orders for the same desired hash back off (2 s doubling, capped at 5 min) and stop
// after quarantine_after (default MAX_FAILURES): a node that ran an earlier spec gets it back
// with a rollback order and the failed spec is quarantined there (ROLLED_BACK); a node with
// nothing to return to, or a failure the agent gets every time, is ORDER_FAILED. Either holds
// until the desired state changes or an Apply.
import { ConvergenceStatus, NodeLiveness, type ProjectObservation, type TargetStatus } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { RenderedProject } from "./render-project.js";
import { failureHeadline, isPermanentReason } from "../../common/failure-cause.js";

export const MAX_FAILURES = 5;
/**
 * Result codes that the same spec on the same node gets every time (the agent refused the file
 * itself, the registry said the image does not exist, a process archive is not what its digest
 * says): retrying cannot help, so the first one is ORDER_FAILED.
 */
export const DETERMINISTIC_FAILURES: ReadonlySet<string> = new Set([
  "COMPOSE_INVALID",
  "IMAGE_NOT_FOUND",
  // A process archive whose sha256 is not the spec's, a spec the node refuses, a source it does
  // not allow: the same spec gets the same answer until the version (or the node) changes.
  "CHECKSUM_MISMATCH",
  "PROCESS_INVALID",
  "PROCESS_SOURCE_NOT_ALLOWED",
  // The registry serves another image for a tag than the spec's lock names (the tag moved): the
  // same lock gets the same refusal until the spec changes.
  "DIGEST_MISMATCH",
  // The node's proxy refused the spec's routes (another tenant holds that host and prefix there,
  // or HAProxy cannot load the configuration): the same routes get the same refusal.
  "PROXY_REFUSED",
]);

/**
 * True when the target's last failure is one the same spec gets every time: its code says so, or
 * its cause does (a port held by something else, an invalid reference: common/failure-cause.ts).
 */
export function failsEveryTime(rec: TargetStatus): boolean {
  if (rec.lastResultCode === "") return false;
  return DETERMINISTIC_FAILURES.has(rec.lastResultCode) || isPermanentReason(rec.lastFailureCause?.reason);
}

/** The last failure in a few words, its cause first: "port 127.0.0.1:80 is already in use (COMPOSE_FAILED)". */
function lastFailure(rec: TargetStatus): string {
  return failureHeadline(rec.lastResultCode || "a failure", "", rec.lastFailureCause);
}
/** Marks failures of removal orders in TargetStatus.failed_hash. */
export const REMOVAL_HASH = "removal";

export interface TargetFacts {
  nodeId: string;
  /** What should run on the node; undefined when the tenant should not run there. */
  desired?: RenderedProject;
  record?: TargetStatus;
  inFlight?: WorkOrder;
  /**
   * Undefined when the node is not registered (or was deleted). projectsObservedAt: when the node
   * last listed the projects it runs (NodeStatus.projects_observed_at); from then, no observation
   * of the project means the node runs none.
   */
  node?: { liveness: NodeLiveness; disabled: boolean; lastHeartbeatAt?: Date; projectsObservedAt?: Date };
  /** The node's last observation of the project, if its agent reports one. */
  observed?: ProjectObservation;
  /** Fingerprint of the tenant's safety settings now (canonical-json fingerprint). */
  safetyHash?: string;
  /** The tenant's rollout keeps the node on the spec it runs, and says why (rollouts/rollout-holds.ts). */
  hold?: string;
  /** The tenant's rollout is rolling back: the spec hash the node must return to. */
  rollbackTo?: string;
  /** Failed orders of one spec before it is quarantined on the node (DeploySafety.quarantine_after; default MAX_FAILURES). */
  quarantineAfter?: number;
  now: Date;
}

export type TargetAction =
  | { kind: "deploy"; nodeId: string; rendered: RenderedProject; reason: "desired_changed" | "drift" | "retry" | "apply" | "delete_data" }
  | { kind: "remove"; nodeId: string; projectName: string }
  // Back to spec toHash: a rollout's rollback, a quarantine (with its reason), or the repair of a
  // held node's drift (repair: the desired spec is not held back afterwards).
  | { kind: "rollback"; nodeId: string; toHash: string; quarantine?: string; repair?: boolean };

export interface TargetVerdict {
  status: ConvergenceStatus;
  message: string;
  workOrderId?: string;
  retryAt?: Date;
}

export interface TargetPlan {
  actions: TargetAction[];
  verdict: TargetVerdict;
  /**
   * What differs between the observed project and the applied one, when this plan's order starts
   * repairing it (its drift_detected event: once per episode, not again for a retry).
   */
  drift?: string[];
  /** True when the record can be dropped (nothing should run and nothing is left). */
  forget: boolean;
}

/** Decides what to do for one target. */
export function planTarget(f: TargetFacts): TargetPlan {
  if (f.inFlight) return { actions: [], verdict: inFlightVerdict(f, f.inFlight), forget: false };
  return f.desired ? planDesired(f, f.desired) : planAbsent(f);
}

// While an order runs: which one, and, for the repair of drift, still the drift it repairs.
function inFlightVerdict(f: TargetFacts, o: WorkOrder): TargetVerdict {
  const state =
    o.status === WorkOrderStatus.RETRY_PENDING ? "waiting to retry" : o.status === WorkOrderStatus.RUNNING ? "running" : "pending";
  const verdict = waiting(f, `work order ${o.id} is ${state}`);
  if (o.metadata?.annotations.reason !== "drift" || verdict.status !== ConvergenceStatus.ORDER_IN_FLIGHT) return verdict;
  const prev = f.record?.convergence;
  const message =
    prev?.status === ConvergenceStatus.DRIFT_DETECTED && prev.workOrderId === o.id
      ? prev.message
      : `drift on node ${f.nodeId}; work order ${o.id} repairs it`;
  return { status: ConvergenceStatus.DRIFT_DETECTED, message, workOrderId: o.id };
}

/** The verdict while `what` is under way: the order in flight, or the offline node it waits for. */
function waiting(f: TargetFacts, what: string): TargetVerdict {
  return f.node?.liveness === NodeLiveness.OFFLINE
    ? {
        status: ConvergenceStatus.NODE_OFFLINE,
        message: `node ${f.nodeId} is offline; ${what} waits for it`,
        workOrderId: f.inFlight?.id,
      }
    : { status: ConvergenceStatus.ORDER_IN_FLIGHT, message: what, workOrderId: f.inFlight?.id };
}

// The tenant should run `desired` on the node.
function planDesired(f: TargetFacts, desired: RenderedProject): TargetPlan {
  const rec = f.record;
  const hash = desired.specHash;
  if (!f.node)
    return {
      actions: [],
      verdict: { status: ConvergenceStatus.NO_MATCHING_NODE, message: `node ${f.nodeId} is not registered` },
      forget: false,
    };
  if (f.node.disabled)
    return { actions: [], verdict: { status: ConvergenceStatus.NODE_DISABLED, message: `node ${f.nodeId} is disabled` }, forget: false };
  const limit = f.quarantineAfter || MAX_FAILURES;
  // A failed return backs off (and the rollout records it as failed before the retry is due).
  if (f.rollbackTo !== undefined && rec && rec.appliedHash !== f.rollbackTo && !backoff(rec, f.rollbackTo, f.now, limit)) {
    return {
      actions: [{ kind: "rollback", nodeId: f.nodeId, toHash: f.rollbackTo }],
      verdict: waiting(f, `the rollout is rolling back: returning node ${f.nodeId} to spec ${short(f.rollbackTo)}`),
      forget: false,
    };
  }
  if (f.hold !== undefined && rec && rec.appliedHash !== "" && rec.appliedHash !== hash) return planHeld(f, f.hold, rec, limit);
  const rolledBack = rolledBackPlan(f, rec, hash);
  if (rolledBack) return rolledBack;
  const blocked = backoff(rec, hash, f.now, limit);
  if (rec?.appliedHash === hash) return planApplied(f, desired, blocked);
  const quarantine = blocked && quarantineOf(f.nodeId, rec, hash, limit);
  if (quarantine && rec) {
    return {
      actions: [{ kind: "rollback", nodeId: f.nodeId, toHash: rec.appliedHash, quarantine }],
      verdict: waiting(f, `${quarantine}; returning node ${f.nodeId} to its last good spec ${short(rec.appliedHash)}`),
      forget: false,
    };
  }
  if (blocked) return { actions: [], verdict: blocked, forget: false };
  const retry = rec?.failedHash === hash && rec.failures > 0;
  return {
    actions: [{ kind: "deploy", nodeId: f.nodeId, rendered: desired, reason: retry ? "retry" : "desired_changed" }],
    verdict: waiting(f, retry ? `retrying after ${rec!.failures} failed order(s)` : "deploying the desired project"),
    forget: false,
  };
}

// Held on the spec it runs (`hold` says why), which is still repaired when it drifts (a rollback
// order to it).
function planHeld(f: TargetFacts, hold: string, rec: TargetStatus, limit: number): TargetPlan {
  const drift = driftOf(f, rec.appliedHash, f.desired?.project.projectName ?? "");
  if (drift.length > 0 && !backoff(rec, rec.appliedHash, f.now, limit)) {
    return {
      actions: [{ kind: "rollback", nodeId: f.nodeId, toHash: rec.appliedHash, repair: true }],
      verdict: {
        status: ConvergenceStatus.DRIFT_DETECTED,
        message: `drift on node ${f.nodeId}, which a rollout holds on spec ${short(rec.appliedHash)}: ${drift.join("; ")}; repairing it`,
      },
      drift,
      forget: false,
    };
  }
  return { actions: [], verdict: { status: ConvergenceStatus.ROLLOUT_WAITING, message: hold }, forget: false };
}

// A spec the node's gate or hooks rolled back is tried again once those settings change; until
// then (or another spec, or an Apply) it waits, ROLLED_BACK.
function rolledBackPlan(f: TargetFacts, rec: TargetStatus | undefined, hash: string): TargetPlan | undefined {
  const safetyChanged =
    rec !== undefined && rec.rolledBackSafetyHash !== "" && f.safetyHash !== undefined && rec.rolledBackSafetyHash !== f.safetyHash;
  if (!rec || rec.rolledBackHash !== hash || rec.appliedHash === hash || safetyChanged) return undefined;
  const why =
    rec.quarantineReason !== ""
      ? `is quarantined (${rec.quarantineReason})`
      : rec.lastResultCode === "ROLLBACK_OK"
        ? "was rolled back by an admin"
        : `was rolled back by its node (${rec.lastResultCode})`;
  return {
    actions: [],
    verdict: {
      status: ConvergenceStatus.ROLLED_BACK,
      message: `spec ${short(hash)} ${why} on node ${f.nodeId}, which runs ${short(rec.appliedHash)} again; ${rec.rolledBackSafetyHash !== "" ? "change what runs, or the health gate or hooks," : "change what runs"} or Apply to deploy it again`,
      workOrderId: rec.lastWorkOrderId,
    },
    forget: false,
  };
}

// The desired spec is applied: converged, or its drift repaired, or data a deletion asked for removed.
function planApplied(f: TargetFacts, desired: RenderedProject, blocked: TargetVerdict | undefined): TargetPlan {
  const services = desired.fromServices ? Object.values(desired.composeServices) : [];
  const drift = driftOf(f, desired.specHash, desired.project.projectName, services);
  if (drift.length === 0 && desired.deleteVolumes.length > 0 && !blocked) {
    // What runs is right, but a deletion asked for data on this node to go: one order does it.
    return {
      actions: [{ kind: "deploy", nodeId: f.nodeId, rendered: desired, reason: "delete_data" }],
      verdict: waiting(f, `removing the data of deleted resources (volumes ${desired.deleteVolumes.join(", ")})`),
      forget: false,
    };
  }
  if (drift.length === 0)
    return {
      actions: [],
      verdict: { status: ConvergenceStatus.CONVERGED, message: `node ${f.nodeId} runs the desired project` },
      forget: false,
    };
  if (blocked) return { actions: [], verdict: blocked, forget: false };
  // A repair that failed is retried after its backoff (above): the same episode, no new event.
  const retry = f.record?.failedHash === desired.specHash && f.record.failures > 0;
  return {
    actions: [{ kind: "deploy", nodeId: f.nodeId, rendered: desired, reason: retry ? "retry" : "drift" }],
    verdict: {
      status: ConvergenceStatus.DRIFT_DETECTED,
      message: `drift on node ${f.nodeId}: ${drift.join("; ")}; ${retry ? `retrying the repair after ${f.record!.failures} failed order(s)` : "redeploying"}`,
    },
    drift: retry ? undefined : drift,
    forget: false,
  };
}

// Nothing should run here.
function planAbsent(f: TargetFacts): TargetPlan {
  const rec = f.record;
  const observed = fresh(f) ? f.observed : undefined;
  if (rec?.appliedHash === REMOVAL_HASH) {
    // Removed: forget the target once the node no longer reports the project; an observation
    // older than the removal says nothing; a fresh one that still shows it means remove again.
    if (f.observed === undefined || !f.node)
      return { actions: [], verdict: { status: ConvergenceStatus.CONVERGED, message: "removed" }, forget: true };
    if (!observed)
      return {
        actions: [],
        verdict: { status: ConvergenceStatus.CONVERGED, message: `removed; waiting for node ${f.nodeId} to confirm` },
        forget: false,
      };
  }
  const leftovers =
    ((rec?.appliedHash ?? "") !== "" && rec?.appliedHash !== REMOVAL_HASH) ||
    (rec?.lastWorkOrderId ?? "") !== "" ||
    f.observed !== undefined;
  if (!leftovers || !f.node)
    return { actions: [], verdict: { status: ConvergenceStatus.CONVERGED, message: "nothing runs here" }, forget: true };
  const blocked = backoff(rec, REMOVAL_HASH, f.now, f.quarantineAfter || MAX_FAILURES);
  if (blocked) return { actions: [], verdict: blocked, forget: false };
  const projectName = f.observed?.projectName || rec?.projectName || "";
  if (projectName === "")
    return { actions: [], verdict: { status: ConvergenceStatus.CONVERGED, message: "nothing runs here" }, forget: true };
  return {
    actions: [{ kind: "remove", nodeId: f.nodeId, projectName }],
    verdict: waiting(f, `removing project ${projectName}`),
    forget: false,
  };
}

/**
 * Why `hash` is to be quarantined on the node now: it failed `limit` times there (not by an
 * admin's cancel, not a failure the agent gets every time: the node still runs what it ran), the
 * node has an earlier spec to return to, and no return was tried and failed yet.
 */
function quarantineOf(nodeId: string, rec: TargetStatus | undefined, hash: string, limit: number): string | undefined {
  if (!rec || rec.failedHash !== hash || rec.failures < limit || rec.quarantineReason !== "") return undefined;
  if (rec.lastResultCode === "CANCELLED" || failsEveryTime(rec)) return undefined;
  if (rec.appliedHash === "" || rec.appliedHash === REMOVAL_HASH || rec.appliedHash === hash) return undefined;
  return `spec ${short(hash)} failed ${rec.failures} time(s) on node ${nodeId} (last: ${lastFailure(rec)})`;
}

/** Backoff after failed orders for `hash`, as a verdict, or undefined when an attempt may go. */
function backoff(rec: TargetStatus | undefined, hash: string, now: Date, limit: number): TargetVerdict | undefined {
  if (!rec || rec.failedHash !== hash || rec.failures <= 0) return undefined;
  const last = lastFailure(rec);
  if (failsEveryTime(rec)) {
    return {
      status: ConvergenceStatus.ORDER_FAILED,
      message: `${last}: order ${rec.lastWorkOrderId} failed in a way this spec fails every time; change the desired state or Apply to try again`,
      workOrderId: rec.lastWorkOrderId,
    };
  }
  if (rec.failures >= limit || rec.lastResultCode === "CANCELLED") {
    const stuck = rec.quarantineReason !== "" ? `; ${rec.quarantineReason}` : "";
    return {
      status: ConvergenceStatus.ORDER_FAILED,
      message: `${last}: ${rec.failures} orders failed${stuck}; change the desired state or Apply to try again`,
      workOrderId: rec.lastWorkOrderId,
    };
  }
  const retryAt = rec.retryAt ? timestampDate(rec.retryAt) : now;
  if (now < retryAt) {
    return {
      status: ConvergenceStatus.RETRY_BACKOFF,
      message: `${last}: order ${rec.lastWorkOrderId} failed; retry ${rec.failures + 1} at ${retryAt.toISOString()}`,
      workOrderId: rec.lastWorkOrderId,
      retryAt,
    };
  }
  return undefined;
}

/** The delay before attempt n+1 after n consecutive failures: 2 s doubling, capped at 5 min. */
export function retryDelayMs(failures: number): number {
  return Math.min(300_000, 2000 * 2 ** Math.max(0, failures - 1));
}

// Differences between the applied project `hash` (named `project`, whose compose services are
// `services` when the controller rendered them) and the node's latest observation: no project at
// all, another spec, services missing or not running. Observations that predate the last
// finished order are stale and say nothing; so does a node that never listed its projects.
function driftOf(f: TargetFacts, hash: string, project: string, services: readonly string[] = []): string[] {
  if (!fresh(f)) return [];
  const o = f.observed;
  if (!o) return f.node?.projectsObservedAt ? [`the node reports no project ${project} (its files or containers are gone)`] : [];
  const out: string[] = [];
  if (o.specHash !== "" && o.specHash !== hash) out.push(`project spec ${short(o.specHash)} is not the applied ${short(hash)}`);
  else {
    const listed = new Set(o.services.map((s) => s.service));
    for (const s of services) if (!listed.has(s)) out.push(`service ${s} is not in the project`);
  }
  for (const s of o.services) {
    // "starting" is a healthcheck still deciding: not drift yet.
    if (s.state !== "running" && s.state !== "starting") out.push(`service ${s.service} is ${s.state}`);
  }
  return out;
}

/**
 * True when the node's observation was made after the target's last order finished: its last
 * list of projects when it dates one, else its last heartbeat.
 */
function fresh(f: TargetFacts): boolean {
  const finished = f.record?.finishedAt ? timestampDate(f.record.finishedAt) : undefined;
  const seen = f.node?.projectsObservedAt ?? f.node?.lastHeartbeatAt;
  return !finished || (seen !== undefined && seen > finished);
}

function short(h: string): string {
  return h.slice(0, 12);
}
