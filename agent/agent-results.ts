// The results the agent gives an order itself, when no executor said how it went: a type this
// agent cannot run, an executor that threw, a lost lease, a passed timeout, a restart mid-run.
import { create } from "@bufbuild/protobuf";
import { WorkOrderResultSchema, type WorkOrderResult } from "../gen/skipper/v1/work_order_pb.js";
import { resultCause, retriableWith } from "../common/failure-cause.js";
import type { LeaseLoss } from "./lease-keeper.js";

/** The code of a result whose order's lease the agent lost (the controller expects to refuse it). */
export const LEASE_LOST = "LEASE_LOST";

/** A failed result with `code` and `message`, and no details. */
export function failure(code: string, message: string): WorkOrderResult {
  return create(WorkOrderResultSchema, { success: false, code, message, details: {} });
}

/** Why a lease was lost, in words. */
export function describeLoss(loss: LeaseLoss): string {
  return loss.kind === "refused"
    ? `renewal refused: ${loss.code}: ${loss.message}`
    : `no renewal granted within ${loss.leaseMs - loss.marginMs} ms of the last grant (lease ${loss.leaseMs} ms, margin ${loss.marginMs} ms)`;
}

/**
 * The result of a run stopped because its lease was lost (`stopped`: what the stopped executor
 * said). Retriable: nothing is wrong with the order, its holder gave it up.
 */
export function leaseLostResult(loss: LeaseLoss, stopped?: WorkOrderResult): WorkOrderResult {
  const after = stopped ? ` (${stopped.code}: ${stopped.message})` : "";
  return create(WorkOrderResultSchema, {
    success: false,
    retriable: true,
    code: LEASE_LOST,
    message: `the agent lost the order's lease (${describeLoss(loss)}) and stopped it${after}`,
    details: stopped?.details ?? {},
  });
}

/** The abort reason of an order stopped by its own timeout (an admin cancel is a string). */
export class OrderTimeout extends Error {
  constructor(ms: number) {
    super(`the order's timeout of ${ms} ms passed`);
    // Executors read it by name (they do not import the loop): exec_service's timed_out.
    this.name = "OrderTimeout";
  }
}

/** The result of a run its timeout stopped (`stopped`: what the stopped executor said); retriable. */
export function timedOutResult(reason: OrderTimeout, stopped: WorkOrderResult): WorkOrderResult {
  return create(WorkOrderResultSchema, {
    ...stopped,
    code: "TIMEOUT",
    retriable: true,
    message: `${reason.message}; stopped (${stopped.code}: ${stopped.message})`,
  });
}

/**
 * A failed result with its cause (result.cause, common/failure-cause.ts resultCause), and its
 * retry following it (retriableWith): one that fails the same way again is not retried, and a
 * Compose run that failed for one that may pass is.
 */
export function withCause(r: WorkOrderResult): WorkOrderResult {
  if (r.success || r.cause) return r;
  const cause = resultCause(r.code, r.message, r.details?.command?.stderr ?? "");
  return create(WorkOrderResultSchema, { ...r, cause, retriable: retriableWith(r.code, r.retriable, cause) });
}
