// One call through the RPC boundary (interceptors.ts runs one around every routed call; the
// lean Session route, session-route.ts, runs one itself): its request and correlation ids, its
// span, who calls (admitted to the RPC's permission), its log lines and audit entries, and every
// failure mapped to a Connect error with a skipper.v1.ApiError detail.
import { beginSpan } from "../../common/tracing.js";
import { Code, ConnectError, type ContextValues } from "@connectrpc/connect";
import type { DescMethod, Message } from "@bufbuild/protobuf";
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
import { actorOf } from "../auth/actor.js";
import { tenantAccess } from "../auth/tenant-access.js";
import type { Logger } from "../../common/logging/logger.js";
import { auditEntryOf, isAudited, type AuditSink } from "../auth/audit-policy.js";
import { takeParked } from "./rest/admitted-calls.js";
import type { Authenticator } from "../auth/authenticator.js";
import type { Store } from "../store/store.js";
import type { ControllerMetrics } from "../metrics/controller-metrics.js";

// Calls every agent makes on a timer.
const PERIODIC = new Set(["NodeService.Heartbeat", "WorkOrderService.RenewWorkOrderLease", "NodeService.WatchWorkOrders"]);

/** What the boundary needs (the interceptor and the lean Session route alike). */
export interface BoundaryDeps {
  authenticator: Authenticator;
  logger: Logger;
  store: Pick<Store, "getResource">;
  /** Where audit entries go (unset: nowhere, for unit tests of other parts). */
  audit?: AuditSink;
  /** Where calls are counted (unset: nowhere). */
  metrics?: Pick<ControllerMetrics, "rpcHandled">;
}

/** What a call through the boundary is, as it needs it (a Connect request has all of it). */
interface BoundaryRequestBase {
  method: DescMethod;
  header: { get(name: string): string | null };
  contextValues: ContextValues;
}

/** A streaming call (its messages are checked as they are read), or a unary one with its message. */
export type BoundaryRequest = (BoundaryRequestBase & { stream: true }) | (BoundaryRequestBase & { stream: false; message: Message });

/** One call through the boundary: its ids, span, caller and logger, as they become known. */
export class BoundaryCall {
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
    private readonly req: BoundaryRequest,
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
    if (!deps.audit || this.info?.audit.written || !isAudited(req.method, principal, outcome, this.info?.audit)) return;
    await deps.audit(auditEntryOf(req, principal, this.info, { requestId: this.requestId, correlationId: this.correlationId, outcome }));
  }

  /** A failed call's entry: one that cannot be written is logged, the call's own error goes on. */
  auditFailure(code: string): Promise<void> {
    return this.audit(code).catch((ae: unknown) =>
      this.log.error({ action: this.action, result: "INTERNAL_ERROR", err: ae }, "could not write the audit entry of a failed call"),
    );
  }

  /** The answer carries the trace ids; the call's log line. */
  answered(header: { set(name: string, value: string): void }): void {
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

function traceHeader(h: BoundaryRequest["header"], name: string): string | undefined {
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
