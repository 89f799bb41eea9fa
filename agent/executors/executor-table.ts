// The shape of the executor table: for every order type, the executor of the action member its
// orders carry (common/order-kinds.ts). A table that misses a type, or files an executor under
// a type whose action it does not run, does not compile.
import type { WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import type { ActionOfType, OrderType } from "../../common/order-kinds.js";
import type { Executor } from "./executor.js";

/** One executor per order type, each of the action that type carries. */
export type ExecutorTable = { readonly [T in OrderType]: Executor<ActionOfType[T]> };

/** The executor for an order's type, or undefined when the table has none (UNSPECIFIED, a type newer than this agent). */
export function executorFor(table: Partial<ExecutorTable>, type: WorkOrderType): Executor | undefined {
  return (table as Partial<Record<WorkOrderType, Executor>>)[type];
}
