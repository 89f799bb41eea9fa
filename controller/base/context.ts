// Per-call context handed from the interceptor (controller/boundary/interceptors.ts) to handlers through
// a Connect context key, never a global: who is calling and under which request/correlation ids.
import { createContextKey, type HandlerContext } from "@connectrpc/connect";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { create } from "@bufbuild/protobuf";
import { ResponseMetaSchema, type ResponseMeta } from "../../gen/skipper/v1/envelope_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import type { Actor, Role, TenantScope } from "../../gen/skipper/v1/access_pb.js";

import { SCHEMA_VERSION } from "../../common/schema-version.js";

/** The authenticated caller. */
export type Principal =
  | { kind: "admin" }
  | {
      kind: "api_key";
      keyId: string;
      name: string;
      role: Role;
      scope?: TenantScope;
      /** The stored hash of the secret it presented (the current or, in its grace period, the previous). */
      secretHash?: string;
    }
  | {
      kind: "node";
      nodeId: string;
      /**
       * Set when a relay acts for an SSH node (nodeId) whose spec names it: the relay's node id,
       * whose credential it presented (auth/relay-access.ts).
       */
      relayNodeId?: string;
      /** Set when it called with its client certificate (this serial). */
      certificateSerial?: string;
      /** Set when it called with its bearer token: the stored hash it matched. */
      tokenHash?: string;
    }
  | { kind: "anonymous" };

/** The client certificate a caller presented on its TLS connection (tls/peer-certificate.ts). */
export interface PeerCertificate {
  /** Uppercase hex without leading zeros. */
  serial: string;
  /** The node it names (spiffe://skipper/node/<id>), if any. */
  nodeId?: string;
  notAfter: Date;
  /** Why TLS did not accept it (not signed by the client CA, expired...); unset when it did. */
  error?: string;
}

/**
 * The caller the front door (request-gate.ts, the REST handler) already admitted for this call, so
 * the interceptor does not authenticate it a second time (for a node on PostgreSQL, two queries).
 */
export const admittedKey = createContextKey<Principal | undefined>(undefined, { description: "skipper admitted caller" });

/** The peer certificate of the connection a call came on, for the interceptor. */
export const peerCertificateKey = createContextKey<PeerCertificate | undefined>(undefined, { description: "skipper peer certificate" });

/** The ids a change carries from the call that caused it to every record it leads to. */
export interface Trace {
  requestId: string;
  correlationId: string;
  /** W3C trace context of the call (its trace id and span): what it causes continues the trace. */
  traceparent?: string;
  /** Who made the call (unset: the controller itself). Events record it. */
  actor?: Actor;
}

/** Which tenants the caller may see and act on (auth/tenant-access.ts). */
export interface TenantAccess {
  /** True when the caller's scope is every tenant. */
  readonly unrestricted: boolean;
  /**
   * Throws FORBIDDEN unless `tenantId` is in the caller's scope. An empty or undefined tenant
   * (something no tenant owns, such as an ad-hoc order or the system snapshot) needs an
   * unrestricted caller. `labels` are the tenant's labels when the caller already has them.
   */
  require(tenantId: string | undefined, labels?: Record<string, string>): Promise<void>;
  /** Whether `tenantId` is in the caller's scope (for filtering listings). */
  allows(tenantId: string | undefined): Promise<boolean>;
}

/** What the audit entry of a call records about its target; handlers fill it in. */
export interface AuditNote {
  /** e.g. "service/web", "api_key/0a1b2c3d4e5f". */
  target?: string;
  tenantId?: string;
  /** Who to record when not the caller's credential (an enrollment: the token used). */
  actor?: Actor;
  /** The handler wrote the call's entry itself (a terminal, naming it once its slot is held): none more is written. */
  written?: boolean;
  /** Set by a handler that handed out secret values (a relay's SSH keys): the call is audited. */
  handedOutSecrets?: boolean;
}

/** Everything a handler needs to know about the call beyond its request message. */
export interface CallInfo {
  requestId: string;
  correlationId: string;
  /** W3C traceparent of this call's span: the caller's trace continued (or a new one), a span of its own. */
  traceparent: string;
  principal: Principal;
  /** The caller as events and audit entries record it. */
  actor: Actor;
  /** The caller's tenant scope. */
  tenants: TenantAccess;
  /** Filled in by the handler: what the call acted on, for its audit entry. */
  audit: AuditNote;
  /** Value of x-idempotency-key, when sent. */
  idempotencyKey?: string;
  /** Logger bound to this call's ids. */
  logger: Logger;
}

/** The trace ids of a call, for the records it leads to. */
export function traceOf(call: CallInfo): Trace {
  return { requestId: call.requestId, correlationId: call.correlationId, traceparent: call.traceparent, actor: call.actor };
}

/** The trace of a call acting on an existing order: the call's ids, in the order's correlation. */
export function orderTraceOf(call: CallInfo, order: { correlationId: string }): Trace {
  return { ...traceOf(call), correlationId: order.correlationId };
}

/**
 * The trace of a step a session takes for an order (its push, ack, renewal or result): the order's
 * own request id and trace context, as a unary call about the order carries them in its headers
 * (x-request-id, traceparent), so what it causes continues the trace of the call that created the
 * order, not the long-lived session's; who acts is the session's caller.
 */
export function sessionOrderTraceOf(call: CallInfo, order: { requestId: string; correlationId: string; traceparent: string }): Trace {
  return {
    requestId: order.requestId || call.requestId,
    correlationId: order.correlationId || call.correlationId,
    traceparent: order.traceparent || call.traceparent,
    actor: call.actor,
  };
}

export const callInfoKey = createContextKey<CallInfo | undefined>(undefined, {
  description: "skipper call info",
});

/** The call info the interceptor attached; throws if a handler runs without it (a wiring bug). */
export function callInfo(ctx: HandlerContext): CallInfo {
  const info = ctx.values.get(callInfoKey);
  if (!info) throw new Error("call info missing: handler invoked without the skipper interceptor");
  return info;
}

/** The ResponseMeta every response carries. */
export function responseMeta(ctx: HandlerContext): ResponseMeta {
  const info = callInfo(ctx);
  return create(ResponseMetaSchema, {
    schemaVersion: SCHEMA_VERSION,
    requestId: info.requestId,
    correlationId: info.correlationId,
    timestamp: timestampNow(),
  });
}
