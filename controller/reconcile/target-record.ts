// The reconciler's durable per-target record (TenantStatus.targets): how a finished order changes
// it. Pure; order-outcome.ts writes the result onto the tenant.
import { clone, create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { TargetStatusSchema, type TargetStatus } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { MAX_FAILURES, REMOVAL_HASH, retryDelayMs } from "./plan-target.js";

/** The targets after `order` finished: applied hash (REMOVAL_HASH after a removal), failure count and retry time updated. */
export function recordOutcome(targets: TargetStatus[], order: WorkOrder, now: Date): TargetStatus[] {
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
  const t = prev ? clone(TargetStatusSchema, prev) : create(TargetStatusSchema, { nodeId });
  const hash = removal ? REMOVAL_HASH : (order.desiredState?.specHash ?? "");
  t.lastWorkOrderId = order.id;
  t.lastResultCode = order.result?.code ?? "";
  t.finishedAt = timestampFromDate(now);
  if (!removal && order.desiredState?.composeProject?.projectName) t.projectName = order.desiredState.composeProject.projectName;
  if (ok) {
    // After a removal the record stays (applied = "removal") until the node's observations
    // confirm the project is gone; then the planner forgets the target.
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
    t.failures = t.failedHash === hash ? t.failures + 1 : 1;
    t.failedHash = hash;
    t.retryAt = timestampFromDate(new Date(now.getTime() + retryDelayMs(t.failures)));
  }
  return [...rest, t].sort((a, b) => (a.nodeId < b.nodeId ? -1 : 1));
}
