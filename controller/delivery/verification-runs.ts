// The verifications of a release in VERIFYING: each runs one order at a time, at its next_run_at,
// on a node of its tenant that runs the release converged. An order's id names the environment,
// the release, the verification and the run number, so queuing it again returns the stored order
// and its result is counted once: `runs` says how many were counted, and the order in flight is
// always run `runs + 1`.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import {
  ConstraintPhase,
  type Promotion,
  type Verification,
  type VerificationState,
  VerificationStateSchema,
} from "../../gen/skipper/v1/delivery_pb.js";
import { WorkOrderStatus } from "../../gen/skipper/v1/work_order_pb.js";
import type { PlanOut } from "./plan-out.js";
import type { EnvDesired, EnvObserved, OrderView } from "./plan-types.js";
import { releaseShort } from "./release-id.js";
import { intervalOf, maxFailuresOf, requiredOf } from "./verification-spec.js";

/** The deterministic id of run `n` of verification `name` of `releaseId` in `envId`. */
export function verificationOrderId(envId: string, releaseId: string, name: string, n: number): string {
  return `vrf-${envId}-${releaseShort(releaseId)}-${name}-${n}`;
}

const ENDED = new Set([WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED]);

/** Counts the ended order of run `runs + 1`, once. */
function count(s: VerificationState, o: OrderView, v: Verification, runningSince: number, out: PlanOut): void {
  s.runs += 1;
  const line = `${o.resultCode || WorkOrderStatus[o.status]}${o.message ? `: ${o.message}` : ""}`;
  if (o.createdAtMs < runningSince) {
    s.lastResult = `not counted (queued before the tenants last converged): ${line}`;
    return;
  }
  s.lastResult = line;
  if (o.status === WorkOrderStatus.CANCELLED) return;
  if (o.status === WorkOrderStatus.SUCCESS) s.passes += 1;
  else s.failures += 1;
  s.nextRunAt = timestampFromMs((o.finishedAtMs ?? out.now) + intervalOf(v));
}

/** Where run `n` goes: the verification's tenant (default: the first by id) and its first node running the release. */
function placeOf(v: Verification, d: EnvDesired, o: EnvObserved): { tenantId: string; nodeId?: string } {
  const tenantId = v.tenantId || o.tenants.reduce((a, t) => (a === "" || t.id < a ? t.id : a), "") || d.env.spec.tenantIds[0] || "";
  return { tenantId, nodeId: o.nodesRunning.get(tenantId)?.[0] };
}

/**
 * Advances every verification of the promotion in VERIFYING by one step (count, decide, run).
 * Returns what the promotion waits for, or "" when every verification has a phase.
 */
export function advanceVerifications(f: Promotion, d: EnvDesired, o: EnvObserved, out: PlanOut): string {
  const rel = f.release!;
  const since = f.runningSince ? timestampMs(f.runningSince) : out.now;
  const waits: string[] = [];
  for (const v of d.env.spec.verifications) {
    let s = f.verifications.find((x) => x.name === v.name);
    if (!s) {
      s = create(VerificationStateSchema, { name: v.name, phase: ConstraintPhase.PENDING });
      f.verifications.push(s);
    }
    if (s.phase !== ConstraintPhase.PENDING) continue;
    const runId = verificationOrderId(d.env.id, rel.id, v.name, s.runs + 1);
    const order = s.workOrderId === runId ? o.verificationOrders.get(runId) : undefined;
    if (order && ENDED.has(order.status)) count(s, order, v, since, out);
    if (s.passes >= requiredOf(v) || s.failures >= maxFailuresOf(v)) {
      const ok = s.passes >= requiredOf(v);
      s.phase = ok ? ConstraintPhase.PASSED : ConstraintPhase.FAILED;
      out.event(ok ? "delivery_verification_passed" : "delivery_verification_failed", {
        release_id: rel.id,
        verification: v.name,
        passes: String(s.passes),
        failures: String(s.failures),
        last_result: s.lastResult,
      });
      continue;
    }
    const progress = `${v.name} ${s.passes}/${requiredOf(v)}`;
    const inFlight = s.workOrderId === verificationOrderId(d.env.id, rel.id, v.name, s.runs + 1);
    if (inFlight && order) {
      waits.push(`${progress}, order ${order.id} in flight`);
      continue;
    }
    const next = s.nextRunAt ? timestampMs(s.nextRunAt) : 0;
    if (next > out.now) {
      out.wake(next);
      waits.push(`${progress}, next run at ${new Date(next).toISOString()}`);
      continue;
    }
    const place = placeOf(v, d, o);
    if (!place.nodeId) {
      waits.push(`${progress}, waits for an online node of ${place.tenantId || "a tenant"} running it`);
      continue;
    }
    const orderId = verificationOrderId(d.env.id, rel.id, v.name, s.runs + 1);
    s.workOrderId = orderId;
    out.act({ type: "run-verification", name: v.name, tenantId: place.tenantId, nodeId: place.nodeId, orderId });
    waits.push(`${progress}, order ${orderId} in flight`);
  }
  return waits.join("; ");
}
