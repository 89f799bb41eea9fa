// Where a tenant's change stands, for `skipper rollout status`: done (converged, its rollout
// complete), progressing (orders in flight, waves under way: waiting helps), or blocked (paused,
// waiting for a promote or an approval, failed, rolled back, nowhere to run: waiting does not
// help, someone must act). The tenant's convergence decides; its latest rollout says more while it
// runs. Pure: the lines it renders are what the command prints, and tests check them.
import { ConvergenceStatus, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { RolloutNodeState, RolloutStatus, type Rollout } from "../gen/skipper/v1/rollout_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { BLOCKING_CONVERGENCE, waveSummary } from "./resource-columns.js";
import { cut, enumName } from "./output.js";

export interface Verdict {
  state: "done" | "progressing" | "blocked";
  reason: string;
  /** What to run to unblock it, when the CLI can do it. */
  hint?: string;
}

const ONGOING = new Set([RolloutStatus.PENDING_APPROVAL, RolloutStatus.PROGRESSING, RolloutStatus.PAUSED, RolloutStatus.ROLLING_BACK]);

/** The orders that change what a tenant runs: while one of them is unfinished, the tenant's change is too. */
export const CHANGING_ORDERS: ReadonlySet<WorkOrderType> = new Set([
  WorkOrderType.DEPLOY_SERVICE,
  WorkOrderType.REMOVE_SERVICE,
  WorkOrderType.ROLLBACK,
]);
/** The statuses of an order not finished yet. */
export const UNFINISHED_ORDER_STATUSES = [WorkOrderStatus.PENDING, WorkOrderStatus.RUNNING, WorkOrderStatus.RETRY_PENDING] as const;
// The convergence an order in flight may be about to change: an Apply (deploy now) makes an order
// while the tenant still says CONVERGED, or still shows the failure the order is to repair.
const SUPERSEDED_BY_AN_ORDER = new Set([ConvergenceStatus.CONVERGED, ConvergenceStatus.ORDER_FAILED, ConvergenceStatus.ROLLED_BACK]);

/**
 * The verdict for `tenant`, its latest rollout and its unfinished orders (`inFlight`, of
 * CHANGING_ORDERS): a tenant whose orders still run is not done, whatever its convergence says yet.
 */
export function rolloutVerdict(tenant: Resource, rollout: Rollout | undefined, inFlight: readonly WorkOrder[] = []): Verdict {
  const c = tenant.convergence;
  const status = c?.status ?? ConvergenceStatus.UNSPECIFIED;
  const why = `${enumName(ConvergenceStatus, status)}${c?.message ? `: ${c.message}` : ""}`;
  if (tenant.deletion) return { state: "blocked", reason: `tenant ${tenant.id} is deleted` };
  if (rollout && ONGOING.has(rollout.status)) {
    if (rollout.status === RolloutStatus.PAUSED) {
      return {
        state: "blocked",
        reason: `rollout ${rollout.id} is paused${rollout.paused?.reason ? ` (${rollout.paused.reason})` : rollout.message ? ` (${rollout.message})` : ""}`,
        hint: `resume it with \`skipper rollout resume ${tenant.id}\`, or abort it with \`skipper rollout abort ${tenant.id}\``,
      };
    }
    if (rollout.status === RolloutStatus.PENDING_APPROVAL) {
      return {
        state: "blocked",
        reason: `rollout ${rollout.id} waits for approval of plan ${rollout.plan?.planHash ?? ""}`,
        hint: `approve it with POST /v1/rollouts/${rollout.id}/approve and its plan_hash`,
      };
    }
    const gate = promoteGate(rollout);
    if (gate) {
      return {
        state: "blocked",
        reason: `wave ${gate} of rollout ${rollout.id} waits for a promote`,
        hint: `promote it with \`skipper rollout promote ${tenant.id}\``,
      };
    }
    return {
      state: "progressing",
      reason: `rollout ${rollout.id} ${enumName(RolloutStatus, rollout.status).toLowerCase()}: ${waveSummary(rollout.waves)}`,
    };
  }
  const running = inFlight.find((o) => CHANGING_ORDERS.has(o.type));
  if (running && SUPERSEDED_BY_AN_ORDER.has(status)) {
    return { state: "progressing", reason: `${orderText(running)} (the tenant says ${why})` };
  }
  if (status === ConvergenceStatus.CONVERGED) return { state: "done", reason: why };
  if (status === ConvergenceStatus.ROLLOUT_WAITING && rollout && !ONGOING.has(rollout.status)) {
    return {
      state: "blocked",
      reason: `rollout ${rollout.id} ended ${enumName(RolloutStatus, rollout.status)}${rollout.message ? ` (${rollout.message})` : ""}`,
    };
  }
  if (BLOCKING_CONVERGENCE.has(status))
    return { state: "blocked", reason: why, hint: `see why with \`skipper explain tenant ${tenant.id}\`` };
  return { state: "progressing", reason: why };
}

/** `order 0193… deploy_service on host-1 RUNNING`. */
export function orderText(o: WorkOrder): string {
  return `order ${o.id} ${enumName(WorkOrderType, o.type).toLowerCase()} on ${o.target?.nodeId || "-"} ${enumName(WorkOrderStatus, o.status)}`;
}

/** The first wave that waits for a promote with every wave before it complete, if any. */
export function promoteGate(r: Rollout): string | undefined {
  if (r.status !== RolloutStatus.PROGRESSING) return undefined;
  for (const w of r.waves) {
    if (w.requirePromote && !w.promoted && !w.startedAt) return w.name;
    if (!w.completedAt) return undefined;
  }
  return undefined;
}

/** Status lines, each with a key so a watcher prints only those that changed. */
export function statusLines(tenant: Resource, rollout: Rollout | undefined): { key: string; text: string }[] {
  const lines: { key: string; text: string }[] = [];
  const c = tenant.convergence;
  lines.push({
    key: "tenant",
    text: `tenant ${tenant.id}: ${enumName(ConvergenceStatus, c?.status ?? 0)}${c?.message ? ` - ${cut(c.message, 120)}` : ""}`,
  });
  if (!rollout) return lines;
  const hashes = `spec ${rollout.fromSpecHash.slice(0, 12) || "-"} -> ${rollout.toSpecHash.slice(0, 12)}`;
  lines.push({
    key: "rollout",
    text: `rollout ${rollout.id} ${enumName(RolloutStatus, rollout.status)} (${hashes})${rollout.message ? `: ${cut(rollout.message, 100)}` : ""}`,
  });
  const width = Math.max(...rollout.waves.map((w) => w.name.length), 4);
  for (const w of rollout.waves) {
    const done = w.nodes.filter((n) => n.state === RolloutNodeState.DONE).length;
    const gate = w.requirePromote && !w.promoted && !w.startedAt ? " (waits for a promote)" : "";
    const nodes = w.nodes
      .map((n) => `${n.nodeId}=${enumName(RolloutNodeState, n.state)}${n.reason ? ` (${cut(n.reason, 60)})` : ""}`)
      .join(" ");
    lines.push({ key: `wave ${w.name}`, text: `  wave ${w.name.padEnd(width)}  ${done}/${w.nodes.length} done${gate}  ${nodes}` });
  }
  return lines;
}
