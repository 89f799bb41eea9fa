// The work-order state machine, apart from any backend: pending -> running (claim) -> success |
// failed (finish). Each function checks that the transition is allowed and returns the new
// order, or throws the typed error the Store contract names. A PostgreSQL store can reuse them.
import { clone, create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  WorkOrderClaimSchema,
  WorkOrderResultSchema,
  WorkOrderSchema,
  WorkOrderStatus,
  type WorkOrder,
  type WorkOrderResult,
} from "../../gen/skipper/v1/work_order_pb.js";
import { forbidden, notClaimable } from "../errors.js";

/** Lowercase status names used in error details ("running", "success"...). */
export const SHORT_STATUS: Record<WorkOrderStatus, string> = {
  [WorkOrderStatus.UNSPECIFIED]: "unspecified",
  [WorkOrderStatus.PENDING]: "pending",
  [WorkOrderStatus.RUNNING]: "running",
  [WorkOrderStatus.SUCCESS]: "success",
  [WorkOrderStatus.FAILED]: "failed",
};

/** True once the order has a final status. */
export function isFinished(o: WorkOrder): boolean {
  return o.status === WorkOrderStatus.SUCCESS || o.status === WorkOrderStatus.FAILED;
}

/** The claimed copy of a pending order; WORK_ORDER_NOT_CLAIMABLE otherwise. */
export function claimed(current: WorkOrder, nodeId: string, now: Date): WorkOrder {
  if (current.status !== WorkOrderStatus.PENDING) {
    const status = SHORT_STATUS[current.status];
    throw notClaimable(`work order ${current.id} is ${status}, not pending`, { status, claimed_by: current.claim?.nodeId ?? "" });
  }
  const next = clone(WorkOrderSchema, current);
  next.status = WorkOrderStatus.RUNNING;
  next.claim = create(WorkOrderClaimSchema, { nodeId, claimedAt: timestampFromDate(now) });
  next.startedAt = timestampFromDate(now);
  return next;
}

/**
 * The finished copy of a running order held by `nodeId`. Call only for unfinished orders (a
 * finished one is a duplicate report, answered with the stored order).
 */
export function finished(current: WorkOrder, nodeId: string, result: WorkOrderResult, now: Date): WorkOrder {
  if (current.status !== WorkOrderStatus.RUNNING) {
    throw notClaimable(`work order ${current.id} has not been claimed`, { status: SHORT_STATUS[current.status], claimed_by: "" });
  }
  if (current.claim?.nodeId !== nodeId) {
    throw forbidden(`work order ${current.id} is claimed by another node`, { work_order_id: current.id });
  }
  const next = clone(WorkOrderSchema, current);
  next.status = result.success ? WorkOrderStatus.SUCCESS : WorkOrderStatus.FAILED;
  next.result = clone(WorkOrderResultSchema, result);
  next.finishedAt = timestampFromDate(now);
  return next;
}

/** The failed copy of a pending order that was superseded before any node claimed it. */
export function superseded(current: WorkOrder, result: WorkOrderResult, now: Date): WorkOrder {
  if (current.status !== WorkOrderStatus.PENDING) {
    const status = SHORT_STATUS[current.status];
    throw notClaimable(`work order ${current.id} is ${status}, not pending`, { status, claimed_by: current.claim?.nodeId ?? "" });
  }
  const next = clone(WorkOrderSchema, current);
  next.status = WorkOrderStatus.FAILED;
  next.result = clone(WorkOrderResultSchema, result);
  next.finishedAt = timestampFromDate(now);
  return next;
}
