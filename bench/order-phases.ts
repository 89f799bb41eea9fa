// The controller phases that finish the orders the apply phase made (npm run bench: run.ts).
import type { Client } from "@connectrpc/connect";
import type { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import type { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { batchClaimPhase } from "./batch-claim.js";
import { closedLoop, type PhaseResult } from "./closed-loop.js";
import { sessionKeepalivePhase, sessionOrdersPhase } from "./session-phases.js";

// The phases that finish the orders apply made (`made[w]` on node w), shared between
// claim+result, its batches and the session phase; then the keepalive phase.
export async function orderPhases(ctx: {
  phases: Set<string>;
  batch: number;
  durationMs: number;
  nodes: Client<typeof NodeService>[];
  orders: Client<typeof WorkOrderService>[];
  made: number[];
  singleLeft: number[];
  finishOne: (w: number) => Promise<boolean>;
  ctlCpu: () => number;
}): Promise<PhaseResult[]> {
  const { phases, batch, durationMs, nodes, orders, made, singleLeft, finishOne, ctlCpu } = ctx;
  const results: PhaseResult[] = [];
  const shares = (phases.has("claim") ? 1 + (batch > 0 ? 1 : 0) : 0) + (phases.has("session") ? 1 : 0);
  const shareOf = (w: number) => Math.floor((made[w] ?? 0) / Math.max(1, shares));
  if (phases.has("session")) {
    const budget = made.map((_, w) => shareOf(w));
    results.push(await sessionOrdersPhase(nodes, budget, durationMs, ctlCpu));
  }
  if (phases.has("claim")) {
    for (let w = 0; w < made.length; w++) singleLeft[w] = batch > 0 ? shareOf(w) : Number.POSITIVE_INFINITY;
    results.push(await closedLoop("claim+result", made.length, durationMs, async (w) => finishOne(w), ctlCpu));
    if (batch > 0) results.push(await batchClaimPhase(orders, batch, durationMs, ctlCpu));
  }
  if (phases.has("keepalive")) results.push(await sessionKeepalivePhase(nodes, durationMs, ctlCpu));
  return results;
}
