// One pass of one environment (the promotion loop's unit of work): read its world
// (environment-world.ts), plan (pure: delivery/plan-environment.ts), then act — queue the
// verification orders the plan runs (fixed ids: a retry finds the order it made), write the status
// and its events in one store write (only when the status it was planned from is still the stored
// one), and wake the environment's tenants when what they resolve to changed. A crash between any
// two steps is safe: the next pass plans again from what is stored, and each step is idempotent.
import { create } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { v4 as uuidv4 } from "uuid";
import { crashPoint } from "../../common/crash-points.js";
import type { Logger } from "../../common/logging/logger.js";
import type { Verification } from "../../gen/skipper/v1/delivery_pb.js";
import { WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { CreateWorkOrderRequestSchema } from "../../gen/skipper/v1/work_order_service_pb.js";
import type { Trace } from "../base/context.js";
import type { EnvironmentRecords } from "../delivery/environment-records.js";
import { planEnvironment } from "../delivery/plan-environment.js";
import type { EnvAction, EnvDesired, EnvObserved, OrderView, TenantView } from "../delivery/plan-types.js";
import { newestFirst } from "../delivery/version-order.js";
import { sameStatus } from "../delivery/status-copy.js";
import { queueControllerOrder, type QueueDeps } from "../dispatch/queue-order.js";
import { readEnvironmentWorld, type EnvironmentWorld } from "./environment-world.js";
import type { EnvironmentPassResult } from "./promotion-loop.js";

export interface EnvironmentPassDeps {
  logger: Logger;
  now: () => Date;
  records: EnvironmentRecords;
  /** What queueing a verification order needs (its store is the one read). */
  orders: QueueDeps;
  /** Wakes the reconcile passes of these tenants: what they resolve to changed. */
  wakeTenants: (tenantIds: string[], trace: Trace) => void;
  /** Told when the status was written (environments downstream read it). */
  written?: (environmentId: string) => void;
  /** Told of each action the plan took (metrics). */
  acted?: (action: EnvAction["type"]) => void;
  /** Told how many releases wait to enter the environment after the pass (metrics). */
  waiting?: (environmentId: string, n: number) => void;
}

/** Runs one pass of environment `id`; answers when to look again. */
export async function runEnvironmentPass(deps: EnvironmentPassDeps, id: string, given?: Trace): Promise<EnvironmentPassResult> {
  const world = await readEnvironmentWorld(deps.orders.store, id);
  if (!world) return {};
  const [desired, observed] = planInput(world);
  const plan = planEnvironment(desired, observed, deps.now().getTime());
  deps.waiting?.(id, plan.status.candidates.length);
  // Nothing to do and nothing new to say: no write, and nobody downstream is told.
  if (plan.actions.length === 0 && sameStatus(world.status, plan.status)) return { wakeAt: plan.wakeAt };
  const trace = given ?? { requestId: uuidv4(), correlationId: uuidv4() };
  const runs = plan.actions.filter((a) => a.type === "run-verification");
  for (const a of runs) await queueVerification(deps, world, a, trace);
  if (runs.length > 0) crashPoint("promotion.after-verification-order");
  const events = plan.actions.flatMap((a) => (a.type === "event" ? [a.event] : []));
  const before = world.status;
  await deps.records.save(id, before, plan.status, events, trace);
  for (const a of plan.actions) deps.acted?.(a.type);
  if (plan.actions.some((a) => a.type === "promote" || a.type === "demote")) {
    crashPoint("promotion.after-promote");
    deps.wakeTenants(
      world.tenants.map((t) => t.id),
      trace,
    );
  }
  deps.written?.(id);
  for (const a of plan.actions) {
    if (a.type === "event") continue;
    deps.logger.info(
      {
        action: `promotion_${a.type.replaceAll("-", "_")}`,
        result: "ok",
        request_id: trace.requestId,
        correlation_id: trace.correlationId,
        metadata: { environment_id: id, ...describe(a) },
      },
      `environment ${id}: ${a.type}`,
    );
  }
  return { wakeAt: plan.wakeAt };
}

/** The planner's inputs from what was read. */
export function planInput(w: EnvironmentWorld): [EnvDesired, EnvObserved] {
  const inFlight = w.status.inFlight?.release?.id;
  const tenants: TenantView[] = w.tenants.map((t) => ({
    id: t.id,
    release: t.release,
    rollout: t.rollout && {
      id: t.rollout.id,
      status: t.rollout.status,
      message: t.rollout.message,
      aborted: t.rollout.aborted,
      createdAtMs: t.rollout.createdAt ? timestampMs(t.rollout.createdAt) : undefined,
    },
    failed: t.failed,
  }));
  const orders = new Map<string, OrderView>(
    [...w.orders.values()].map((o) => [
      o.id,
      {
        id: o.id,
        status: o.status,
        resultCode: o.result?.code ?? "",
        message: o.result?.message ?? "",
        createdAtMs: o.createdAt ? timestampMs(o.createdAt) : 0,
        finishedAtMs: o.finishedAt ? timestampMs(o.finishedAt) : undefined,
      },
    ]),
  );
  // The nodes that may run a verification: online, converged, of a tenant whose spec carries the release in flight.
  const nodesRunning = new Map(
    w.tenants.map((t) => [t.id, t.release?.releaseId === inFlight && t.release?.convergedSince ? t.convergedNodes : []]),
  );
  return [
    { env: { id: w.id, spec: w.spec }, delivery: w.delivery, artifacts: w.artifacts },
    {
      status: w.status,
      versions: new Map([...w.versions].map(([a, vs]) => [a, newestFirst(vs)])),
      upstream: w.upstream,
      tenants,
      freezes: w.freezes,
      verificationOrders: orders,
      nodesRunning,
    },
  ];
}

// Queues one verification's order: a HEALTH_CHECK of its probe, or an EXECUTE_COMMAND of its
// command, on the node the plan chose, as the controller, under the id the plan fixed.
async function queueVerification(
  deps: EnvironmentPassDeps,
  w: EnvironmentWorld,
  a: Extract<EnvAction, { type: "run-verification" }>,
  trace: Trace,
): Promise<WorkOrder | undefined> {
  const v: Verification | undefined = w.spec.verifications.find((x) => x.name === a.name);
  if (!v?.kind.case) return undefined;
  const probe = v.kind.case === "probe";
  const req = create(CreateWorkOrderRequestSchema, {
    type: probe ? WorkOrderType.HEALTH_CHECK : WorkOrderType.EXECUTE_COMMAND,
    // An EXECUTE_COMMAND order is the node's alone (ad-hoc-order.ts refuses a tenant on it): the
    // plan chose a node of the verification's tenant, and the order's id names the environment.
    target: probe ? { nodeId: a.nodeId, tenantId: a.tenantId } : { nodeId: a.nodeId },
    action: {
      kind:
        v.kind.case === "probe"
          ? { case: "healthCheck", value: { probes: [v.kind.value] } }
          : { case: "executeCommand", value: { command: v.kind.value } },
    },
  });
  return queueControllerOrder(deps.orders, req, trace, a.orderId);
}

function describe(a: EnvAction): Record<string, string> {
  switch (a.type) {
    case "promote":
      return { release_id: a.release.id, by: a.by.actor };
    case "demote":
      return { release_id: a.to.id, because: a.because };
    case "run-verification":
      return { verification: a.name, node_id: a.nodeId, work_order_id: a.orderId };
    case "end-promotion":
      return { outcome: String(a.outcome), reason: a.reason };
    case "hold":
      return { by: a.by.actor };
    default:
      return {};
  }
}
