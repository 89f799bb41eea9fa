// The Store's work-order steps that are each one function of the state machine
// (work-order-transitions.ts), for every backend: a backend supplies `transition`, which runs one
// step on one order atomically and durably (the file store under the order's lock, PostgreSQL as
// a compare-and-set on its row), and inherits these. finishWorkOrder is not here: its duplicate
// handling differs per backend.
import type { WorkOrder, WorkOrderResult } from "../../gen/skipper/v1/work_order_pb.js";
import { checkId } from "../id-checks.js";
import { cancelled, claimed, leaseExpired, renewed, retryReleased, superseded } from "./work-order-transitions.js";

export abstract class OrderSteps {
  /** Runs `step` on the stored order `id` (RESOURCE_NOT_FOUND when absent); an unchanged result writes nothing. */
  protected abstract transition(id: string, step: (current: WorkOrder) => WorkOrder): Promise<WorkOrder>;

  async claimWorkOrder(id: string, nodeId: string, now: Date, leaseMs?: number): Promise<WorkOrder> {
    checkId(nodeId, "node_id");
    return this.transition(id, (current) => claimed(current, nodeId, now, leaseMs));
  }

  async renewWorkOrderLease(id: string, nodeId: string, fencingToken: bigint, now: Date, leaseMs?: number): Promise<WorkOrder> {
    return this.transition(id, (current) => renewed(current, nodeId, fencingToken, now, leaseMs));
  }

  async expireWorkOrderLease(id: string, now: Date): Promise<WorkOrder> {
    return this.transition(id, (current) => leaseExpired(current, now));
  }

  async cancelWorkOrder(id: string, reason: string, requestId: string, now: Date): Promise<WorkOrder> {
    return this.transition(id, (current) => cancelled(current, reason, requestId, now));
  }

  async releaseWorkOrderRetry(id: string, now: Date): Promise<WorkOrder> {
    return this.transition(id, (current) => retryReleased(current, now));
  }

  async supersedeWorkOrder(id: string, result: WorkOrderResult, now: Date): Promise<WorkOrder> {
    return this.transition(id, (current) => superseded(current, result, now));
  }
}
