// The agent's typed clients for the controller: generated Connect clients over HTTP/2 (TLS,
// trusting the configured CA), authenticated by the node token on every call or by the node's
// client certificate (mutual TLS, after enrollment). Calls are Connect JSON by default, as the
// contract's design card has agents talk (readable in a proxy or a capture); Connect's binary
// encoding is a setting away. Calls made for a work order carry that order's request and
// correlation ids, so the controller's logs and events tie them to the apply that created it.
import { childSpan, formatTraceparent, parseTraceparent } from "../common/trace-context.js";
import { readFileSync } from "node:fs";
import { createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";

export interface ControllerClients {
  nodes: Client<typeof NodeService>;
  orders: Client<typeof WorkOrderService>;
  enrollment: Client<typeof EnrollmentService>;
  /**
   * Uses this client certificate for calls from now on (after a renewal). Calls already under
   * way finish on the connection they started on.
   */
  useCertificate(cert: { certPem: string; keyPem: string }): void;
}

/** How the agent proves who it is: its bearer token, a client certificate, or nothing (enrollment). */
export type AgentCredential = { token: string } | { certPem: string; keyPem: string } | { none: true };

/** Headers for one call: the order's trace ids when the call is about an order. */
export function traceHeaders(trace?: {
  requestId: string;
  correlationId: string;
  traceparent?: string;
}): { headers: Record<string, string> } | undefined {
  if (!trace) return undefined;
  const headers: Record<string, string> = {};
  if (trace.requestId) headers["x-request-id"] = trace.requestId;
  if (trace.correlationId) headers["x-correlation-id"] = trace.correlationId;
  // The order's trace, continued in a span of this call's own.
  const parent = parseTraceparent(trace.traceparent);
  if (parent) headers.traceparent = formatTraceparent(childSpan(parent));
  return { headers };
}

export function createControllerClients(opts: {
  baseUrl: string;
  credential: AgentCredential;
  caFile?: string;
  timeoutMs?: number;
  /** Default json. */
  wire?: "json" | "binary";
}): ControllerClients {
  const ca = opts.caFile ? { ca: readFileSync(opts.caFile, "utf8") } : {};
  const make = (credential: AgentCredential): Transport => {
    const interceptors: Interceptor[] = [];
    if ("token" in credential) {
      interceptors.push((next) => (req) => {
        req.header.set("authorization", `Bearer ${credential.token}`);
        return next(req);
      });
    }
    const clientCert = "certPem" in credential ? { cert: credential.certPem, key: credential.keyPem } : {};
    return createConnectTransport({
      baseUrl: opts.baseUrl,
      httpVersion: "2",
      useBinaryFormat: opts.wire === "binary",
      nodeOptions: { ...ca, ...clientCert },
      interceptors,
      defaultTimeoutMs: opts.timeoutMs ?? 30_000,
      // Idle agents keep one connection; pings notice a dead controller between polls.
      pingIntervalMs: 30_000,
      idleConnectionTimeoutMs: 5 * 60_000,
    });
  };
  // Every client goes through this one, so a new certificate applies to all of them at once.
  let current = make(opts.credential);
  const transport: Transport = {
    unary: (...args) => current.unary(...args),
    stream: (...args) => current.stream(...args),
  };
  return {
    nodes: createClient(NodeService, transport),
    orders: createClient(WorkOrderService, transport),
    enrollment: createClient(EnrollmentService, transport),
    useCertificate(cert) {
      current = make(cert);
    },
  };
}
