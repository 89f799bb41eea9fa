// The agent's typed clients for the controller: generated Connect clients over HTTP/2 (TLS,
// trusting the configured CA), with the node token on every call. Calls are Connect JSON by
// default, as the contract's design card has agents talk (readable in a proxy or a capture);
// Connect's binary encoding is a setting away. Calls made for a work order
// carry that order's request and correlation ids, so the controller's logs and events tie them
// to the apply that created it.
import { readFileSync } from "node:fs";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";

export interface ControllerClients {
  nodes: Client<typeof NodeService>;
  orders: Client<typeof WorkOrderService>;
}

/** Headers for one call: the order's trace ids when the call is about an order. */
export function traceHeaders(trace?: { requestId: string; correlationId: string }): { headers: Record<string, string> } | undefined {
  if (!trace) return undefined;
  const headers: Record<string, string> = {};
  if (trace.requestId) headers["x-request-id"] = trace.requestId;
  if (trace.correlationId) headers["x-correlation-id"] = trace.correlationId;
  return { headers };
}

export function createControllerClients(opts: {
  baseUrl: string;
  token: string;
  caFile?: string;
  timeoutMs?: number;
  /** Default json. */
  wire?: "json" | "binary";
}): ControllerClients {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${opts.token}`);
    return next(req);
  };
  const transport = createConnectTransport({
    baseUrl: opts.baseUrl,
    httpVersion: "2",
    useBinaryFormat: opts.wire === "binary",
    nodeOptions: opts.caFile ? { ca: readFileSync(opts.caFile, "utf8") } : {},
    interceptors: [auth],
    defaultTimeoutMs: opts.timeoutMs ?? 30_000,
    // Idle agents keep one connection; pings notice a dead controller between polls.
    pingIntervalMs: 30_000,
    idleConnectionTimeoutMs: 5 * 60_000,
  });
  return { nodes: createClient(NodeService, transport), orders: createClient(WorkOrderService, transport) };
}
