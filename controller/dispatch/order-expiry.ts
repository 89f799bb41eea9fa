// Orders with an expires_at that no node claimed in time end FAILED with code EXPIRED instead of
// running late (a restart meant for a maintenance window must not run the next morning). The
// lease monitor sweeps for them; GetNextWorkOrder expires one it would otherwise hand out.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { isSkipperError } from "../base/errors.js";
import type { Logger } from "../../common/logging/logger.js";
import type { ReconcileTriggers } from "../reconcile/triggers.js";
import { EXPIRED, expirePendingOrder } from "../reconcile/order-end.js";
import type { OutcomeDeps } from "./order-outcome.js";

export { expiredAt } from "../domain/work-order-transitions.js";

/** Fails a pending order past its expires_at; undefined when it moved on meanwhile (claimed, cancelled). */
export async function expireOrder(
  deps: OutcomeDeps & { logger: Logger; triggers: ReconcileTriggers },
  o: WorkOrder,
  now: Date,
): Promise<WorkOrder | undefined> {
  let done: WorkOrder;
  try {
    done = await expirePendingOrder(deps, o, now);
  } catch (e) {
    if (isSkipperError(e) && e.code === "WORK_ORDER_NOT_CLAIMABLE") return undefined;
    throw e;
  }
  deps.triggers.orderEnded(done);
  deps.logger.warn(
    {
      action: "work_order_expired",
      result: EXPIRED,
      node_id: o.target?.nodeId,
      tenant_id: o.target?.tenantId,
      work_order_id: o.id,
      metadata: { expires_at: o.expiresAt ? timestampDate(o.expiresAt).toISOString() : "" },
    },
    "work order expired before any node claimed it",
  );
  return done;
}
