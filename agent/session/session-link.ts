// One open Session stream (NodeService.Session) as the agent holds it: what it sends is queued
// and written in order, what it receives is read by one loop (messages()), which hands each
// answer to the request waiting for it and yields everything else (orders, cancels, notices).
// Two lanes go out: control (hello, heartbeats, acks, renewals, results, state reports) and
// terminal output (exec_output); a waiting control message always goes first, so a terminal that
// floods never holds a lease renewal back (each terminal's output is itself held to a window the
// controller acknowledges: terminals.ts). Answers are matched by subject, order id and fencing
// token; answers of one subject come in the order of its requests, so the waiters of one key form
// a queue. When the stream ends, every request still waiting is rejected with UNAVAILABLE (the
// caller retries: on the next session or unary), and a refused answer rejects with the Connect
// code the unary call would have carried.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import {
  SessionAnswerSubject,
  type NodeService,
  type SessionAnswer,
  type SessionHello,
  type SessionRequestSchema,
  type SessionResponse,
  type SessionWelcome,
} from "../../gen/skipper/v1/node_service_pb.js";
import type { WorkOrderResult } from "../../gen/skipper/v1/work_order_pb.js";
import type { Logger } from "pino";
import { CONNECT_CODE, type ErrorCode } from "../../common/error-codes.js";

type RequestKind = MessageInitShape<typeof SessionRequestSchema>["kind"];

/** A refused answer as the error the unary call would have thrown. */
export function refusalError(a: SessionAnswer): ConnectError {
  return new ConnectError(a.message || a.code, CONNECT_CODE[a.code as ErrorCode] ?? Code.Unknown);
}

interface Waiter {
  resolve: (a: SessionAnswer) => void;
  reject: (e: unknown) => void;
}

export class SessionLink {
  /** The controller's welcome, once it came. */
  welcome: SessionWelcome | undefined;
  private ended = false;
  /** Control messages, sent before any terminal output. */
  private readonly outbox: RequestKind[] = [];
  /** Terminal output (exec_output), sent when no control message waits. */
  private readonly terminalLane: RequestKind[] = [];
  private wakeSender: (() => void) | undefined;
  private readonly waiting = new Map<string, Waiter[]>();
  private readonly aborter = new AbortController();

  constructor(
    private readonly nodes: Client<typeof NodeService>,
    private readonly hello: Omit<SessionHello, "$typeName" | "$unknown">,
    private readonly log: Logger,
  ) {}

  /** Whether the session is welcomed and not ended: requests may go over it. */
  get up(): boolean {
    return this.welcome !== undefined && !this.ended;
  }

  /**
   * Opens the stream and yields what the controller sends besides answers, the welcome first;
   * returns when the stream ends cleanly, throws its error otherwise.
   */
  async *messages(): AsyncGenerator<SessionResponse> {
    this.outbox.unshift({ case: "hello", value: this.hello });
    try {
      for await (const m of this.nodes.session(this.requests(), { signal: this.aborter.signal, timeoutMs: 0 })) {
        if (m.kind.case === "welcome") this.welcome = m.kind.value;
        if (m.kind.case === "answer") this.answered(m.kind.value);
        else yield m;
      }
    } finally {
      this.end();
    }
  }

  /** Sends one message (dropped once the stream ended): exec_output in the terminal lane, the rest ahead of it. */
  send(kind: RequestKind): void {
    if (this.ended) return;
    (kind?.case === "execOutput" ? this.terminalLane : this.outbox).push(kind);
    this.wakeSender?.();
  }

  /** Acknowledges a pushed order; resolves with the answer (accepted or refused). */
  ack(workOrderId: string, fencingToken: bigint): Promise<SessionAnswer> {
    return this.request(SessionAnswerSubject.ACK, workOrderId, fencingToken, { case: "ack", value: { workOrderId, fencingToken } });
  }

  /** Renews a held order's lease; rejects a refusal as the unary call would. */
  async renew(workOrderId: string, fencingToken: bigint, timeoutMs: number): Promise<SessionAnswer> {
    const a = await this.request(
      SessionAnswerSubject.LEASE_RENEWAL,
      workOrderId,
      fencingToken,
      { case: "leaseRenewal", value: { workOrderId, fencingToken } },
      timeoutMs,
    );
    if (!a.accepted) throw refusalError(a);
    return a;
  }

  /** Reports a held order's result; rejects a refusal as the unary call would. */
  async result(workOrderId: string, fencingToken: bigint, result: WorkOrderResult): Promise<SessionAnswer> {
    const a = await this.request(SessionAnswerSubject.RESULT, workOrderId, fencingToken, {
      case: "result",
      value: { workOrderId, fencingToken, result },
    });
    if (!a.accepted) throw refusalError(a);
    return a;
  }

  /** Ends the stream from this side (idempotent); waiting requests are rejected. */
  close(): void {
    this.end();
    this.aborter.abort();
  }

  // What the stream sends until it ends: each lane in order, control first.
  private async *requests(): AsyncGenerator<MessageInitShape<typeof SessionRequestSchema>> {
    for (;;) {
      const kind = this.outbox.shift() ?? this.terminalLane.shift();
      if (kind) {
        yield { kind };
        continue;
      }
      if (this.ended) return;
      await new Promise<void>((resolve) => {
        this.wakeSender = resolve;
      });
      this.wakeSender = undefined;
    }
  }

  // Sends a request and waits for its answer. A request that times out keeps its place in the
  // queue of its key (its late answer is its own, not the next request's) and rejects DEADLINE_EXCEEDED.
  private request(subject: SessionAnswerSubject, id: string, token: bigint, kind: RequestKind, timeoutMs = 0): Promise<SessionAnswer> {
    if (this.ended) return Promise.reject(new ConnectError("the session ended", Code.Unavailable));
    const key = answerKey(subject, id, token);
    return new Promise<SessionAnswer>((resolve, reject) => {
      let settled = false;
      const timer =
        timeoutMs > 0
          ? setTimeout(() => settle(() => reject(new ConnectError("no answer in time", Code.DeadlineExceeded))), timeoutMs)
          : undefined;
      const settle = (fn: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        fn();
      };
      const queue = this.waiting.get(key) ?? [];
      queue.push({ resolve: (a) => settle(() => resolve(a)), reject: (e) => settle(() => reject(e)) });
      this.waiting.set(key, queue);
      this.send(kind);
    });
  }

  private answered(a: SessionAnswer): void {
    const key = answerKey(a.subject, a.workOrderId, a.fencingToken);
    const queue = this.waiting.get(key);
    const waiter = queue?.shift();
    if (queue?.length === 0) this.waiting.delete(key);
    if (waiter) waiter.resolve(a);
    else if (!a.accepted) {
      // A heartbeat or state report refused (nobody waits for those).
      this.log.warn(
        {
          action: `session_${SessionAnswerSubject[a.subject]?.toLowerCase() ?? "answer"}`,
          result: a.code,
          work_order_id: a.workOrderId || undefined,
          metadata: { message: a.message },
        },
        "the controller refused what the session sent",
      );
    }
  }

  private end(): void {
    if (this.ended) return;
    this.ended = true;
    this.wakeSender?.();
    const gone = new ConnectError("the session ended before its answer", Code.Unavailable);
    for (const queue of this.waiting.values()) for (const w of queue) w.reject(gone);
    this.waiting.clear();
  }
}

function answerKey(subject: SessionAnswerSubject, id: string, token: bigint): string {
  return `${subject}\0${id}\0${token}`;
}
