// The RPC boundary. One interceptor runs around every call, for Connect, gRPC, gRPC-Web and the
// REST routes alike (REST calls go through an in-memory transport with the same interceptors):
//   1. request/correlation ids: accepted from headers when well-formed, else generated, and
//      echoed in response headers (also on errors)
//   2. authentication and the permission the RPC declares in the contract (auth/permissions.ts);
//      the caller's actor and tenant scope go to the handler in CallInfo
//   3. one structured log line per call, and one audit entry per call that changes something
//      (auth/audit-policy.ts says which)
//   4. domain errors -> Connect errors carrying a skipper.v1.ApiError detail; anything else is
//      logged with its cause and answered as INTERNAL_ERROR, never with a stack trace;
//   5. the call counted by method and code (a stream when it ends), a unary call's time observed.
import { beginSpan } from "../../common/tracing.js";
import { Code, ConnectError, type Interceptor, type StreamRequest, type UnaryRequest } from "@connectrpc/connect";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import { ApiErrorSchema } from "../../gen/skipper/v1/envelope_pb.js";
import { randomUUID } from "node:crypto";
import { admittedKey, callInfoKey, peerCertificateKey, type CallInfo, type Principal } from "../base/context.js";
import { connectErrorOf, errorCodeOf } from "./api-errors.js";
import { isSkipperError, SkipperError, invalid } from "../base/errors.js";
import { isValidTraceId } from "../../common/ids.js";
import { admit } from "../auth/admission.js";
import { permissionOf } from "../auth/permissions.js";
import { Permission } from "../../gen/skipper/v1/access_pb.js";
import { refuseNul, replaceNul } from "./text-checks.js";
import type { Authenticator } from "../auth/authenticator.js";
import { actorOf } from "../auth/actor.js";
import { tenantAccess } from "../auth/tenant-access.js";
import type { Logger } from "../../common/logging/logger.js";
import type { Store } from "../store/store.js";
import { auditEntryOf, isAudited, type AuditSink } from "../auth/audit-policy.js";
import { takeParked } from "./rest/admitted-calls.js";
import type { ControllerMetrics } from "../metrics/controller-metrics.js";

// Calls every agent makes on a timer.
const PERIODIC = new Set(["NodeService.Heartbeat", "WorkOrderService.RenewWorkOrderLease", "NodeService.WatchWorkOrders"]);

/** What the boundary interceptor needs. */
export interface BoundaryDeps {
  authenticator: Authenticator;
  logger: Logger;
  store: Pick<Store, "getResource">;
  /** Where audit entries go (unset: nowhere, for unit tests of other parts). */
  audit?: AuditSink;
  /** Where calls are counted (unset: nowhere). */
  metrics?: Pick<ControllerMetrics, "rpcHandled">;
}

/** The single boundary interceptor described above. */
export function boundaryInterceptor(deps: BoundaryDeps): Interceptor {
  return (next) => async (req) => {
    const call = new BoundaryCall(deps, req);
    try {
      await call.admit();
      call.prepare();
      let res: Awaited<ReturnType<typeof next>>;
      try {
        res = await next(req.stream ? { ...req, message: checkedMessages(req) } : req);
      } catch (e) {
        await call.auditFailure(isSkipperError(e) ? e.code : e instanceof ConnectError ? errorCodeOf(e.code) : "INTERNAL_ERROR");
        throw e;
      }
      await call.audit("OK");
      call.answered(res.header);
      // A streaming handler's body runs as its messages are read, after this returns: its errors
      // (a node watching another node's orders, say) are mapped here too.
      if (res.stream) {
        return {
          ...res,
          message: mapErrors(
            res.message,
            (e) => call.streamFailure(e),
            (code) => call.counted(code),
          ),
        };
      }
      call.counted(undefined);
      return res;
    } catch (e) {
      const err = call.failure(e);
      call.counted(err.code);
      throw err;
    }
  };
}

/** One call through the boundary: its ids, span, caller and logger, as they become known. */
class BoundaryCall {
  private readonly started: number;
  private readonly action: string;
  /** A unary call's time is observed; a stream is counted when it ends, however long it ran. */
  private readonly unary: boolean;
  private readonly span: ReturnType<typeof beginSpan>;
  private requestId: string;
  private correlationId: string;
  private principal: Principal;
  private log: Logger;
  private info: CallInfo | undefined;

  constructor(
    private readonly deps: BoundaryDeps,
    private readonly req: UnaryRequest | StreamRequest,
  ) {
    this.started = performance.now();
    this.action = `${req.method.parent.name}.${req.method.name}`;
    this.unary = req.method.methodKind === "unary";
    // The call's span, in the caller's trace (traceparent) or a new one: ended with the call (a
    // stream when it ends), exported when an OTLP exporter is configured (common/tracing.ts).
    this.span = beginSpan(`${req.method.parent.typeName}/${req.method.name}`, req.header.get("traceparent") ?? undefined, "server");
    this.requestId = randomUUID();
    this.correlationId = this.requestId;
    this.principal = { kind: "anonymous" };
    this.log = deps.logger;
  }

  /** The call ended with `code` (undefined: OK): its span ends and it is counted. */
  counted(code: Code | undefined): void {
    this.span.end(code === undefined ? undefined : Code[code]);
    this.deps.metrics?.rpcHandled(this.req.method, code, this.unary ? (performance.now() - this.started) / 1000 : undefined);
  }

  /** Takes the trace ids from the headers and finds who calls, admitted to the RPC's permission. */
  async admit(): Promise<void> {
    const { req, deps } = this;
    this.requestId = traceHeader(req.header, "x-request-id") ?? this.requestId;
    this.correlationId = traceHeader(req.header, "x-correlation-id") ?? this.requestId;
    this.log = deps.logger.child({
      request_id: this.requestId,
      correlation_id: this.correlationId,
      trace_id: this.span.context.traceId,
      span_id: this.span.context.spanId,
    });
    // Admitted at the front door already (same rule, a moment ago: the RPC front door says so
    // in context values, the REST one by a ticket), or admitted here.
    const parked = takeParked(req.header);
    this.principal =
      req.contextValues.get(admittedKey) ??
      parked?.principal ??
      (await admit(deps.authenticator, req.method, req.header, {
        peer: req.contextValues.get(peerCertificateKey) ?? parked?.peer,
        onRefused: (p) => {
          this.principal = p;
          return this.audit("FORBIDDEN");
        },
      }));
  }

  /** Hands the handler its CallInfo, once the request's idempotency key and text are checked. */
  prepare(): void {
    const { req, principal } = this;
    const idempotencyKey = req.header.get("x-idempotency-key") ?? undefined;
    if (idempotencyKey !== undefined && !/^[\x21-\x7e]{1,200}$/.test(idempotencyKey)) {
      throw invalid("x-idempotency-key must be 1-200 printable ASCII characters", { field: "x-idempotency-key" });
    }
    this.info = {
      requestId: this.requestId,
      correlationId: this.correlationId,
      traceparent: this.span.traceparent,
      principal,
      actor: actorOf(principal),
      tenants: tenantAccess(principal, this.deps.store),
      audit: {},
      idempotencyKey,
      logger: this.log,
    };
    req.contextValues.set(callInfoKey, this.info);
    // Text neither store can keep alike: refused, or replaced in what an agent reports.
    if (!req.stream) {
      if (permissionOf(req.method) === Permission.NODE) replaceNul(req.message);
      else refuseNul(req.message);
    }
  }

  // An audited call's entry is written before it is answered: a change acknowledged to the
  // caller always has one.
  async audit(outcome: string): Promise<void> {
    const { deps, req, principal } = this;
    if (!deps.audit || !isAudited(req.method, principal, outcome)) return;
    await deps.audit(auditEntryOf(req, principal, this.info, { requestId: this.requestId, correlationId: this.correlationId, outcome }));
  }

  /** A failed call's entry: one that cannot be written is logged, the call's own error goes on. */
  auditFailure(code: string): Promise<void> {
    return this.audit(code).catch((ae: unknown) =>
      this.log.error({ action: this.action, result: "INTERNAL_ERROR", err: ae }, "could not write the audit entry of a failed call"),
    );
  }

  /** The answer carries the trace ids; the call's log line. */
  answered(header: Headers): void {
    const { action, principal } = this;
    header.set("x-request-id", this.requestId);
    header.set("x-correlation-id", this.correlationId);
    // Reads (declared NO_SIDE_EFFECTS in the contract) and the agents' periodic calls log at
    // debug when they succeed: a line per poll, beat or renewal would bury the changes (their
    // effects that matter, such as a node coming online, have events). Failures and other
    // writes log at info and above.
    const quiet = this.req.method.idempotency === MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS || PERIODIC.has(action);
    const level = quiet ? "debug" : "info";
    this.log[level]({ action, result: "ok", node_id: nodeIdOf(principal), metadata: { duration_ms: ms(this.started) } }, `${action} ok`);
  }

  // Every failure, of the call or later of its response stream, leaves as a Connect error with
  // the ApiError detail, the trace ids and one log line.
  failure(e: unknown): ConnectError {
    const { action, log } = this;
    const err = toConnectError(e, log, action);
    err.metadata.set("x-request-id", this.requestId);
    err.metadata.set("x-correlation-id", this.correlationId);
    const code = err.findDetails(ApiErrorSchema)[0]?.code ?? "INTERNAL_ERROR";
    log[code === "INTERNAL_ERROR" ? "error" : "warn"](
      { action, result: code, node_id: nodeIdOf(this.principal), metadata: { duration_ms: ms(this.started), message: err.rawMessage } },
      `${action} failed: ${code}`,
    );
    return err;
  }

  // A refusal raised while a stream runs (node A watching node B's orders, a node revoked
  // meanwhile) is audited like one raised before it.
  streamFailure(e: unknown): ConnectError {
    const err = this.failure(e);
    const code = err.findDetails(ApiErrorSchema)[0]?.code ?? "INTERNAL_ERROR";
    void this.auditFailure(code);
    return err;
  }
}

/**
 * A request stream's messages as the handler reads them, held to the rules prepare() applies to a
 * unary request's message (text neither store can keep). Connect reports bytes that are not the
 * method's request message as `internal`; coming from the request stream, they are the caller's
 * INVALID_REQUEST.
 */
async function* checkedMessages(req: StreamRequest): StreamRequest["message"] {
  const node = permissionOf(req.method) === Permission.NODE;
  try {
    for await (const m of req.message) {
      if (node) replaceNul(m);
      else refuseNul(m);
      yield m;
    }
  } catch (e) {
    if (e instanceof ConnectError && e.code === Code.Internal) {
      throw invalid(`a message on the stream is not a valid ${req.method.input.typeName}: ${e.rawMessage}`, { field: "body" });
    }
    throw e;
  }
}

/** A response stream whose errors leave through `failure`; `ended` is told its code (undefined: OK). */
async function* mapErrors<T>(
  messages: AsyncIterable<T>,
  failure: (e: unknown) => ConnectError,
  ended: (code: Code | undefined) => void,
): AsyncIterable<T> {
  let code: Code | undefined;
  try {
    yield* messages;
  } catch (e) {
    // A client that went away is not a failure of the call.
    const gone =
      (e instanceof ConnectError && (e.code === Code.Canceled || e.code === Code.DeadlineExceeded)) || (e as Error)?.name === "AbortError";
    const err = gone ? e : failure(e);
    code = err instanceof ConnectError ? err.code : Code.Canceled;
    throw err;
  } finally {
    ended(code);
  }
}

/** Maps any thrown value to a ConnectError with an ApiError detail. */
export function toConnectError(e: unknown, log: Logger, action: string): ConnectError {
  if (isSkipperError(e)) return connectErrorOf(e);
  if (e instanceof ConnectError) {
    if (e.findDetails(ApiErrorSchema).length > 0) return e;
    const code = errorCodeOf(e.code);
    if (code === "INTERNAL_ERROR") return internal(e, log, action);
    return connectErrorOf(new SkipperError(code, e.rawMessage));
  }
  return internal(e, log, action);
}

function internal(e: unknown, log: Logger, action: string): ConnectError {
  log.error({ action, result: "INTERNAL_ERROR", err: e }, "unexpected error");
  return connectErrorOf(new SkipperError("INTERNAL_ERROR", "internal error; see controller logs for this request id"));
}

function traceHeader(h: Headers, name: string): string | undefined {
  const v = h.get(name);
  if (v === null || v === "") return undefined;
  if (!isValidTraceId(v)) {
    throw invalid(`${name} must be 1-128 characters of [A-Za-z0-9._:-]`, { field: name });
  }
  return v;
}

function nodeIdOf(p: Principal): string | undefined {
  return p.kind === "node" ? p.nodeId : undefined;
}

function ms(start: number): number {
  return Math.round((performance.now() - start) * 100) / 100;
}
