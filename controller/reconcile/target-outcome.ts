// How a finished order changes its target's record (TenantStatus.targets), the reconciler's
// durable memory per node. Pure; target-records.ts writes the result onto the tenant.
import { create } from "@bufbuild/protobuf";
import { copyMessage } from "../../common/message-copy.js";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { TargetStatusSchema, type TargetStatus } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { MAX_FAILURES, REMOVAL_HASH, retryDelayMs } from "./plan-target.js";
import { DeploySafetySchema } from "../../gen/skipper/v1/safety_pb.js";
import { fingerprint } from "../base/canonical-json.js";
import { reportedImageLock } from "./image-locks.js";

/** Result code of a deploy that failed and whose restore of the previous spec failed too. */
export const ROLLBACK_FAILED = "ROLLBACK_FAILED";

/** Order types that change what a target runs, and so its record. Others (restart, inspect…) leave it alone. */
export function changesTarget(order: WorkOrder): boolean {
  return (
    order.type === WorkOrderType.DEPLOY_SERVICE || order.type === WorkOrderType.REMOVE_SERVICE || order.type === WorkOrderType.ROLLBACK
  );
}

/**
 * The targets after `order` finished: applied hash (REMOVAL_HASH after a removal), failure count
 * and retry time updated. A rollback, asked for or done by the health gate (ROLLED_BACK), leaves
 * the node on the restored spec and holds the rolled-back desired hash (rolled_back_hash).
 */
export function recordOutcome(targets: TargetStatus[], order: WorkOrder, now: Date): TargetStatus[] {
  if (!changesTarget(order)) return targets;
  const nodeId = order.target?.nodeId ?? "";
  const ok = order.status === WorkOrderStatus.SUCCESS;
  const removal = order.type === WorkOrderType.REMOVE_SERVICE;
  const prev = targets.find((t) => t.nodeId === nodeId);
  // A late result for an older order must not undo what a newer one recorded, and an outcome
  // already recorded (the reconciler and the result report may both record it) counts once.
  if (prev && prev.lastWorkOrderId !== "" && prev.lastWorkOrderId !== order.id) return targets;
  if (prev && prev.lastWorkOrderId === order.id && prev.lastResultCode !== "") return targets;
  // A superseded order never ran: nothing to record.
  if (order.result?.code === "SUPERSEDED") return targets;
  const rest = targets.filter((t) => t.nodeId !== nodeId);
  const t = prev ? copyMessage(TargetStatusSchema, prev) : create(TargetStatusSchema, { nodeId });
  const hash = removal ? REMOVAL_HASH : (order.desiredState?.specHash ?? "");
  t.lastWorkOrderId = order.id;
  t.lastResultCode = order.result?.code ?? "";
  t.lastFailureCause = ok ? undefined : order.result?.cause;
  t.finishedAt = timestampFromDate(now);
  if (!removal && order.desiredState?.composeProject?.projectName) t.projectName = order.desiredState.composeProject.projectName;
  const restored = order.result?.details?.rollback?.restoredSpecHash ?? "";
  if (order.type === WorkOrderType.ROLLBACK) {
    const action = order.action?.kind.case === "rollback" ? order.action.kind.value : undefined;
    if (ok) {
      const held = action?.holdsDesiredHash ?? "";
      t.imageDigests = imageLockOf(order);
      t.appliedHash = hash;
      t.rolledBackHash = held !== hash ? held : "";
      t.rolledBackSafetyHash = ""; // an admin's rollback holds until the spec changes or Apply
      t.quarantineReason = action?.quarantineReason ?? "";
      t.failedHash = "";
      t.failures = 0;
      t.retryAt = undefined;
    } else if (action?.quarantineReason) {
      // The return to the last good spec failed too: the failed spec stays given up on.
      t.quarantineReason = `${action.quarantineReason}; returning to spec ${hash.slice(0, 12)} failed (${order.result?.code ?? ""})`;
    } else if (order.metadata?.annotations.reason === "drift" || order.metadata?.annotations.reason === "rollout_rollback") {
      // The reconciler's own rollbacks back off like deploys: failures of the spec they restore.
      t.failures = t.failedHash === hash ? t.failures + 1 : 1;
      t.failedHash = hash;
      t.retryAt = timestampFromDate(new Date(now.getTime() + retryDelayMs(t.failures)));
    }
  } else if (restored !== "" && order.result?.code !== ROLLBACK_FAILED) {
    // The health gate failed (ROLLED_BACK) or the images were not the pinned ones
    // (DIGEST_MISMATCH), and the agent restored the previous spec: that runs now, and the failed
    // spec is not tried again until the desired state changes.
    if (restored !== t.appliedHash) t.imageDigests = {};
    t.appliedHash = restored;
    t.rolledBackHash = hash;
    t.rolledBackSafetyHash = fingerprint(DeploySafetySchema, order.desiredState?.safety);
    t.quarantineReason = "";
    t.failedHash = "";
    t.failures = 0;
    t.retryAt = undefined;
  } else if (ok) {
    if (!removal) {
      t.rolledBackHash = "";
      t.rolledBackSafetyHash = "";
      t.quarantineReason = "";
    }
    // After a removal the record stays (applied = "removal") until the node's observations
    // confirm the project is gone; then the planner forgets the target.
    t.imageDigests = removal ? {} : imageLockOf(order);
    t.appliedHash = hash;
    t.failedHash = "";
    t.failures = 0;
    t.retryAt = undefined;
  } else if (order.status === WorkOrderStatus.CANCELLED) {
    // An admin stopped this desired state: no retries until it changes (or Apply forces one).
    t.failures = MAX_FAILURES;
    t.failedHash = hash;
    t.retryAt = undefined;
  } else {
    if (t.failedHash !== hash) t.quarantineReason = "";
    t.failures = t.failedHash === hash ? t.failures + 1 : 1;
    t.failedHash = hash;
    t.retryAt = timestampFromDate(new Date(now.getTime() + retryDelayMs(t.failures)));
  }
  return [...rest, t].sort((a, b) => (a.nodeId < b.nodeId ? -1 : 1));
}

/** The digests the node resolved the applied spec's images to (none from an agent older than locks). */
function imageLockOf(order: WorkOrder): Record<string, string> {
  return reportedImageLock(order.result?.details?.imageLock);
}
