// A finished work order as the index holds it until a read needs all of it: the fields listings
// sort and filter on (id, status, times, target), and what retention and recovery look at (type,
// spec hash, deployment). A controller keeps the work orders of its whole retention period; held
// in full they made open() read every one and memory grow with history.
//
// A summary is a small object of its own class, not a WorkOrder message: open() makes one per
// finished order, and a message (create(), its defaults, a WeakSet to mark it) cost several
// times as much. It has only the fields above, so it never leaves the store as it is: callers
// get summaryMessage(s), or the order read from its file.
import { create } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import { WorkOrderSchema, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";

class OrderSummary {
  readonly priority = 0;
  readonly target: { tenantId: string; nodeId: string };
  readonly desiredState: { specHash: string; deploymentId: string };

  constructor(
    readonly id: string,
    readonly status: number,
    readonly type: number,
    readonly createdAt: Timestamp | undefined,
    readonly finishedAt: Timestamp | undefined,
    readonly expiresAt: Timestamp | undefined,
    tenantId: string,
    nodeId: string,
    specHash: string,
    deploymentId: string,
  ) {
    this.target = { tenantId, nodeId };
    this.desiredState = { specHash, deploymentId };
  }
}

/**
 * A summary from its fields (a summary row's), typed as the WorkOrder it stands for, for the index
 * (which reads only the fields above).
 */
export function orderSummary(...args: ConstructorParameters<typeof OrderSummary>): WorkOrder {
  return new OrderSummary(...args) as unknown as WorkOrder;
}

/** True when `o` is a summary (from summarise or a summary row), not the stored record. */
export function isOrderSummary(o: WorkOrder): boolean {
  return o instanceof OrderSummary;
}

/** The summary of a finished order. */
export function summarise(o: WorkOrder): WorkOrder {
  if (isOrderSummary(o)) return o;
  return orderSummary(
    o.id,
    o.status,
    o.type,
    o.createdAt,
    o.finishedAt,
    o.expiresAt,
    o.target?.tenantId ?? "",
    o.target?.nodeId ?? "",
    o.desiredState?.specHash ?? "",
    o.desiredState?.deploymentId ?? "",
  );
}

/** A WorkOrder message with only the summary's fields set (WorkOrderFilter.summaryOnly). */
export function summaryMessage(o: WorkOrder): WorkOrder {
  const s = summarise(o);
  const copy = (t: Timestamp | undefined) => t && create(TimestampSchema, { seconds: t.seconds, nanos: t.nanos });
  return create(WorkOrderSchema, {
    id: s.id,
    status: s.status,
    type: s.type,
    createdAt: copy(s.createdAt),
    finishedAt: copy(s.finishedAt),
    expiresAt: copy(s.expiresAt),
    // Absent on the summary's order when empty (a row cannot tell an empty one from none).
    target: s.target!.tenantId || s.target!.nodeId ? { tenantId: s.target!.tenantId, nodeId: s.target!.nodeId } : undefined,
    desiredState:
      s.desiredState!.specHash || s.desiredState!.deploymentId
        ? { specHash: s.desiredState!.specHash, deploymentId: s.desiredState!.deploymentId }
        : undefined,
  });
}
