// A finished work order as the index holds it until a read needs all of it: the fields listings
// sort and filter on (id, status, times, target), and what retention and recovery look at (type,
// spec hash, deployment). A controller keeps the work orders of its whole retention period; held
// in full they made open() read every one and memory grow with history.
import { create } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import { WorkOrderSchema, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
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
    o.status,
    o.type,
    time(o.createdAt),
    time(o.finishedAt),
    time(o.expiresAt),
    o.target?.tenantId ?? "",
    o.target?.nodeId ?? "",
    o.desiredState?.specHash ?? "",
    o.desiredState?.deploymentId ?? "",
  ],
  fromRow: (r) => {
    const s = create(WorkOrderSchema, {
      id: str(r[0]),
      status: num(r[1]),
      type: num(r[2]),
      createdAt: timestamp(r[3]),
      finishedAt: timestamp(r[4]),
      expiresAt: timestamp(r[5]),
      target: { tenantId: str(r[6]), nodeId: str(r[7]) },
      desiredState: { specHash: str(r[8]), deploymentId: str(r[9]) },
    });
    summaries.add(s);
    return s;
  },
};

function time(t: Timestamp | undefined): [string, number] | null {
  return t ? [t.seconds.toString(), t.nanos] : null;
}

function timestamp(v: unknown): Timestamp | undefined {
  if (v === null) return undefined;
  if (!Array.isArray(v) || typeof v[0] !== "string" || typeof v[1] !== "number") throw new Error("bad timestamp in a summary row");
  return create(TimestampSchema, { seconds: BigInt(v[0]), nanos: v[1] });
}

function str(v: unknown): string {
  if (typeof v !== "string") throw new Error("bad string in a summary row");
  return v;
}

function num(v: unknown): number {
  if (typeof v !== "number") throw new Error("bad number in a summary row");
  return v;
}
