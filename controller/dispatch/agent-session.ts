// One agent's Session stream (NodeService.Session), the controller's side. Its states:
//
//   opened --hello (the caller's own node)--> welcomed --> pushing <--> waiting --> ended
//
// Welcomed, the session replaces any earlier session of its node (AgentSessions: that one gets a
// REPLACED notice and ends) and subscribes to the node's order feed. Pushing: while fewer than
// MAX_IN_FLIGHT pushed orders are in flight (waiting for their ack, or acknowledged and not yet
// ended), the node's next pending order is claimed for this session (order-lifecycle.ts
// claimNextOrder: a fencing token and a lease) and pushed; a feed notice of a pending order, or an
// order leaving the session's hands (its result answered, its lease lapsed), starts another round.
// An agent runs one order at a time, so an order is never claimed for it while it runs another:
// a claim's lease would tick away while the order waits its turn. The
// requests (session-requests.ts) are handled one at a time, in the order they came, and answered
// on the stream ahead of any terminal traffic (exec_open, exec_input: session-terminals.ts). A cancel the feed publishes for a running order of the node goes out as a
// cancel message. Ended (the client closed or went, a refusal, replaced, credential revoked):
// every order pushed and not acknowledged is released at once (running -> pending with the next
// claim's new token, `work_order_claim_released`) and rung on the feed for whoever asks next; an
// acknowledged order keeps its claim until its lease lapses.
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { randomUUID } from "node:crypto";
import { crashPoint } from "../../common/crash-points.js";
import {
  SessionNoticeKind,
  SessionResponseSchema,
  type SessionHello,
  type SessionRequest,
  type SessionResponse,
} from "../../gen/skipper/v1/node_service_pb.js";
import { WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import type { CallInfo } from "../base/context.js";
import { sessionOrderTraceOf } from "../base/context.js";
import { forbidden, invalid, isSkipperError, SkipperError, unauthorized } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { nodeCredentialHolds } from "../auth/authenticator.js";
import type { CredentialEnds } from "../auth/credential-ends.js";
import type { HeartbeatRecorder } from "../nodes/heartbeat.js";
import type { SessionEvent } from "../metrics/controller-metrics.js";
import { claimNextOrder, type LifecycleDeps } from "./order-lifecycle.js";
import { claimReleasedEvent } from "./order-outcome.js";
import { handleRequest, type PushedClaim, type RequestSession, type SessionMessage } from "./session-requests.js";
import { retunedHeartbeatMs, sessionHeartbeatMs } from "./session-terms.js";
import { SessionTerminals } from "./session-terminals.js";

/** Pushed orders a session has in flight at once (unacknowledged, or acknowledged and not ended). */
export const MAX_IN_FLIGHT = 1;
/** A session opening or ending on this controller (liveness-view.ts SessionChange, less the controller). */
export interface SessionOnController {
  nodeId: string;
  session: string;
  open: boolean;
  at: Date;
  /** The session's heartbeat interval. */
  intervalMs: number;
}

/** Why a session ended (the metrics' label: skipper_agent_session_events_total). */
type EndReason = "closed" | "replaced" | "revoked" | "refused" | "failed" | "stalled";

/** What a session needs. */
export interface SessionDeps extends LifecycleDeps {
  /** Counts what sessions do (controller-metrics.ts). */
  metrics?: { sessionEvent(event: SessionEvent): void };
  logger: Logger;
  credentialEnds: CredentialEnds;
  sessions: AgentSessions;
  /** Told of every keepalive (liveness is judged from every beat, in memory). */
  onHeartbeat?: (nodeId: string, at: Date, intervalMs: number) => void;
  /** Told when the session opens (welcomed) and when it ends. */
  onSession?: (change: SessionOnController) => void;
}

/** The live session of each node on this controller; a new one replaces the node's earlier one. */
export class AgentSessions {
  private readonly byNode = new Map<string, AgentSession>();

  /** Makes `session` its node's; the one it replaces, if any, is told and ends. */
  open(session: AgentSession): void {
    const before = this.byNode.get(session.nodeId);
    this.byNode.set(session.nodeId, session);
    before?.replacedBy(session.id);
  }

  /**
   * A session of a node opened on another controller at `at`: the node's session here, if it
   * opened before that, is replaced (an agent holds one connection, so this one is a leftover:
   * half-open, or cut and not yet noticed), and its unacknowledged pushes are released at once.
   */
  openedElsewhere(nodeId: string, sessionId: string, controller: string, at: Date): void {
    const here = this.byNode.get(nodeId);
    if (!here || here.openedAt > at.getTime()) return;
    here.replacedBy(`${sessionId} (on controller ${controller})`);
  }

  /** The node's open session on this controller, if any. */
  of(nodeId: string): AgentSession | undefined {
    return this.byNode.get(nodeId);
  }

  /** Forgets `session` (unless another replaced it already). */
  close(session: AgentSession): void {
    if (this.byNode.get(session.nodeId) === session) this.byNode.delete(session.nodeId);
  }

  /** Open sessions (all nodes). */
  get size(): number {
    return this.byNode.size;
  }
}

/** A session's state, for the handlers of its requests. */
export class AgentSession implements RequestSession {
  readonly id = randomUUID();
  nodeId = "";
  /** Orders pushed and not yet acknowledged: id -> the claim they were pushed with. */
  readonly unacked = new Map<string, PushedClaim>();
  /** Orders pushed, acknowledged and not yet ended: id -> fencing token. */
  readonly held = new Map<string, bigint>();
  /** The heartbeat interval of the last full report (keepalives count for liveness with it). */
  intervalMs = 0;
  /** When it was welcomed (ms since the epoch, the deps' clock). */
  openedAt = 0;
  /** Terminals relayed over this session (TerminalService.Attach). */
  readonly terminals = new SessionTerminals(
    () => this.nodeId,
    (kind) => this.send(kind),
  );
  private readonly outbox: SessionResponse[] = [];
  private readonly terminalLane: SessionResponse[] = []; // exec_open, exec_input: sent when nothing else waits
  private notify: (() => void) | undefined;
  private ended = false;
  private failure: SkipperError | undefined;
  private endReason: EndReason = "closed";
  private pumping: Promise<void> = Promise.resolve();
  private pumpQueued = false;
  private handling: Promise<void> = Promise.resolve();
  private closing: Promise<void> | undefined;
  private readonly cleanups: (() => void)[] = [];

  constructor(
    readonly deps: SessionDeps,
    readonly call: CallInfo,
    readonly heartbeats: HeartbeatRecorder,
  ) {}

  /** The session's messages to the agent, read from `requests`, until it ends (the router's path). */
  async *run(requests: AsyncIterable<SessionRequest>, signal: AbortSignal): AsyncGenerator<SessionResponse> {
    const it = requests[Symbol.asyncIterator]();
    const first = await it.next();
    if (first.done) return;
    const welcome = await this.begin(first.value);
    try {
      yield welcome;
      const abort = () => this.end();
      signal.addEventListener("abort", abort, { once: true });
      this.cleanups.push(() => signal.removeEventListener("abort", abort));
      void this.read(it, signal);
      for (;;) {
        const next = this.take();
        if (next) {
          yield next;
          continue;
        }
        if (this.ended) break;
        await new Promise<void>((resolve) => {
          this.notify = resolve;
        });
        this.notify = undefined;
      }
      if (this.failure) throw this.failure;
    } finally {
      await this.close();
    }
  }

  /**
   * Starts the session with the agent's first message, its hello: returns the welcome, or throws
   * the refusal (a first message that is not a hello; another node's hello), the session closed.
   */
  async begin(first: SessionRequest): Promise<SessionResponse> {
    if (first.kind.case !== "hello") throw invalid("a session starts with a hello", { field: "hello" });
    try {
      const welcome = this.welcome(first.kind.value);
      void this.watchCertificate().catch((e: unknown) => this.fail(e));
      this.pump();
      return welcome;
    } catch (e) {
      await this.close();
      throw e;
    }
  }

  /** Handles one request after the hello, after those before it; throws only what ends the session. */
  receive(req: SessionRequest): Promise<void> {
    if (this.ended) return Promise.resolve();
    this.handling = handleRequest(this, req);
    return this.handling;
  }

  /**
   * The agent's side of the stream ended: closed (no error), refused (a bad message, one over the
   * stream's byte budget or deadline: stream-budget.ts), or gone (`gone`: reset, disconnected),
   * which ends the session quietly.
   */
  inputEnded(error?: unknown, gone = false): void {
    if (error === undefined) {
      this.end();
      return;
    }
    // The router's read errors carry the refusal as their cause.
    const cause = (error as { cause?: unknown } | undefined)?.cause;
    const refusal = isSkipperError(error) ? error : isSkipperError(cause) ? cause : undefined;
    this.end(gone ? undefined : refusal);
  }

  /** The next message queued for the agent, if any. */
  take(): SessionResponse | undefined {
    return this.outbox.shift() ?? this.terminalLane.shift();
  }

  /** Called whenever a message is queued or the session ends (the lean route's writer). */
  onOutput(listener: () => void): void {
    this.notify = listener;
  }

  /** Whether the session ended, and with what refusal (sent to the agent as the stream's error). */
  get isEnded(): boolean {
    return this.ended;
  }

  get endFailure(): SkipperError | undefined {
    return this.failure;
  }

  /** Ends the session and releases what it held: the feed, and every order pushed and not acknowledged. */
  finish(): Promise<void> {
    return this.close();
  }

  /** Queues `kind` for the agent. */
  send(kind: SessionMessage): void {
    if (this.ended) return;
    (kind.case === "execOpen" || kind.case === "execInput" ? this.terminalLane : this.outbox).push(create(SessionResponseSchema, { kind }));
    this.notify?.();
  }

  /** Ends the session (with `failure`, sent to the agent as the stream's error); idempotent. */
  end(failure?: SkipperError, reason: EndReason = failure ? "refused" : "closed"): void {
    if (this.ended) return;
    this.failure = failure;
    this.endReason = reason;
    this.ended = true;
    this.notify?.();
  }

  /** Another session of the node took over: this one says so and ends. */
  replacedBy(sessionId: string): void {
    const message = `session ${sessionId} of node ${this.nodeId} replaced this one`;
    this.send({ case: "notice", value: { kind: SessionNoticeKind.REPLACED, message } });
    this.end(undefined, "replaced");
  }

  /**
   * Sends new terms (SessionTerms) when this session's heartbeat interval is outside half to twice
   * what the controller's fleet asks now: sessions welcomed while a fleet reconnected got short
   * intervals, and would keep the controller hearing several times 50 beats a second.
   */
  retune(): void {
    const next = retunedHeartbeatMs(this.intervalMs, this.deps.sessions.size);
    if (next === undefined) return;
    this.intervalMs = next;
    this.send({ case: "terms", value: { heartbeatIntervalMs: BigInt(next) } });
  }

  /** Claims and pushes the node's pending orders while the window has room (one round at a time). */
  pump(): void {
    if (this.pumpQueued || this.ended) return;
    this.pumpQueued = true;
    this.pumping = this.pumping
      .then(() => {
        this.pumpQueued = false;
        return this.fill();
      })
      .catch((e: unknown) => this.fail(e));
  }

  // The hello: the caller's own node, then the session is its node's and hears its feed.
  private welcome(hello: SessionHello): SessionResponse {
    const { principal } = this.call;
    if (principal.kind !== "node") {
      throw forbidden("a session is a node's own: open it with the node's token or client certificate");
    }
    const nodeId = checkId(hello.nodeId, "hello.node_id");
    if (nodeId !== principal.nodeId) {
      throw forbidden(`this credential belongs to node ${principal.nodeId}, not ${nodeId}`, { node_id: nodeId });
    }
    this.nodeId = nodeId;
    this.cleanups.push(this.deps.feed.subscribe(nodeId, (o) => this.noticed(o)));
    this.cleanups.push(this.deps.credentialEnds.watch(principal, () => void this.checkCredential()));
    this.deps.sessions.open(this);
    this.intervalMs = sessionHeartbeatMs(this.deps.sessions.size);
    const at = this.deps.now();
    this.openedAt = at.getTime();
    this.deps.onSession?.({ nodeId, session: this.id, open: true, at, intervalMs: this.intervalMs });
    this.deps.metrics?.sessionEvent("opened");
    this.call.logger.info(
      {
        action: "session_opened",
        result: "ok",
        node_id: nodeId,
        metadata: {
          session_id: this.id,
          agent_version: hello.agentVersion,
          journal_orders: hello.journalWorkOrderIds.length,
          heartbeat_interval_ms: this.intervalMs,
        },
      },
      "agent session opened",
    );
    return create(SessionResponseSchema, {
      kind: {
        case: "welcome",
        value: {
          sessionId: this.id,
          heartbeatIntervalMs: BigInt(this.intervalMs),
          leaseMs: BigInt(this.deps.leaseMs),
          maxInFlight: MAX_IN_FLIGHT,
          serverTime: timestampFromDate(this.deps.now()),
        },
      },
    });
  }

  // The agent's requests, one at a time, until the stream ends or fails.
  private async read(it: AsyncIterator<SessionRequest>, signal: AbortSignal): Promise<void> {
    try {
      for (;;) {
        const next = await it.next();
        if (next.done || this.ended) break;
        await this.receive(next.value);
      }
      this.end();
    } catch (e) {
      this.inputEnded(e, signal.aborted);
    }
  }

  // An order of the node became pending (claim it), or a running one is asked to stop (say so).
  private noticed(order: WorkOrder): void {
    // A held order that left this session's claim (its lease lapsed, it was taken or ended
    // elsewhere) frees its place in the window.
    if (this.lapsedHere(order)) return;
    const token = this.held.get(order.id);
    if (token !== undefined && (order.status !== WorkOrderStatus.RUNNING || order.claim?.fencingToken !== token)) {
      this.held.delete(order.id);
    }
    if (order.status === WorkOrderStatus.PENDING || (token !== undefined && !this.held.has(order.id))) this.pump();
    if (order.status === WorkOrderStatus.RUNNING && order.cancelRequest && order.claim?.nodeId === this.nodeId) {
      const value = { workOrderId: order.id, fencingToken: order.claim.fencingToken, reason: order.cancelRequest.reason };
      this.send({ case: "cancel", value });
    }
  }

  // A pushed order's lease lapsed (the sweep put it back): the agent neither acknowledged nor
  // renewed it for a whole lease over this session, so the session is stalled (a frozen process, a
  // half-open connection). Pushing it again here would only lapse again, an attempt each time:
  // the session ends instead, and a live agent opens a new one.
  private lapsedHere(order: WorkOrder): boolean {
    const token = this.unacked.get(order.id)?.token ?? this.held.get(order.id);
    if (token === undefined) return false;
    const attempt = order.attempts.find((a) => a.fencingToken === token);
    if (attempt?.outcome !== "lease_expired") return false;
    this.unacked.delete(order.id);
    this.held.delete(order.id);
    this.call.logger.warn(
      {
        action: "session_stalled",
        result: "ended",
        node_id: this.nodeId,
        work_order_id: order.id,
        metadata: { session_id: this.id, fencing_token: token.toString() },
      },
      "the lease of an order pushed on this session lapsed: the agent stopped answering; ending the session",
    );
    this.end(undefined, "stalled");
    return true;
  }

  private async fill(): Promise<void> {
    while (!this.ended && this.unacked.size + this.held.size < MAX_IN_FLIGHT) {
      const order = await claimNextOrder(this.deps, this.nodeId, (o) => sessionOrderTraceOf(this.call, o), this.call.logger);
      if (!order) return;
      this.unacked.set(order.id, { token: order.claim?.fencingToken ?? 0n, leaseExpiresAt: order.claim?.leaseExpiresAt });
      crashPoint("session.after-push-claim");
      // Ended while claiming: close() releases it with the others.
      this.send({ case: "order", value: { workOrder: order } });
      this.deps.metrics?.sessionEvent("pushed");
    }
  }

  // A session opened with a client certificate is told CERTIFICATE_RENEWAL_DUE once three
  // quarters of the certificate's lifetime have passed and the node holds no newer one: skippy
  // renews at two thirds on its own, so this reaches one whose renewal failed or whose clock is
  // wrong, while the certificate still works.
  private async watchCertificate(): Promise<void> {
    const { principal } = this.call;
    if (principal.kind !== "node" || principal.certificateSerial === undefined) return;
    const cert = (await this.deps.store.getLiveNodeCredential(this.nodeId))?.certificates?.find(
      (c) => c.serial === principal.certificateSerial,
    );
    if (!cert?.lifetimeMs) return;
    const wait = cert.notAfter.getTime() - cert.lifetimeMs / 4 - this.deps.now().getTime();
    // Sessions outlive a timer's range (24.8 days) rarely; the next session looks again.
    if (wait > 2 ** 31 - 1 || this.ended) return;
    const tell = async () => {
      const held = (await this.deps.store.getLiveNodeCredential(this.nodeId))?.certificates ?? [];
      if (held.some((c) => c.notAfter > cert.notAfter)) return; // renewed already
      const message = `this node's client certificate (serial ${cert.serial}) expires at ${cert.notAfter.toISOString()}: renew it now`;
      this.send({ case: "notice", value: { kind: SessionNoticeKind.CERTIFICATE_RENEWAL_DUE, message } });
      this.call.logger.info(
        { action: "session_notice", result: "CERTIFICATE_RENEWAL_DUE", node_id: this.nodeId, metadata: { session_id: this.id } },
        "told the agent its certificate is due for renewal",
      );
    };
    const timer = setTimeout(() => void tell().catch((e: unknown) => this.fail(e)), Math.max(0, wait));
    timer.unref();
    this.cleanups.push(() => clearTimeout(timer));
  }

  private async checkCredential(): Promise<void> {
    if (await nodeCredentialHolds(this.deps.store, this.call.principal, this.deps.now())) return;
    const message = "this node's credential has been revoked";
    this.send({ case: "notice", value: { kind: SessionNoticeKind.CREDENTIAL_REVOKED, message } });
    this.end(unauthorized(message), "revoked");
  }

  private fail(e: unknown): void {
    this.call.logger.error({ action: "session", result: "INTERNAL_ERROR", node_id: this.nodeId, err: e }, "agent session failed");
    this.end(isSkipperError(e) ? e : new SkipperError("INTERNAL_ERROR", "the session failed; see the controller's log"), "failed");
  }

  // Stops hearing the feed, lets the request and the claim in flight finish, then releases every
  // order pushed and not acknowledged.
  private close(): Promise<void> {
    this.closing ??= this.closeOnce();
    return this.closing;
  }

  private async closeOnce(): Promise<void> {
    this.end();
    this.deps.metrics?.sessionEvent(`ended_${this.endReason}`);
    for (const c of this.cleanups.splice(0)) c();
    this.deps.sessions.close(this);
    this.terminals.sessionEnded();
    if (this.nodeId !== "") {
      this.deps.onSession?.({ nodeId: this.nodeId, session: this.id, open: false, at: this.deps.now(), intervalMs: this.intervalMs });
    }
    await this.handling.catch(() => undefined);
    await this.pumping;
    for (const [id, pushed] of this.unacked) await this.release(id, pushed);
    this.unacked.clear();
  }

  // Refused (and so left alone) when the claim is no longer the one pushed: renewed since (over
  // any channel, through any controller: the agent took it), finished, or taken by another claim.
  private async release(id: string, pushed: PushedClaim): Promise<void> {
    const token = pushed.token;
    const asPushed = pushed.leaseExpiresAt ? timestampDate(pushed.leaseExpiresAt) : undefined;
    try {
      const before = await this.deps.store.getWorkOrder(id);
      const back = await this.deps.store.releaseWorkOrderClaim(
        id,
        this.nodeId,
        token,
        this.deps.now(),
        (after) => (before ? [claimReleasedEvent(before, after, sessionOrderTraceOf(this.call, before), this.id)] : []),
        asPushed,
      );
      this.deps.feed.publish(back);
      this.deps.metrics?.sessionEvent("released");
      this.deps.triggers.orderRequeued(back);
      const leaseUntil = before?.claim?.leaseExpiresAt ? timestampDate(before.claim.leaseExpiresAt).toISOString() : "";
      this.call.logger.info(
        {
          action: "work_order_claim_released",
          result: "pending",
          node_id: this.nodeId,
          work_order_id: id,
          metadata: { fencing_token: token.toString(), session_id: this.id, lease_was_until: leaseUntil },
        },
        "session ended before the agent acknowledged the order; back to pending",
      );
    } catch (e) {
      // Renewed, finished or taken since: its claim is no longer the one this session pushed.
      if (!(isSkipperError(e) && (e.code === "WORK_ORDER_NOT_CLAIMABLE" || e.code === "RESOURCE_NOT_FOUND"))) throw e;
      this.deps.metrics?.sessionEvent("kept");
    }
  }
}
