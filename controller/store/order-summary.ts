// A finished work order as the index holds it until a read needs all of it: the fields listings
// sort and filter on (id, status, times, target), and what retention and recovery look at (type,
// spec hash, deployment). A controller keeps the work orders of its whole retention period; held
// in full they made open() read every one and memory grow with history.
import { create } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import { WorkOrderDesiredStateSchema, WorkOrderSchema, WorkOrderTargetSchema, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { SummaryRows } from "./summary-file.js";

const summaries = new WeakSet<WorkOrder>();

/** True when `o` is a summary (from summarise or a summary row), not the stored record. */
export function isOrderSummary(o: WorkOrder): boolean {
  return summaries.has(o);
}

/** The summary of a finished order. */
export function summarise(o: WorkOrder): WorkOrder {
  if (summaries.has(o)) return o;
  const s = create(WorkOrderSchema, {
    id: o.id,
    status: o.status,
    type: o.type,
    createdAt: o.createdAt,
    finishedAt: o.finishedAt,
    expiresAt: o.expiresAt,
    target: o.target && { tenantId: o.target.tenantId, nodeId: o.target.nodeId },
    desiredState: o.desiredState && { specHash: o.desiredState.specHash, deploymentId: o.desiredState.deploymentId },
  });
  summaries.add(s);
  return s;
}

/** Rows of the finished orders' summary file (summary-file.ts). */
export const ORDER_SUMMARY_ROWS: SummaryRows<WorkOrder> = {
  toRow: (o) => [
    o.id,
    String(o.status),
    String(o.type),
    time(o.createdAt),
    time(o.finishedAt),
    time(o.expiresAt),
    o.target?.tenantId ?? "",
    o.target?.nodeId ?? "",
    o.desiredState?.specHash ?? "",
    o.desiredState?.deploymentId ?? "",
  ],
  fromRow: (r) => {
    if (r.length !== 10) throw new Error("a summary row has the wrong number of columns");
    // Defaults made, then fields set: create() with an init object costs twice as much, and
    // open() makes one of these per finished order.
    const s = create(WorkOrderSchema);
    s.id = r[0]!;
    s.status = num(r[1]!);
    s.type = num(r[2]!);
    s.createdAt = timestamp(r[3]!);
    s.finishedAt = timestamp(r[4]!);
    s.expiresAt = timestamp(r[5]!);
    s.target = create(WorkOrderTargetSchema);
    s.target.tenantId = r[6]!;
    s.target.nodeId = r[7]!;
    s.desiredState = create(WorkOrderDesiredStateSchema);
    s.desiredState.specHash = r[8]!;
    s.desiredState.deploymentId = r[9]!;
    summaries.add(s);
    return s;
  },
};

// "<seconds>.<nanos>", or "" for none.
function time(t: Timestamp | undefined): string {
  return t ? `${t.seconds}.${t.nanos}` : "";
}

function timestamp(v: string): Timestamp | undefined {
  if (v === "") return undefined;
  const m = /^(-?\d{1,19})\.(\d{1,9})$/.exec(v);
  if (!m) throw new Error("bad timestamp in a summary row");
  const t = create(TimestampSchema);
  t.seconds = BigInt(m[1]!);
  t.nanos = Number(m[2]);
  return t;
}

function num(v: string): number {
  if (!/^\d{1,10}$/.test(v)) throw new Error("bad number in a summary row");
  return Number(v);
}
