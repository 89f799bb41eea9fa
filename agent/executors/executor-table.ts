// The shape of the executor table: for every order type, the member of the action oneof its
// orders carry (as the contract's WorkOrderType comments say), and so the executor it takes. A
// table that misses a type, or files an executor under a type whose action it does not run,
// does not compile.
import { WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import type { ActionCase, Executor } from "./executor.js";

/** The order types there are executors for (UNSPECIFIED is no order). */
export type OrderType = Exclude<WorkOrderType, WorkOrderType.UNSPECIFIED>;

/** The action member each order type carries; deploy_service and remove_service carry a desired state instead. */
export const ACTION_OF_TYPE = {
  [WorkOrderType.DEPLOY_SERVICE]: undefined,
  [WorkOrderType.REMOVE_SERVICE]: undefined,
  [WorkOrderType.RESTART_SERVICE]: "restartService",
  [WorkOrderType.ROLLBACK]: "rollback",
  [WorkOrderType.HEALTH_CHECK]: "healthCheck",
  [WorkOrderType.INSPECT]: "inspect",
  [WorkOrderType.EXECUTE_COMMAND]: "executeCommand",
  [WorkOrderType.UPLOAD_FILES]: "uploadFiles",
  [WorkOrderType.WRITE_STICKER]: "writeSticker",
  [WorkOrderType.READ_STICKER]: "readSticker",
  [WorkOrderType.DEPLOY_PROCESS]: "deployProcess",
  [WorkOrderType.CONTROL_PROCESS]: "controlProcess",
} as const satisfies Record<OrderType, ActionCase | undefined>;

/** One executor per order type, each of the action that type carries. */
export type ExecutorTable = { readonly [T in OrderType]: Executor<(typeof ACTION_OF_TYPE)[T]> };

/** The executor for an order's type, or undefined when the table has none (UNSPECIFIED, a type newer than this agent). */
export function executorFor(table: Partial<ExecutorTable>, type: WorkOrderType): Executor | undefined {
  return (table as Partial<Record<WorkOrderType, Executor>>)[type];
}
