// Which work-order statuses are an order's end. The controller (its outcome and recovery), the CLI
// and the dashboard (waiting for an order) read the same set. Imported by the dashboard too: no
// Node APIs here.
import { WorkOrderStatus } from "../gen/skipper/v1/work_order_pb.js";

/** The statuses an order ends in: nothing moves it on afterwards. */
export const FINISHED_STATUSES: ReadonlySet<WorkOrderStatus> = new Set([
  WorkOrderStatus.SUCCESS,
  WorkOrderStatus.FAILED,
  WorkOrderStatus.CANCELLED,
]);

/** True when `status` is an order's end (success, failed, cancelled). */
export function isFinishedStatus(status: WorkOrderStatus): boolean {
  return FINISHED_STATUSES.has(status);
}
