// A finished work order's row in the summary file of work-orders/finished/ (summary-file.ts):
// the fields of its summary (order-summary.ts) as string columns.
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { WorkOrder } from "../../../gen/skipper/v1/work_order_pb.js";
import { orderSummary } from "../order-summary.js";
import type { SummaryRows } from "./summary-file.js";

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
    return orderSummary(r[0]!, num(r[1]!), num(r[2]!), timestamp(r[3]!), timestamp(r[4]!), timestamp(r[5]!), r[6]!, r[7]!, r[8]!, r[9]!);
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
  // A Timestamp message is exactly these fields; a literal saves create()'s reflection.
  return { $typeName: "google.protobuf.Timestamp", seconds: BigInt(m[1]!), nanos: Number(m[2]) };
}

function num(v: string): number {
  if (!/^\d{1,10}$/.test(v)) throw new Error("bad number in a summary row");
  return Number(v);
}
