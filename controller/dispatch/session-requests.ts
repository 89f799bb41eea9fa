// What an agent's Session (agent-session.ts) does with each of its requests, after the hello:
// heartbeats go to the heartbeat recorder (a keepalive only counts for liveness), acks take the
// pushed order off the unacknowledged list, renewals and results go through the order's lifecycle
// (order-lifecycle.ts renewLease, finishOrder) with their fencing token, state reports through
// nodes/state-reports.ts. Each ack, renewal and result is answered; a heartbeat or state report
// only when refused. A refusal (a SkipperError: a stale token, another node's order, a malformed
// result) is an answer and the stream stays open; a second hello ends the session.
import type { WorkOrderResult } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { NodeTransport } from "../../gen/skipper/v1/resource_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import {
  SessionAnswerSubject,
  type SessionResponseSchema,
  type HeartbeatRequest,
  type ReportResourceStateRequest,
  type SessionAck,
  type SessionAnswer,
  type SessionLeaseRenewal,
  type SessionRequest,
  type SessionResult,
} from "../../gen/skipper/v1/node_service_pb.js";
import { crashPoint } from "../../common/crash-points.js";
import { sessionOrderTraceOf, traceOf, type CallInfo } from "../base/context.js";
import { forbidden, invalid, isSkipperError, notClaimable, notFound } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { recordReports } from "../nodes/state-reports.js";
import { leaseLapsed } from "../domain/work-order-transitions.js";
import type { HeartbeatRecorder } from "../nodes/heartbeat.js";
import { finishOrder, renewLease, type LifecycleDeps } from "./order-lifecycle.js";
import type { SessionTerminals } from "./session-terminals.js";

/** One message to the agent, as its fields (create(SessionResponseSchema, { kind })). */
export type SessionMessage = NonNullable<MessageInitShape<typeof SessionResponseSchema>["kind"]>;

/** The session a request belongs to, as its handlers see it (agent-session.ts AgentSession). */
/** The claim a session pushed an order with: its fencing token and the lease it carried. */
export interface PushedClaim {
  token: bigint;
  leaseExpiresAt: Timestamp | undefined;
}

export interface RequestSession {
  readonly deps: LifecycleDeps & { onHeartbeat?: (nodeId: string, at: Date, intervalMs: number) => void };
  readonly call: CallInfo;
  readonly heartbeats: HeartbeatRecorder;
  readonly nodeId: string;
  /** Orders pushed and not yet acknowledged: id -> the claim they were pushed with. */
  readonly unacked: Map<string, PushedClaim>;
  /** Orders pushed, acknowledged and not yet ended: id -> fencing token. */
  readonly held: Map<string, bigint>;
  /** The heartbeat interval of the last full report. */
  intervalMs: number;
  send(kind: SessionMessage): void;
  end(failure?: ReturnType<typeof invalid>): void;
  /** Pushes the node's next pending orders while the window has room. */
  pump(): void;
  /** Terminals relayed over the session: the agent's exec_output goes to them. */
  readonly terminals: Pick<SessionTerminals, "output">;
  /** Sends new terms when the session's heartbeat interval is far from what its controller's fleet asks now. */
  retune(): void;
}

type Answer = Omit<SessionAnswer, "$typeName" | "$unknown" | "subject">;

/** Handles one request of `session`; throws only what ends the session. */
export async function handleRequest(session: RequestSession, req: SessionRequest): Promise<void> {
  const { kind } = req;
  switch (kind.case) {
    case "hello":
      session.end(invalid("a session has one hello, its first message", { field: "hello" }));
      return;
    case "heartbeat":
      await answered(session, SessionAnswerSubject.HEARTBEAT, "", 0n, () => heartbeat(session, kind.value.report), false);
      return;
    case "ack": {
      const { workOrderId, fencingToken } = kind.value;
      await answered(session, SessionAnswerSubject.ACK, workOrderId, fencingToken, () => ack(session, kind.value));
      return;
    }
    case "leaseRenewal": {
      const { workOrderId, fencingToken } = kind.value;
      await answered(session, SessionAnswerSubject.LEASE_RENEWAL, workOrderId, fencingToken, () => renew(session, kind.value));
      return;
    }
    case "result": {
      const { workOrderId, fencingToken } = kind.value;
      const a = await answered(session, SessionAnswerSubject.RESULT, workOrderId, fencingToken, () => result(session, kind.value));
      // Recorded, or refused because the claim is over (a malformed result leaves it the agent's).
      if (a.accepted || a.code === "WORK_ORDER_NOT_CLAIMABLE") ended(session, workOrderId, fencingToken);
      return;
    }
    case "execOutput":
      session.terminals.output(kind.value);
      return;
    case "stateReport":
      await answered(session, SessionAnswerSubject.STATE_REPORT, kind.value.workOrderId, 0n, () => stateReport(session, kind.value), false);
      return;
    default:
      // An empty message (or a kind newer than this controller): nothing to do.
      return;
  }
}

// Runs `step` and answers with what it returns, or with the refusal it threw; `always`: answer an
// accepted step too (acks, renewals, results), not only a refusal (heartbeats, state reports).
async function answered(
  session: RequestSession,
  subject: SessionAnswerSubject,
  workOrderId: string,
  fencingToken: bigint,
  step: () => Promise<Partial<Answer> | undefined>,
  always = true,
): Promise<Partial<Answer>> {
  let answer: Partial<Answer>;
  try {
    answer = { accepted: true, ...(await step()) };
  } catch (e) {
    if (!isSkipperError(e)) throw e;
    answer = { accepted: false, code: e.code, message: e.message };
    session.call.logger.warn(
      {
        action: `session_${SessionAnswerSubject[subject].toLowerCase()}`,
        result: e.code,
        node_id: session.nodeId,
        work_order_id: workOrderId || undefined,
        metadata: { message: e.message, fencing_token: fencingToken.toString() },
      },
      "session request refused",
    );
  }
  if (!answer.accepted || always) session.send({ case: "answer", value: { subject, workOrderId, fencingToken, ...answer } });
  return answer;
}

async function heartbeat(session: RequestSession, report: HeartbeatRequest | undefined): Promise<undefined> {
  const { deps, nodeId } = session;
  if (!report) {
    // A keepalive writes nothing: liveness hears it at the interval the last full report gave.
    if (session.intervalMs > 0) deps.onHeartbeat?.(nodeId, deps.now(), session.intervalMs);
    session.retune();
    return undefined;
  }
  if (report.nodeId !== "" && report.nodeId !== nodeId) {
    throw forbidden(`this session is node ${nodeId}'s, not ${report.nodeId}'s`, { field: "heartbeat.report.node_id" });
  }
  await session.heartbeats.record(nodeId, { ...report, nodeId }, traceOf(session.call), NodeTransport.SESSION);
  if (report.heartbeatIntervalMs > 0n) session.intervalMs = Number(report.heartbeatIntervalMs);
  session.retune();
  return undefined;
}

// The agent took a pushed order: the claim is its own from now on (released no more when the
// session ends). A repeated ack of a claim that still holds is accepted again. An ack that comes
// after the lease lapsed (the sweep has not put the order back yet) renews it first, or is refused
// if the order was taken meanwhile: an accepted ack always leaves a live lease.
async function ack(session: RequestSession, req: SessionAck): Promise<Partial<Answer>> {
  const order = await nodeOrder(session, req.workOrderId, "ack.work_order_id");
  const claim = order.claim;
  if (order.status !== WorkOrderStatus.RUNNING || claim?.nodeId !== session.nodeId || claim.fencingToken !== req.fencingToken) {
    throw notClaimable(`work order ${order.id} is not running under fencing token ${req.fencingToken} of this node`, {
      status: WorkOrderStatus[order.status]?.toLowerCase() ?? "",
      fencing_token: order.fencingToken.toString(),
    });
  }
  if (leaseLapsed(order, session.deps.now())) await renewLease(session.deps, order, session.nodeId, req.fencingToken);
  taken(session, order.id, req.fencingToken);
  crashPoint("session.after-ack");
  return {};
}

async function renew(session: RequestSession, req: SessionLeaseRenewal): Promise<Partial<Answer>> {
  const order = await nodeOrder(session, req.workOrderId, "lease_renewal.work_order_id");
  if (req.fencingToken <= 0n) throw invalid("fencing_token is required", { field: "lease_renewal.fencing_token" });
  const renewed = await renewLease(session.deps, order, session.nodeId, req.fencingToken);
  taken(session, order.id, req.fencingToken);
  return { workOrder: renewed };
}

async function result(session: RequestSession, req: SessionResult): Promise<Partial<Answer>> {
  const order = await nodeOrder(session, req.workOrderId, "result.work_order_id");
  const reported = checkResult(req.result);
  if (req.fencingToken <= 0n) throw invalid("fencing_token is required", { field: "result.fencing_token" });
  const { call, deps, nodeId } = session;
  const outcome = await finishOrder(deps, order, nodeId, reported, req.fencingToken, sessionOrderTraceOf(call, order), call.logger);
  crashPoint("session.after-result");
  taken(session, order.id, req.fencingToken);
  return { duplicate: outcome.duplicate, workOrder: outcome.workOrder };
}

async function stateReport(session: RequestSession, req: ReportResourceStateRequest): Promise<undefined> {
  const { nodeId } = session;
  if (req.nodeId !== "" && req.nodeId !== nodeId) {
    throw forbidden(`this session is node ${nodeId}'s, not ${req.nodeId}'s`, { field: "state_report.node_id" });
  }
  const order = req.workOrderId === "" ? undefined : await nodeOrder(session, req.workOrderId, "state_report.work_order_id");
  await recordReports(session.deps, nodeId, order, req.reports, traceOf(session.call));
  return undefined;
}

// A pushed order acknowledged (by an ack, or by the renewal or result that implies one): off the
// unacknowledged list, held until it ends.
function taken(session: RequestSession, id: string, token: bigint): void {
  if (session.unacked.get(id)?.token !== token) return;
  session.unacked.delete(id);
  session.held.set(id, token);
}

// A pushed order's result was answered: the window has room for the next push.
function ended(session: RequestSession, id: string, token: bigint): void {
  const held = session.held.get(id) === token;
  const unacked = session.unacked.get(id)?.token === token;
  if (!held && !unacked) return;
  session.held.delete(id);
  session.unacked.delete(id);
  session.pump();
}

// The order `id`, which must be the session node's.
async function nodeOrder(session: RequestSession, id: string, field: string): Promise<WorkOrder> {
  const order = await session.deps.store.getWorkOrder(checkId(id, field));
  if (!order) throw notFound("work_order", id);
  if (order.target?.nodeId !== session.nodeId) throw forbidden(`work order ${id} belongs to another node`, { work_order_id: id });
  return order;
}

function checkResult(r: WorkOrderResult | undefined): WorkOrderResult {
  if (!r) throw invalid("result is required", { field: "result.result" });
  if (!/^[A-Z][A-Z0-9_]{0,63}$/.test(r.code)) {
    throw invalid("result.code must be an UPPER_SNAKE_CASE code such as APPLY_OK", { field: "result.result.code" });
  }
  return r;
}
