// The claim+result phase in batches (npm run bench -- --batch N): each client claims up to N of
// its node's pending orders with ClaimWorkOrders and reports them with one ReportWorkOrderResults,
// so a finished order costs 2/N calls instead of two. Its rate counts finished orders, not calls,
// so it reads beside the single-call claim+result row and pg-boss's claim+complete.
import type { Client } from "@connectrpc/connect";
import type { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { closedLoop, type PhaseResult } from "./closed-loop.js";

/** Runs the batch phase on one client (and node `bench-node-<w>`) per worker. */
export async function batchClaimPhase(
  orders: Client<typeof WorkOrderService>[],
  batch: number,
  durationMs: number,
  cpuOf: () => number,
): Promise<PhaseResult> {
  let finished = 0;
  const result = await closedLoop(
    `claim+result batch ${batch}`,
    orders.length,
    durationMs,
    async (w) => {
      const client = orders[w]!;
      const claimed = (await client.claimWorkOrders({ nodeId: `bench-node-${w}`, max: batch })).workOrders;
      if (claimed.length === 0) return false;
      const res = await client.reportWorkOrderResults({
        items: claimed.map((o) => ({
          workOrderId: o.id,
          fencingToken: o.fencingToken,
          result: { success: true, code: "APPLY_OK", message: "bench", details: { durationMs: 1n } },
        })),
      });
      const refused = res.items.find((i) => i.error);
      if (refused) throw new Error(`batch result refused: ${refused.error?.code} ${refused.error?.message}`);
      finished += claimed.length;
    },
    cpuOf,
  );
  // Latencies stay per call (a claim and a report of up to N); rate and ops count orders.
  return { ...result, ops: finished, rate: finished / result.seconds };
}
