// Convergence verdicts as stored on resources: the message for one verdict, and the one a
// tenant or service shows when its targets' verdicts differ (the worst).
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ConvergenceSchema, ConvergenceStatus, type Convergence } from "../../gen/skipper/v1/resource_pb.js";
import type { TargetVerdict } from "./plan-target.js";

// Worst first: the status a tenant (or service) shows when its targets differ.
const SEVERITY: ConvergenceStatus[] = [
  ConvergenceStatus.ORDER_FAILED,
  ConvergenceStatus.ROLLED_BACK,
  ConvergenceStatus.REFERENCE_MISSING,
  ConvergenceStatus.NO_MATCHING_NODE,
  ConvergenceStatus.NODE_DISABLED,
  ConvergenceStatus.NODE_OFFLINE,
  ConvergenceStatus.RETRY_BACKOFF,
  ConvergenceStatus.DRIFT_DETECTED,
  ConvergenceStatus.ORDER_IN_FLIGHT,
  // Nodes a rollout holds: the work under way on others shows first.
  ConvergenceStatus.ROLLOUT_WAITING,
  ConvergenceStatus.PENDING,
  ConvergenceStatus.NOTHING_TO_DEPLOY,
  ConvergenceStatus.CONVERGED,
];

/** A Convergence message for a verdict; checked_at only moves when the verdict changes. */
export function convergence(v: TargetVerdict, nodeId: string, now: Date, prev: Convergence | undefined): Convergence {
  const next = create(ConvergenceSchema, {
    status: v.status,
    message: v.message,
    nodeId,
    workOrderId: v.workOrderId ?? "",
    retryAt: v.retryAt ? timestampFromDate(v.retryAt) : undefined,
  });
  next.checkedAt =
    prev && prev.status === next.status && prev.message === next.message && prev.workOrderId === next.workOrderId
      ? prev.checkedAt
      : timestampFromDate(now);
  if (prev?.desiredVersion) next.desiredVersion = prev.desiredVersion;
  return next;
}

export function worst(vs: TargetVerdict[]): TargetVerdict | undefined {
  let best: TargetVerdict | undefined;
  for (const v of vs) if (!best || SEVERITY.indexOf(v.status) < SEVERITY.indexOf(best.status)) best = v;
  return best;
}
