// The work-order state machine, apart from any backend: pending -> running (claim, a lease with
// a fencing token) -> success | failed (finish by the current claim), and running -> pending
// when the lease lapses. Each function checks that the transition is allowed and returns the new
// order, or throws the typed error the Store contract names. Both stores run them (order-steps.ts).
import { create } from "@bufbuild/protobuf";
import { copyMessage } from "../../common/message-copy.js";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  CancelRequestSchema,
  WorkOrderAttemptSchema,
  WorkOrderClaimSchema,
  WorkOrderResultSchema,
  WorkOrderSchema,
  WorkOrderStatus,
  type WorkOrder,
  type WorkOrderResult,
} from "../../gen/skipper/v1/work_order_pb.js";
import { forbidden, notClaimable } from "../base/errors.js";
import { redact } from "../../common/logging/redact.js";
import { isFinishedStatus } from "../../common/order-status.js";

/** Lowercase status names used in error details ("running", "success"...). */
export const SHORT_STATUS: Record<WorkOrderStatus, string> = {
  [WorkOrderStatus.UNSPECIFIED]: "unspecified",
  [WorkOrderStatus.PENDING]: "pending",
  [WorkOrderStatus.RUNNING]: "running",
  [WorkOrderStatus.SUCCESS]: "success",
  [WorkOrderStatus.FAILED]: "failed",
  [WorkOrderStatus.CANCELLED]: "cancelled",
  [WorkOrderStatus.RETRY_PENDING]: "retry_pending",
};

/** True once the order has a final status. */
export function isFinished(o: WorkOrder): boolean {
  return isFinishedStatus(o.status);
}

/** Default lease of a claim when the caller names none. */
export const DEFAULT_LEASE_MS = 30_000;

/**
 * The claimed copy of a pending order: a lease until now + leaseMs with the next fencing token,
 * recorded as an attempt. WORK_ORDER_NOT_CLAIMABLE otherwise.
 */
export function claimed(current: WorkOrder, nodeId: string, now: Date, leaseMs = DEFAULT_LEASE_MS): WorkOrder {
  if (current.status !== WorkOrderStatus.PENDING) {
    const status = SHORT_STATUS[current.status];
    throw notClaimable(`work order ${current.id} is ${status}, not pending`, { status, claimed_by: current.claim?.nodeId ?? "" });
  }
  if (expiredAt(current, now)) {
    throw notClaimable(
      `work order ${current.id} expired at ${timestampDate(current.expiresAt!).toISOString()} before any node claimed it`,
      { status: "expired" },
    );
  }
  const next = copyMessage(WorkOrderSchema, current);
  const token = current.fencingToken + 1n;
  next.status = WorkOrderStatus.RUNNING;
  next.fencingToken = token;
  next.claim = create(WorkOrderClaimSchema, {
    nodeId,
    claimedAt: timestampFromDate(now),
    leaseExpiresAt: timestampFromDate(new Date(now.getTime() + leaseMs)),
    fencingToken: token,
  });
  next.attempts.push(
    create(WorkOrderAttemptSchema, { nodeId, fencingToken: token, claimedAt: timestampFromDate(now), outcome: "running" }),
  );
  next.startedAt = timestampFromDate(now);
  // A pool order records the node that claimed it (the order's events and listings name it).
  if (next.target?.pool) next.target.nodeId = nodeId;
  return next;
}

// A pool order back to pending goes back to its pool: any eligible node may claim it next.
function backToPool(o: WorkOrder): void {
  if (o.target?.pool) o.target.nodeId = "";
}

/** Refuses a renewal or result that does not come from the current claim. */
function checkHolder(current: WorkOrder, nodeId: string, token: bigint | undefined): void {
  if (current.claim?.nodeId !== nodeId) {
    throw forbidden(`work order ${current.id} is claimed by another node`, { work_order_id: current.id });
  }
  if ((token === undefined || token === 0n) && current.claim.fencingToken > 1n) {
    // Only a first claim may leave its token out (no other holder can exist yet): after a lapsed
    // lease a tokenless call could be the stale holder's.
    throw notClaimable(
      `work order ${current.id} has been claimed ${current.claim.fencingToken} times: send the fencing_token of your claim`,
      {
        status: SHORT_STATUS[current.status],
        fencing_token: current.claim.fencingToken.toString(),
      },
    );
  }
  if (token !== undefined && token !== 0n && token !== current.claim.fencingToken) {
    throw notClaimable(
      `work order ${current.id}: fencing token ${token} is not the current claim's (${current.claim.fencingToken}); the lease lapsed and the order was claimed again`,
      {
        status: SHORT_STATUS[current.status],
        fencing_token: current.claim.fencingToken.toString(),
      },
    );
  }
}

/** The running order with its lease extended to now + leaseMs; only for the current claim. */
export function renewed(current: WorkOrder, nodeId: string, token: bigint, now: Date, leaseMs = DEFAULT_LEASE_MS): WorkOrder {
  if (current.status !== WorkOrderStatus.RUNNING) {
    const status = SHORT_STATUS[current.status];
    throw notClaimable(`work order ${current.id} is ${status}, not running: its lease cannot be renewed`, {
      status,
      fencing_token: current.fencingToken.toString(),
    });
  }
  checkHolder(current, nodeId, token);
  const next = copyMessage(WorkOrderSchema, current);
  next.claim!.leaseExpiresAt = timestampFromDate(new Date(now.getTime() + leaseMs));
  return next;
}

/** True when a running order's lease has lapsed at `now`. */
export function leaseLapsed(o: WorkOrder, now: Date): boolean {
  const until = o.claim?.leaseExpiresAt;
  return o.status === WorkOrderStatus.RUNNING && until !== undefined && timestampDate(until).getTime() <= now.getTime();
}

/** The pending copy of a running order whose lease lapsed (the claim stays as history). */
export function leaseExpired(current: WorkOrder, now: Date): WorkOrder {
  if (!leaseLapsed(current, now)) {
    throw notClaimable(`work order ${current.id} holds a live lease`, { status: SHORT_STATUS[current.status] });
  }
  const next = copyMessage(WorkOrderSchema, current);
  next.status = WorkOrderStatus.PENDING;
  endAttempt(next, now, "lease_expired");
  backToPool(next);
  return next;
}

/**
 * The pending copy of a running order whose claim (`nodeId`, `token`) its holder gave up before it
 * took the order: a session that pushed it ended before the agent acknowledged it. The attempt is
 * kept as "released"; the next claim gets the next token. WORK_ORDER_NOT_CLAIMABLE unless the
 * order is running under exactly that claim (one renewed, finished or claimed again since is left
 * alone).
 */
export function released(current: WorkOrder, nodeId: string, token: bigint, now: Date, leaseAsPushed?: Date): WorkOrder {
  if (current.status !== WorkOrderStatus.RUNNING || current.claim?.nodeId !== nodeId || current.claim.fencingToken !== token) {
    throw notClaimable(`work order ${current.id} is not running under the claim of node ${nodeId} with fencing token ${token}`, {
      status: SHORT_STATUS[current.status],
      fencing_token: current.fencingToken.toString(),
    });
  }
  // A renewal since the push (over any channel) means its agent took the order: it is the agent's.
  const lease = current.claim.leaseExpiresAt ? timestampDate(current.claim.leaseExpiresAt).getTime() : undefined;
  if (leaseAsPushed !== undefined && lease !== leaseAsPushed.getTime()) {
    throw notClaimable(`work order ${current.id} was renewed since it was pushed: its agent holds it`, {
      status: SHORT_STATUS[current.status],
      fencing_token: current.fencingToken.toString(),
    });
  }
  const next = copyMessage(WorkOrderSchema, current);
  next.status = WorkOrderStatus.PENDING;
  endAttempt(next, now, "released");
  backToPool(next);
  return next;
}

function endAttempt(o: WorkOrder, now: Date, outcome: string): void {
  const last = o.attempts[o.attempts.length - 1];
  if (last && last.outcome === "running") {
    last.outcome = outcome;
    last.endedAt = timestampFromDate(now);
  }
}

/**
 * The finished copy of a running order held by `nodeId`. Call only for unfinished orders (a
 * finished one is a duplicate report, answered with the stored order).
 */
export function finished(current: WorkOrder, nodeId: string, result: WorkOrderResult, now: Date, token?: bigint): WorkOrder {
  if (current.status !== WorkOrderStatus.RUNNING) {
    const lapsed = token !== undefined && token !== 0n && current.attempts.some((a) => a.fencingToken === token);
    const why = isFinished(current)
      ? `it has finished (${SHORT_STATUS[current.status]})`
      : lapsed
        ? `the claim with fencing token ${token} lapsed and it is ${SHORT_STATUS[current.status]} again`
        : "it has not been claimed";
    throw notClaimable(`work order ${current.id} is not running: ${why}`, { status: SHORT_STATUS[current.status], claimed_by: "" });
  }
  checkHolder(current, nodeId, token);
  const next = copyMessage(WorkOrderSchema, current);
  // An agent that stopped on an admin's request reports CANCELLED.
  const cancelled = current.cancelRequest !== undefined && result.code === "CANCELLED";
  next.result = copyMessage(WorkOrderResultSchema, result);
  endAttempt(next, now, "finished");
  if (
    !result.success &&
    !cancelled &&
    !current.cancelRequest &&
    result.retriable &&
    next.attempts.length < Math.max(1, current.maxAttempts)
  ) {
    // Another attempt later: back to the pending stage, claimable from next_attempt_at.
    next.status = WorkOrderStatus.RETRY_PENDING;
    next.nextAttemptAt = timestampFromDate(new Date(now.getTime() + retryBackoffMs(next.attempts.length)));
    return next;
  }
  next.status = result.success ? WorkOrderStatus.SUCCESS : cancelled ? WorkOrderStatus.CANCELLED : WorkOrderStatus.FAILED;
  next.finishedAt = timestampFromDate(now);
  return withoutSecrets(next);
}

/**
 * A finished order as it is kept: its payload (compose file, env, an action's env) without secret
 * values. Nothing runs a finished order again, and a rollback to its spec takes the secrets from
 * the current spec (reconcile/rollback-spec.ts), so the only copies of a secret are the resource
 * that holds it and the orders still to run.
 */
export function withoutSecrets(finishedOrder: WorkOrder): WorkOrder {
  return redact(finishedOrder);
}

/** Delay before attempt n+1 after n failed claims: 2 s doubling, capped at 60 s, with ±20% jitter. */
export function retryBackoffMs(attempts: number, random: () => number = Math.random): number {
  const base = Math.min(60_000, 2000 * 2 ** Math.max(0, attempts - 1));
  return Math.round(base * (0.8 + 0.4 * random()));
}

/** True when a retry_pending order may be claimed again at `now`. */
export function retryDue(o: WorkOrder, now: Date): boolean {
  return o.status === WorkOrderStatus.RETRY_PENDING && (!o.nextAttemptAt || timestampDate(o.nextAttemptAt).getTime() <= now.getTime());
}

/** The pending copy of a retry_pending order whose next attempt is due. */
export function retryReleased(current: WorkOrder, now: Date): WorkOrder {
  if (!retryDue(current, now)) {
    throw notClaimable(`work order ${current.id} is not waiting for a due retry`, { status: SHORT_STATUS[current.status] });
  }
  const next = copyMessage(WorkOrderSchema, current);
  next.status = WorkOrderStatus.PENDING;
  backToPool(next);
  return next;
}

/**
 * An admin's cancel: a pending order becomes CANCELLED; a running one records the request (its
 * agent stops and reports); a cancelled one is returned as it is; any other finished one is
 * WORK_ORDER_NOT_CLAIMABLE.
 */
export function cancelled(current: WorkOrder, reason: string, requestId: string, now: Date): WorkOrder {
  if (current.status === WorkOrderStatus.CANCELLED || (current.status === WorkOrderStatus.RUNNING && current.cancelRequest)) return current;
  if (
    current.status !== WorkOrderStatus.PENDING &&
    current.status !== WorkOrderStatus.RUNNING &&
    current.status !== WorkOrderStatus.RETRY_PENDING
  ) {
    throw notClaimable(`work order ${current.id} already finished (${SHORT_STATUS[current.status]}); there is nothing to cancel`, {
      status: SHORT_STATUS[current.status],
    });
  }
  const next = copyMessage(WorkOrderSchema, current);
  next.cancelRequest = create(CancelRequestSchema, { requestedAt: timestampFromDate(now), reason, requestId });
  if (current.status !== WorkOrderStatus.RUNNING) {
    next.status = WorkOrderStatus.CANCELLED;
    next.result = create(WorkOrderResultSchema, {
      success: false,
      code: "CANCELLED",
      message: reason || "cancelled before any node claimed it",
    });
    next.finishedAt = timestampFromDate(now);
    return withoutSecrets(next);
  }
  return next;
}

/** A result for an order that already finished: a duplicate from its holder, or a stale claim. */
export function checkDuplicateResult(current: WorkOrder, token?: bigint): void {
  // As for a running order: without a token, only an order claimed once can tell whose it is.
  const tokenless = token === undefined || token === 0n;
  if (current.claim && tokenless && current.claim.fencingToken > 1n) {
    throw notClaimable(
      `work order ${current.id} has finished after ${current.claim.fencingToken} claims: send the fencing_token of your claim`,
      {
        status: SHORT_STATUS[current.status],
        fencing_token: current.claim.fencingToken.toString(),
      },
    );
  }
  if (!tokenless && current.claim && token !== current.claim.fencingToken) {
    throw notClaimable(
      `work order ${current.id} was finished under another claim (fencing token ${current.claim.fencingToken}, not ${token})`,
      {
        status: SHORT_STATUS[current.status],
        fencing_token: current.claim.fencingToken.toString(),
      },
    );
  }
}

/** True when a pending order's expires_at has passed: it may no longer be claimed. */
export function expiredAt(o: WorkOrder, now: Date): boolean {
  return o.status === WorkOrderStatus.PENDING && o.expiresAt !== undefined && timestampDate(o.expiresAt) <= now;
}

/**
 * The ended copy of a pending order no node claimed: `status` CANCELLED when a newer one replaced
 * it (nothing ran, nothing failed), FAILED when it expired.
 */
export function superseded(
  current: WorkOrder,
  result: WorkOrderResult,
  now: Date,
  status: WorkOrderStatus.CANCELLED | WorkOrderStatus.FAILED,
): WorkOrder {
  if (current.status !== WorkOrderStatus.PENDING) {
    const status = SHORT_STATUS[current.status];
    throw notClaimable(`work order ${current.id} is ${status}, not pending`, { status, claimed_by: current.claim?.nodeId ?? "" });
  }
  const next = copyMessage(WorkOrderSchema, current);
  next.status = status;
  next.result = copyMessage(WorkOrderResultSchema, result);
  next.finishedAt = timestampFromDate(now);
  return withoutSecrets(next);
}

/**
 * How far an order has come, for choosing between two copies of it that a crash left behind:
 * finished beats everything; otherwise each claim counts, and an ended claim (lease expired)
 * beats the same claim still running.
 */
export function progressOf(o: WorkOrder): number {
  if (isFinished(o)) return Number.MAX_SAFE_INTEGER;
  const last = o.attempts[o.attempts.length - 1];
  if (o.attempts.length === 0) return o.status === WorkOrderStatus.RUNNING ? 2 : 0; // orders from before leases
  return o.attempts.length * 2 + (last && last.outcome !== "running" ? 1 : 0);
}

/** True when the claim with `token` already reported its result (a retried report of it). */
export function reportedBefore(current: WorkOrder, token?: bigint): boolean {
  return token !== undefined && token !== 0n && current.attempts.some((a) => a.fencingToken === token && a.outcome === "finished");
}
