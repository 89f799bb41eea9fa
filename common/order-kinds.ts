// The work-order kinds, one entry each: what the controller, the agent and the CLI all know of a
// kind, in a table the compiler checks for completeness against the contract's WorkOrderType.
// The controller's own facts of a kind (how CreateWorkOrder takes it, its request rules, what a
// node must permit, what its events say) are in controller/dispatch/order-kinds.ts; the agent's
// executor of each kind in agent/executors/registry.ts, typed by this table's action member.
//
// Adding a kind: the enum value and its action message in the contract, an entry here, one in
// controller/dispatch/order-kinds.ts and its executor on the agent; the compiler names each that
// is missing.
import type { WorkOrderAction } from "../gen/skipper/v1/order_action_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";

/** The order types there are (UNSPECIFIED is no order). */
export type OrderType = Exclude<WorkOrderType, WorkOrderType.UNSPECIFIED>;

/** A member of the action oneof ("deployProcess", ...). */
export type ActionCase = NonNullable<WorkOrderAction["kind"]["case"]>;

/** What every side knows of one order kind. */
export interface OrderKind {
  /**
   * The member of the action oneof its orders carry (as the contract's WorkOrderType comments
   * say); undefined for deploy_service and remove_service, which carry a desired state instead.
   */
  readonly action: ActionCase | undefined;
  /**
   * Whether a run an agent restart interrupted (or whose result was not saved) may run again.
   * A kind that converges when run again says so; one whose effect may not repeat safely (a
   * command) is reported AGENT_RESTARTED instead, whether it finished being unknown.
   */
  readonly afterRestart: "run again" | "do not run again";
  /** Whether it only reads a host (logs, a sticker, an inspection): it moves nothing toward the desired state. */
  readonly readsOnly: boolean;
}

/** Every order kind, by its type. */
export const ORDER_KINDS = {
  [WorkOrderType.DEPLOY_SERVICE]: { action: undefined, afterRestart: "run again", readsOnly: false },
  [WorkOrderType.REMOVE_SERVICE]: { action: undefined, afterRestart: "run again", readsOnly: false },
  [WorkOrderType.RESTART_SERVICE]: { action: "restartService", afterRestart: "run again", readsOnly: false },
  [WorkOrderType.ROLLBACK]: { action: "rollback", afterRestart: "run again", readsOnly: false },
  [WorkOrderType.HEALTH_CHECK]: { action: "healthCheck", afterRestart: "run again", readsOnly: false },
  [WorkOrderType.INSPECT]: { action: "inspect", afterRestart: "run again", readsOnly: true },
  // A command need not be idempotent, and whether it ran is unknown.
  [WorkOrderType.EXECUTE_COMMAND]: { action: "executeCommand", afterRestart: "do not run again", readsOnly: false },
  [WorkOrderType.UPLOAD_FILES]: { action: "uploadFiles", afterRestart: "run again", readsOnly: false },
  [WorkOrderType.WRITE_STICKER]: { action: "writeSticker", afterRestart: "run again", readsOnly: false },
  [WorkOrderType.READ_STICKER]: { action: "readSticker", afterRestart: "run again", readsOnly: true },
  [WorkOrderType.DEPLOY_PROCESS]: { action: "deployProcess", afterRestart: "run again", readsOnly: false },
  [WorkOrderType.CONTROL_PROCESS]: { action: "controlProcess", afterRestart: "run again", readsOnly: false },
  [WorkOrderType.READ_LOGS]: { action: "readLogs", afterRestart: "run again", readsOnly: true },
  // A command in a container need not be idempotent either, and whether it ran is unknown.
  [WorkOrderType.EXEC_SERVICE]: { action: "execService", afterRestart: "do not run again", readsOnly: false },
  // Each step reads the engine first (agent/executors/deploy-container.ts): run again, an update
  // an agent restart interrupted between the old container's stop and the new one's start finishes.
  [WorkOrderType.DEPLOY_CONTAINER]: { action: "deployContainer", afterRestart: "run again", readsOnly: false },
  [WorkOrderType.CONTROL_CONTAINER]: { action: "controlContainer", afterRestart: "run again", readsOnly: false },
  // A receiver tells a repeated attempt by its delivery id (the signed headers name it).
  [WorkOrderType.DELIVER_WEBHOOK]: { action: "deliverWebhook", afterRestart: "run again", readsOnly: false },
  // Staging converges: a bundle already staged or running is not fetched again.
  [WorkOrderType.UPDATE_AGENT]: { action: "updateAgent", afterRestart: "run again", readsOnly: false },
} as const satisfies { readonly [T in OrderType]: OrderKind };

/** The action member each order type carries (undefined: a desired state instead). */
export type ActionOfType = { readonly [T in OrderType]: (typeof ORDER_KINDS)[T]["action"] };

/** The order types, in the enum's order. */
export const ORDER_TYPES = Object.keys(ORDER_KINDS).map(Number) as OrderType[];

/** The kind of an order type; undefined for UNSPECIFIED or a number a newer contract added. */
export function orderKind(type: WorkOrderType): OrderKind | undefined {
  return (ORDER_KINDS as Partial<Record<WorkOrderType, OrderKind>>)[type];
}

/**
 * Whether an interrupted run of `type` may run again after an agent restart. A type this side
 * does not know (a newer controller's) is not run again.
 */
export function mayRunAgain(type: WorkOrderType): boolean {
  return orderKind(type)?.afterRestart === "run again";
}
