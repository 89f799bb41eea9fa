// The fleet's gauges, set from a census (fleet-census.ts) each time the registry is scraped:
// nodes by liveness, tenants by convergence, rollouts by status, work orders by type and status.
// A series never vanishes and comes back: every value of an enum is listed, at 0 when none, and
// a work-order type x status pair, once seen, stays at 0.
import { Gauge, type Registry } from "prom-client";
import { ConvergenceStatus, NodeLiveness } from "../../gen/skipper/v1/resource_pb.js";
import { RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import type { FleetCounts } from "./fleet-census.js";
import { enumLabel } from "./metric-labels.js";

/** Registers the fleet's gauges in `registry`, each set from `census` when scraped. */
export function registerFleetGauges(registry: Registry, census: () => Promise<FleetCounts>): void {
  const byEnum = <E extends number>(
    name: string,
    help: string,
    label: string,
    names: Record<number, string>,
    pick: (c: FleetCounts) => ReadonlyMap<E, number>,
  ) => {
    const g: Gauge<string> = new Gauge({
      name,
      help,
      labelNames: [label],
      registers: [registry],
      collect: async () => {
        const counts = pick(await census());
        for (const value of enumValues(names)) g.set({ [label]: enumLabel(names, value) }, counts.get(value as E) ?? 0);
      },
    });
  };
  byEnum("skipper_nodes", "Registered nodes, by liveness.", "liveness", NodeLiveness, (c) => c.nodesByLiveness);
  byEnum(
    "skipper_tenants",
    "Tenants, by convergence status (unspecified: not reconciled yet).",
    "convergence",
    ConvergenceStatus,
    (c) => c.tenantsByConvergence,
  );
  byEnum("skipper_rollouts", "Stored rollouts, by status.", "status", RolloutStatus, (c) => c.rolloutsByStatus);
  const seen = new Set<string>();
  const orders: Gauge<"type" | "status"> = new Gauge({
    name: "skipper_work_orders",
    help: "Stored work orders, by type and status (finished ones until retention deletes them).",
    labelNames: ["type", "status"],
    registers: [registry],
    collect: async () => {
      const now = new Map<string, number>();
      for (const c of (await census()).workOrders) {
        const key = `${enumLabel(WorkOrderType, c.type)}\0${enumLabel(WorkOrderStatus, c.status)}`;
        now.set(key, (now.get(key) ?? 0) + c.count);
        seen.add(key);
      }
      for (const key of seen) {
        const [type, status] = key.split("\0") as [string, string];
        orders.set({ type, status }, now.get(key) ?? 0);
      }
    },
  });
}

/** The numbers a protobuf-es enum object names. */
function enumValues(names: Record<number, string>): number[] {
  return Object.keys(names)
    .filter((k) => /^\d+$/.test(k))
    .map(Number);
}
