// NodeService.Session served by the controller itself, outside the Connect router, for the wires
// session-wire.ts names (Connect streaming and gRPC, JSON or binary, uncompressed, HTTP/2: what
// skippy and typed clients send); the router serves every other variant of the same method.
//
// The call goes through the same boundary as a routed one (boundary-call.ts: ids, admission,
// log lines, audit entries, errors mapped to Connect codes, the call counted when it ends), and
// the session is the same AgentSession (dispatch/agent-session.ts); only the framing is done
// here, with plain event handlers instead of the router's chain of async generators (about
// 20 KB held per open stream, measured at 1,000 sessions). In order:
//   - the request's bytes are split into messages as they come, each under way held against the
//     body budgets and its deadline (stream-budget.ts EnvelopeMeter), each decoded and checked;
//   - the messages are handled one at a time, in order: the first must be the hello (the welcome
//     is written), the rest go to the session; reading pauses while one is handled;
//   - what the session queues for the agent is written as it comes (waiting for the stream to
//     drain when it is full);
//   - when the session ends (the agent closed its side, a refusal, replaced, revoked), it releases
//     what it held, then the stream ends OK or with the refusal; when the client goes (reset,
//     connection lost), the session ends quietly.
import { Code, type ConnectError, createContextValues } from "@connectrpc/connect";
import type { DescMethod, JsonReadOptions, JsonWriteOptions } from "@bufbuild/protobuf";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { SessionRequest, SessionResponse } from "../../gen/skipper/v1/node_service_pb.js";
import { admittedKey, callInfoKey, peerCertificateKey, type CallInfo, type Principal } from "../base/context.js";
import { peerCertificateOf } from "../tls/peer-certificate.js";
import { BoundaryCall, type BoundaryDeps } from "./boundary-call.js";
import { type BodyBudgets, connectionOf } from "./body-limits.js";
import { headerReaderOf, stopReading } from "./request-gate.js";
import { BodyDeadlineError } from "./rest/read-body.js";
import { decodeRequest, encodeResponse, endOfStream, type SessionWire } from "./session-wire.js";
import { EnvelopeMeter, streamRefusal } from "./stream-budget.js";
import { replaceNul } from "./text-checks.js";

/** An agent's session as this route drives it (dispatch/agent-session.ts AgentSession). */
export interface LiveSession {
  begin(first: SessionRequest): Promise<SessionResponse>;
  receive(req: SessionRequest): Promise<void>;
  inputEnded(error?: unknown, gone?: boolean): void;
  take(): SessionResponse | undefined;
  onOutput(listener: () => void): void;
  readonly isEnded: boolean;
  readonly endFailure: unknown;
  finish(): Promise<void>;
}

export interface SessionRouteOptions {
  /** NodeService.Session. */
  method: DescMethod;
  boundary: BoundaryDeps;
  /** A new session for an admitted caller. */
  open(call: CallInfo): LiveSession;
  jsonOptions: Partial<JsonReadOptions & JsonWriteOptions>;
  /** Largest message the stream may carry. */
  readMaxBytes: number;
  budgets: BodyBudgets;
}

/** Serves one Session call whose front door admitted `admitted`; resolves once it has ended. */
export async function serveSession(
  opts: SessionRouteOptions,
  req: Http2ServerRequest,
  res: Http2ServerResponse,
  wire: SessionWire,
  admitted: Principal,
): Promise<void> {
  const contextValues = createContextValues().set(peerCertificateKey, peerCertificateOf(req)).set(admittedKey, admitted);
  const call = new BoundaryCall(opts.boundary, { method: opts.method, header: headerReaderOf(req.headers), contextValues, stream: true });
  const headers: Record<string, string> = { "content-type": wire.contentType };
  try {
    await call.admit();
    call.prepare();
    await call.audit("OK");
  } catch (e) {
    const err = call.failure(e);
    call.counted(err.code);
    return new Framing(req, res, wire, headers, opts.jsonOptions).end(err);
  }
  call.answered({ set: (name, value) => void (headers[name] = value) });
  const session = opts.open(contextValues.get(callInfoKey)!);
  return new SessionPipe(opts, req, res, wire, headers, call, session).run();
}

/** The response side: headers once, messages, and the end in the wire's form. */
class Framing {
  constructor(
    private readonly req: Http2ServerRequest,
    private readonly res: Http2ServerResponse,
    private readonly wire: SessionWire,
    private readonly headers: Record<string, string>,
    private readonly jsonOptions: Partial<JsonWriteOptions>,
  ) {}

  /** The stream is gone (reset, closed): nothing more can be written. */
  get gone(): boolean {
    return this.res.closed || this.res.destroyed || this.req.stream.destroyed;
  }

  /** Writes `message`; false when the stream is full (wait for "drain"). */
  write(message: SessionResponse): boolean {
    this.head();
    return this.res.write(encodeResponse(this.wire, message, this.jsonOptions));
  }

  /** Ends the stream, OK or with `error`; the rest of the request, if any, is not read. */
  end(error: ConnectError | undefined): void {
    if (this.gone || this.res.writableEnded) return;
    if (!this.req.readableEnded) stopReading(this.req, this.res);
    this.head();
    const { last, trailers } = endOfStream(this.wire, error, this.jsonOptions);
    if (trailers) this.res.addTrailers(trailers);
    if (last) this.res.end(last);
    else this.res.end();
  }

  private head(): void {
    if (!this.res.headersSent) this.res.writeHead(200, this.headers);
  }
}

/** A refusal of the request stream, queued behind the messages that came before it. */
interface Refusal {
  refusal: unknown;
}

/** One Session call's request stream, session and response. */
class SessionPipe {
  private readonly framing: Framing;
  private readonly meter: EnvelopeMeter;
  private readonly deadlineMs: number;
  private readonly queue: (SessionRequest | Refusal)[] = [];
  private deadline: NodeJS.Timeout | undefined;
  /** A message is being handled (reading waits). */
  private busy = false;
  /** The hello has been taken (the session began, or was refused). */
  private begun = false;
  private welcomed = false;
  private inputDone = false;
  private stopped = false;
  private finishing = false;
  private draining = false;
  /** The session's release of what it held, once it ended: what it failed with, if anything. */
  private released: Promise<unknown> | undefined;
  private done!: () => void;

  constructor(
    opts: SessionRouteOptions,
    private readonly req: Http2ServerRequest,
    private readonly res: Http2ServerResponse,
    wire: SessionWire,
    headers: Record<string, string>,
    private readonly call: BoundaryCall,
    private readonly session: LiveSession,
  ) {
    this.framing = new Framing(req, res, wire, headers, opts.jsonOptions);
    const { cls, budget } = opts.budgets.of(opts.method);
    const { connection, address } = connectionOf(req);
    this.deadlineMs = cls.deadlineMs;
    this.meter = new EnvelopeMeter(() => budget.reserve(connection, address), Date.now, { maxBytes: opts.readMaxBytes });
    this.decode = (envelope) => decodeRequest(wire, envelope, opts.jsonOptions);
  }

  private readonly decode: (envelope: { flags: number; data: Uint8Array }) => SessionRequest;

  run(): Promise<void> {
    const ended = new Promise<void>((resolve) => {
      this.done = resolve;
    });
    this.req.on("data", (chunk: Buffer) => this.data(chunk));
    this.req.once("end", () => {
      this.inputDone = true;
      this.next();
    });
    // Reset by the client, its connection lost, or closed after the end: the session ends quietly.
    this.res.once("close", () => this.gone());
    return ended;
  }

  // Bytes of the request: whole messages are queued in order; reading pauses until they are handled.
  private data(chunk: Buffer): void {
    if (this.stopped) return;
    try {
      for (const envelope of this.meter.push(chunk)) {
        const message = this.decode(envelope);
        replaceNul(message);
        this.queue.push(message);
      }
    } catch (e) {
      this.refuse(streamRefusal(e) ?? e);
      return;
    }
    this.armDeadline();
    if (this.queue.length > 0) {
      this.req.pause();
      this.next();
    }
  }

  // A message under way must arrive whole within the deadline from its first byte.
  private armDeadline(): void {
    const started = this.meter.startedAt;
    if (started === undefined) {
      clearTimeout(this.deadline);
      this.deadline = undefined;
      return;
    }
    if (this.deadline) return;
    const left = Math.max(0, started + this.deadlineMs - Date.now());
    this.deadline = setTimeout(() => this.refuse(streamRefusal(new BodyDeadlineError(this.deadlineMs))), left);
  }

  // Stops reading; the refusal ends the session once the messages before it are handled.
  private refuse(refusal: unknown): void {
    if (this.stopped) return;
    this.stopReading();
    this.queue.push({ refusal });
    this.next();
  }

  private stopReading(): void {
    this.stopped = true;
    clearTimeout(this.deadline);
    this.meter.release();
    this.req.pause();
  }

  // Handles the next queued message, one at a time.
  private next(): void {
    if (this.busy || this.finishing) return;
    const item = this.queue.shift();
    if (item === undefined) {
      if (this.inputDone && !this.stopped) {
        this.stopReading();
        if (this.begun) this.session.inputEnded();
        else this.endUnbegun(undefined);
      } else if (!this.stopped) this.req.resume();
      return;
    }
    if ("refusal" in item) {
      if (this.begun) this.session.inputEnded(item.refusal);
      else this.endUnbegun(item.refusal);
      return;
    }
    this.busy = true;
    const handled = this.begun ? this.session.receive(item) : this.begin(item);
    handled.then(
      () => {
        this.busy = false;
        this.next();
      },
      (e: unknown) => {
        this.busy = false;
        if (this.welcomed) this.session.inputEnded(e);
      },
    );
  }

  private async begin(hello: SessionRequest): Promise<void> {
    this.begun = true;
    let welcome: SessionResponse;
    try {
      welcome = await this.session.begin(hello);
    } catch (e) {
      this.endUnbegun(e);
      throw e;
    }
    this.welcomed = true;
    // The client went while the hello was handled: the session it opened ends at once.
    if (this.framing.gone) this.session.inputEnded(undefined, true);
    else this.framing.write(welcome);
    this.session.onOutput(() => this.flush());
    this.flush();
  }

  // Writes what the session queued; once it has ended and all is written, finishes. A session
  // that ended releases what it held at once, even while its stream waits to drain; a stream
  // that is gone takes nothing more (what was queued is dropped).
  private flush(): void {
    if (this.finishing) return;
    const gone = this.framing.gone;
    if (this.draining && !gone) {
      if (this.session.isEnded) void this.release();
      return;
    }
    for (let m = this.session.take(); m !== undefined; m = this.session.take()) {
      if (gone) continue;
      if (!this.framing.write(m)) {
        this.draining = true;
        this.res.once("drain", () => {
          this.draining = false;
          this.flush();
        });
        if (this.session.isEnded) void this.release();
        return;
      }
    }
    if (this.session.isEnded) void this.finish();
  }

  // The session's release of what it held (once): resolves with what it failed with, if anything
  // (a store that went away: the stream then ends INTERNAL_ERROR, logged with its cause).
  private release(): Promise<unknown> {
    this.released ??= this.session.finish().then(
      () => undefined,
      (e: unknown) => e ?? new Error("the session's release failed"),
    );
    return this.released;
  }

  // The session released what it held; the stream ends OK or with its refusal (or the release's
  // failure). Never rejects: whatever fails here is logged with the call's ids.
  private async finish(): Promise<void> {
    this.finishing = true;
    try {
      this.stopReading();
      const failed = await this.release();
      this.endCall(failed ?? this.session.endFailure, failed);
    } catch (e) {
      this.call.failure(e);
    } finally {
      this.done();
    }
  }

  // Ends a call whose session never began: no hello (OK), or its refusal.
  private endUnbegun(error: unknown): void {
    if (this.finishing) return;
    this.finishing = true;
    this.stopReading();
    this.endCall(error, undefined);
    this.done();
  }

  // The call ends with `cause` (undefined: OK), counted; a stream that is gone gets nothing more
  // (`goneFailure`, if any, is still logged with the call's ids).
  private endCall(cause: unknown, goneFailure: unknown): void {
    if (this.framing.gone) {
      if (goneFailure !== undefined) this.call.failure(goneFailure);
      this.call.counted(Code.Canceled);
      return;
    }
    const err = cause === undefined ? undefined : this.call.streamFailure(cause);
    this.call.counted(err?.code);
    this.framing.end(err);
  }

  private gone(): void {
    if (this.finishing) return;
    this.stopReading();
    if (this.welcomed) this.session.inputEnded(undefined, true);
    else if (!this.busy) this.endUnbegun(undefined);
    // A hello being handled ends with the session it opens (flush finds it ended).
  }
}
