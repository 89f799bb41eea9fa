// The event of one work-order transition. Ids are deterministic per transition
// (transitionEventId), so a replay after a crash writes each event once.
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Trace } from "../base/context.js";
import { transitionEventId, type EventInput, type EventType } from "./event-recorder.js";

/** The event of one order transition, with the stable id that makes a replay write it once. */
export function orderEvent(order: WorkOrder, type: EventType, trace: Trace, extra: Partial<EventInput> = {}): EventInput {
  return {
    id: transitionEventId(order.id, type),
    type,
    ...trace,
    resourceType: "work_order",
    resourceId: order.id,
    tenantId: order.target?.tenantId,
    nodeId: order.target?.nodeId,
    workOrderId: order.id,
    deploymentId: order.desiredState?.deploymentId ?? "",
    ...extra,
  };
}
