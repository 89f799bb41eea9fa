// The Store's work-order steps that are each one function of the state machine
// (work-order-transitions.ts), for every backend: a backend supplies `transition`, which runs one
// step on one order atomically and durably (the file store under the order's lock, PostgreSQL as
// a compare-and-set on its row), and inherits these; and the checks of a new order both make.
import { WorkOrderStatus, type WorkOrder, type WorkOrderResult } from "../../gen/skipper/v1/work_order_pb.js";
import { conflict, invalid, type SkipperError } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import type { FinishOutcome, StepOf } from "./store.js";
import {
  cancelled,
  checkDuplicateResult,
  claimed,
  finished,
  isFinished,
  leaseExpired,
  released,
  renewed,
  reportedBefore,
  retryReleased,
  superseded,
} from "../domain/work-order-transitions.js";

/** INVALID_REQUEST unless `workOrder` may be created: a new order is pending. */
export function checkNewWorkOrder(workOrder: WorkOrder): void {
  if (workOrder.status !== WorkOrderStatus.PENDING) {
    throw invalid("a new work order must have status PENDING", { field: "status" });
  }
}

/** CONFLICT: an order with this id is stored already. */
export function workOrderExists(id: string): SkipperError {
  return conflict(`work order ${id} already exists`, { resource_type: "work_order", resource_id: id });
}

export abstract class OrderSteps {
  /**
   * Runs `step` on the stored order `id` (RESOURCE_NOT_FOUND when absent); an unchanged result
   * writes nothing. A changed one is written with what `events` gives of it (its events, and edits of other records), as one step (store.ts StepOf).
   */
  protected abstract transition(id: string, step: (current: WorkOrder) => WorkOrder, events?: StepOf<WorkOrder>): Promise<WorkOrder>;

  async claimWorkOrder(id: string, nodeId: string, now: Date, leaseMs?: number, events?: StepOf<WorkOrder>): Promise<WorkOrder> {
    checkId(nodeId, "node_id");
    return this.transition(id, (current) => claimed(current, nodeId, now, leaseMs), events);
  }

  async renewWorkOrderLease(id: string, nodeId: string, fencingToken: bigint, now: Date, leaseMs?: number): Promise<WorkOrder> {
    return this.transition(id, (current) => renewed(current, nodeId, fencingToken, now, leaseMs));
  }

  async expireWorkOrderLease(id: string, now: Date, events?: StepOf<WorkOrder>): Promise<WorkOrder> {
    return this.transition(id, (current) => leaseExpired(current, now), events);
  }

  async releaseWorkOrderClaim(
    id: string,
    nodeId: string,
    fencingToken: bigint,
    now: Date,
    events?: StepOf<WorkOrder>,
    leaseAsPushed?: Date,
  ): Promise<WorkOrder> {
    return this.transition(id, (current) => released(current, nodeId, fencingToken, now, leaseAsPushed), events);
  }

  async cancelWorkOrder(id: string, reason: string, requestId: string, now: Date, events?: StepOf<WorkOrder>): Promise<WorkOrder> {
    return this.transition(id, (current) => cancelled(current, reason, requestId, now), events);
  }

  async releaseWorkOrderRetry(id: string, now: Date): Promise<WorkOrder> {
    return this.transition(id, (current) => retryReleased(current, now));
  }

  async supersedeWorkOrder(
    id: string,
    result: WorkOrderResult,
    now: Date,
    status: WorkOrderStatus.CANCELLED | WorkOrderStatus.FAILED,
    events?: StepOf<WorkOrder>,
  ): Promise<WorkOrder> {
    return this.transition(id, (current) => superseded(current, result, now, status), events);
  }

  async finishWorkOrder(
    id: string,
    nodeId: string,
    result: WorkOrderResult,
    now: Date,
    fencingToken?: bigint,
    events?: StepOf<WorkOrder>,
  ): Promise<FinishOutcome> {
    // Set by the step that ran last (a backend may run it again on a fresh read).
    let duplicate = false;
    const workOrder = await this.transition(
      id,
      (current) => {
        duplicate = true;
        if (isFinished(current)) {
          checkDuplicateResult(current, fencingToken);
          return current;
        }
        // The same claim reporting again (its first answer was lost) while the order waits to retry.
        if (reportedBefore(current, fencingToken)) return current;
        duplicate = false;
        return finished(current, nodeId, result, now, fencingToken);
      },
      events,
    );
    return { workOrder, duplicate };
  }
}
