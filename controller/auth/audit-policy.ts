// Which calls the audit trail records, and what their entry says.
//
// Recorded: every call that may change something (an RPC not declared NO_SIDE_EFFECTS), whatever
// its outcome, and every call refused to an authenticated caller (FORBIDDEN: someone tried what
// their role or scope does not allow), and every call that hands a node secret values. Not recorded: reads; the agents' high-rate protocol when it
// succeeds (heartbeats, claims, results and state reports, thousands a second across a fleet; their
// effects are events, which carry the node as actor); and calls without a valid credential, which
// are logged instead, so that nobody can fill the disk through the trail without a credential
// (an enrollment is recorded when it succeeds, under the enrollment token's id).
import { create, type DescMethod } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import { Permission } from "../../gen/skipper/v1/access_pb.js";
import { AuditEntrySchema, type AuditEntry } from "../../gen/skipper/v1/audit_service_pb.js";
import type { AuditNote, Principal } from "../base/context.js";
import { actorOf } from "./actor.js";
import { permissionOf } from "./permissions.js";
import type { OnRefused } from "./admission.js";
import { isValidTraceId } from "../../common/ids.js";
import { randomUUID } from "node:crypto";

/** Where audit entries go: the store numbers, chains and keeps them. */
export type AuditSink = (entry: AuditEntry) => Promise<unknown>;

// Calls that hand out secret values: recorded whoever makes them and however they end, so that
// who received which order's secrets is on record (the order lists the values it uses).
const HANDS_OUT_SECRETS = new Set(["skipper.v1.WorkOrderService.GetWorkOrderSecrets"]);

// Streams whose handler writes the entry of a call that succeeds, once it knows what it names
// (a terminal, once it holds its node's slot: dispatch/open-terminal.ts); the boundary's, written
// as the stream starts, would name nothing and say it twice. A refusal is the boundary's.
const HANDLER_WRITES_OK = new Set(["skipper.v1.TerminalService.Attach"]);

/** Whether a call of `method` by `principal` that ended with `outcome` ("OK" or an error code) is audited. */
export function isAudited(method: DescMethod, principal: Principal, outcome: string, note?: AuditNote): boolean {
  if (note?.handedOutSecrets) return true;
  if (HANDS_OUT_SECRETS.has(`${method.parent.typeName}.${method.name}`) && principal.kind !== "anonymous") return true;
  // An enrollment is audited when it succeeds (under the token's name); a failed one is only
  // logged, like any call without a valid credential.
  if (permissionOf(method) === Permission.ENROLL) return outcome === "OK";
  if (principal.kind === "anonymous") return false;
  if (outcome === "FORBIDDEN") return true;
  if (outcome === "OK" && HANDLER_WRITES_OK.has(`${method.parent.typeName}.${method.name}`)) return false;
  if (method.idempotency === MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS) return false;
  // The agents' own protocol; a node renewing its certificate is a credential change, recorded.
  const protocol = permissionOf(method) === Permission.NODE && method.parent.typeName !== "skipper.v1.EnrollmentService";
  return !(protocol && outcome === "OK");
}

/** The ids and outcome of one call. */
export interface CallOutcome {
  requestId: string;
  correlationId: string;
  outcome: string;
}

/** The audit entry of a call (the store adds sequence and hashes). */
export function auditEntryOf(
  req: { method: DescMethod; message?: unknown },
  principal: Principal,
  note: { audit: AuditNote } | undefined,
  call: CallOutcome,
): AuditEntry {
  const fields = (req.message ?? {}) as Record<string, unknown>;
  return create(AuditEntrySchema, {
    time: timestampNow(),
    actor: note?.audit.actor ?? actorOf(principal),
    rpc: `${req.method.parent.typeName}/${req.method.name}`,
    target: note?.audit.target ?? targetOf(req.method, fields),
    tenantId: note?.audit.tenantId ?? stringField(fields, "tenantId"),
    requestId: call.requestId,
    correlationId: call.correlationId,
    outcome: call.outcome,
  });
}

/** What a request names, when its handler did not say: "service/web", "node/host-1", "rollout/<id>". */
function targetOf(method: DescMethod, f: Record<string, unknown>): string {
  const type = stringField(f, "resourceType");
  const id = stringField(f, "id");
  if (type && id) return `${type}/${id}`;
  const named: [string, string][] = [
    ["nodeId", "node"],
    ["workOrderId", "work_order"],
    ["tenantId", "tenant"],
  ];
  for (const [field, noun] of named) {
    const v = stringField(f, field);
    if (v) return `${noun}/${v}`;
  }
  // The service's noun for a bare id: RolloutService → rollout, WorkOrderService → work_order.
  const noun = method.parent.name
    .replace(/Service$/, "")
    .replace(/([a-z])([A-Z])/g, "$1_$2")
    .toLowerCase();
  return id ? `${noun}/${id}` : "";
}

function stringField(f: Record<string, unknown>, name: string): string {
  const v = f[name];
  return typeof v === "string" ? v.slice(0, 200) : "";
}

/**
 * The entry of a request to a route outside the contract (GET /metrics) refused to an
 * authenticated caller: `rpc` names the route.
 */
export function routeRefusalEntry(route: string, principal: Principal, call: CallOutcome): AuditEntry {
  return create(AuditEntrySchema, {
    time: timestampNow(),
    actor: actorOf(principal),
    rpc: route,
    requestId: call.requestId,
    correlationId: call.correlationId,
    outcome: call.outcome,
  });
}

/**
 * For the front doors that refuse a call before the interceptor sees it (request-gate.ts, the REST
 * handler): records the refusal of an authenticated caller under the request's own ids when it
 * sent well-formed ones.
 */
export function refusalAuditor(sink: AuditSink | undefined): (method: DescMethod, headers: Headers) => OnRefused {
  return (method, headers) => async (principal, error) => {
    if (!sink || !isAudited(method, principal, error.code)) return;
    const requestId = traceHeader(headers, "x-request-id") ?? randomUUID();
    const correlationId = traceHeader(headers, "x-correlation-id") ?? requestId;
    await sink(auditEntryOf({ method }, principal, undefined, { requestId, correlationId, outcome: error.code }));
  };
}

function traceHeader(h: Headers, name: string): string | undefined {
  const v = h.get(name);
  return v !== null && isValidTraceId(v) ? v : undefined;
}
