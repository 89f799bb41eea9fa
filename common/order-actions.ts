// Which member of the action oneof each order type carries (as the contract's WorkOrderType
// comments say). The controller refuses an ad-hoc order whose action is another member; the
// agent files each executor under its type with that member's message, so a mismatch does not
// compile.
import type { WorkOrderAction } from "../gen/skipper/v1/order_action_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";

/** The order types there are (UNSPECIFIED is no order). */
export type OrderType = Exclude<WorkOrderType, WorkOrderType.UNSPECIFIED>;

/** A member of the action oneof ("deployProcess", ...). */
export type ActionCase = NonNullable<WorkOrderAction["kind"]["case"]>;

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
  [WorkOrderType.READ_LOGS]: "readLogs",
} as const satisfies Record<OrderType, ActionCase | undefined>;
