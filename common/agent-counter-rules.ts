// The shape of an agent's counters (AgentCounters in resource.proto) that the agent keeps and the
// controller checks: how an order type and a result code are written, what a boot id looks like,
// and how many entries there may be. One place, so the two sides cannot disagree.
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";

/** Order entries (type x code) a heartbeat's counters may hold. */
export const MAX_ORDER_COUNTS = 256;
/** Distinct type x code pairs the agent keeps before it counts new codes as OTHER (under MAX_ORDER_COUNTS). */
export const AGENT_ORDER_PAIRS = 200;
/** A count the controller accepts: exact in a JavaScript number. */
export const MAX_COUNT = BigInt(Number.MAX_SAFE_INTEGER);

const TYPE = /^[a-z][a-z0-9_]{0,63}$/;
const CODE = /^[A-Z][A-Z0-9_]{0,63}$/;
const BOOT_ID = /^[A-Za-z0-9-]{8,64}$/;

/** An order type as counters and metric labels write it: "deploy_service"; "unknown" for a number the enum does not name. */
export function orderTypeName(type: WorkOrderType): string {
  return (WorkOrderType[type] ?? "UNKNOWN").toLowerCase();
}

/** The order type names this contract knows ("unspecified" included). */
export const ORDER_TYPE_NAMES: ReadonlySet<string> = new Set(
  Object.keys(WorkOrderType)
    .filter((k) => !/^\d+$/.test(k))
    .map((k) => k.toLowerCase()),
);

/** Whether `s` is written as an order type name (known or not). */
export function isOrderTypeName(s: string): boolean {
  return TYPE.test(s);
}

/** Whether `s` is written as a result code (UPPER_SNAKE_CASE, at most 64 characters). */
export function isCounterCode(s: string): boolean {
  return CODE.test(s);
}

/** Whether `s` may be a boot id. */
export function isBootId(s: string): boolean {
  return BOOT_ID.test(s);
}
