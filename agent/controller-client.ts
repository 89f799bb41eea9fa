// The agent's typed clients for the controller: generated Connect clients over HTTP/2 (TLS,
// trusting the configured CA), authenticated by the node token on every call or by the node's
// client certificate (mutual TLS, after enrollment). Calls are Connect JSON by default, as the
// contract's design card has agents talk (readable in a proxy or a capture); Connect's binary
// encoding is a setting away. Calls made for a work order carry that order's request and
// correlation ids, so the controller's logs and events tie them to the apply that created it, and
// continue its trace: each such call is a client span (exported like the agent's other spans)
// whose traceparent is the one sent.
import { parseTraceparent } from "../common/trace-context.js";
import { beginSpan } from "../common/tracing.js";
import { readFileSync } from "node:fs";
import http2 from "node:http2";
import net from "node:net";
import type { Duplex } from "node:stream";
import tls from "node:tls";
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { AgentBundleService } from "../gen/skipper/v1/agent_bundle_service_pb.js";

export interface ControllerClients {
  nodes: Client<typeof NodeService>;
  orders: Client<typeof WorkOrderService>;
  enrollment: Client<typeof EnrollmentService>;
  /** The manifest of the bundle the controller serves and the key that signs bundles. */
  bundles: Client<typeof AgentBundleService>;
  /**
   * Uses this client certificate for calls from now on (after a renewal). Calls already under
   * way finish on the connection they started on.
   */
  useCertificate(cert: { certPem: string; keyPem: string }): void;
  /**
   * Clients that act for the SSH node `nodeId` this agent relays (x-skipper-relay-for): the same
   * connection and credential (a renewed certificate included), each call naming that node.
   */
  relayFor?(nodeId: string): ControllerClients;
  /**
   * GETs a file the controller serves beside the API (an agent version's bundle) over the same
   * TLS settings and credential; the body is refused past `maxBytes`. Absent on clients made for tests.
   */
  download?(path: string, opts: { signal: AbortSignal; maxBytes: number }): Promise<Download>;
}

/** What a download answered. */
export interface Download {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** The header a relay names the SSH node it acts for with (controller/auth/relay-access.ts). */
export const RELAY_FOR_HEADER = "x-skipper-relay-for";

/** How the agent proves who it is: its bearer token, a client certificate, or nothing (enrollment). */
export type AgentCredential = { token: string } | { certPem: string; keyPem: string } | { none: true };

/**
 * Headers for one call about an order: its request and correlation ids, and `traceparent`, the
 * span the call's own span is a child of (clientSpans below makes it and sends its id instead).
 */
export function traceHeaders(trace: { requestId: string; correlationId: string; traceparent?: string }): {
  headers: Record<string, string>;
} {
  const headers: Record<string, string> = {};
  if (trace.requestId) headers["x-request-id"] = trace.requestId;
  if (trace.correlationId) headers["x-correlation-id"] = trace.correlationId;
  if (parseTraceparent(trace.traceparent)) headers.traceparent = trace.traceparent!;
  return { headers };
}

/**
 * A unary call sent with a traceparent is a client span in that trace, named like the
 * controller's server span for it (skipper.v1.WorkOrderService/ClaimWorkOrder); the call carries
 * the client span's traceparent, so the controller's span is its child. Calls without one (the
 * heartbeat, the watch) are not traced.
 */
const clientSpans: Interceptor = (next) => async (req) => {
  const parent = req.header.get("traceparent");
  if (!parent || req.stream) return next(req);
  const span = beginSpan(`${req.service.typeName}/${req.method.name}`, parent, "client");
  req.header.set("traceparent", span.traceparent);
  try {
    const res = await next(req);
    span.end();
    return res;
  } catch (e) {
    span.end(Code[ConnectError.from(e).code]);
    throw e;
  }
};

/**
 * A createConnection for http2.connect that keeps the TLS session the controller last handed out
 * and offers it on the next connection, so a reconnect (after a controller restart, a cut
 * connection) resumes it: an abbreviated handshake without the certificate signature and checks,
 * instead of a full one. A session the controller no longer knows costs nothing: the handshake
 * is then a full one. One connector per credential (a session carries its client certificate),
 * with one TLS context.
 * A plain-HTTP controller (h2c) gets a plain TCP connection.
 */
export function resumingConnector(): (authority: URL, options: object) => Duplex {
  let session: Buffer | undefined;
  // Made once from the first connection's options (they are this credential's, the same every
  // time): building one per attempt (parsing the CA, the certificate and the key) cost about a
  // millisecond of CPU each, which adds up in a reconnect loop.
  let context: tls.SecureContext | undefined;
  // http2.connect hands over its own options: the TLS ones (ca, cert, key, localAddress) among them.
  return (authority, options: tls.ConnectionOptions) => {
    const host = authority.hostname.replace(/^\[|\]$/g, "");
    const tlsOn = authority.protocol === "https:";
    const port = Number(authority.port || (tlsOn ? 443 : 80));
    if (!tlsOn) return net.connect({ ...(options as net.NetConnectOpts), host, port } as net.NetConnectOpts);
    // What http2.connect sets itself when it makes the connection: h2 by ALPN, SNI for a name.
    context ??= tls.createSecureContext(options);
    const socket = tls.connect({
      ...options,
      secureContext: context,
      host,
      port,
      ...(net.isIP(host) ? {} : { servername: host }),
      ALPNProtocols: ["h2"],
      ...(session ? { session } : {}),
    });
    // TLS 1.3 sends its tickets after the handshake, one or more: the last one is kept.
    socket.on("session", (s: Buffer) => {
      session = s;
    });
    return socket;
  };
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
    const interceptors: Interceptor[] = [clientSpans];
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
      nodeOptions: { ...ca, ...clientCert, createConnection: resumingConnector() },
      interceptors,
      defaultTimeoutMs: opts.timeoutMs ?? 30_000,
      // Idle agents keep one connection; pings notice a dead controller between polls.
      pingIntervalMs: 30_000,
      idleConnectionTimeoutMs: 5 * 60_000,
    });
  };
  // Every client goes through this one, so a new certificate applies to all of them at once.
  let current = make(opts.credential);
  let credential = opts.credential;
  const transport: Transport = {
    unary: (...args) => current.unary(...args),
    stream: (...args) => current.stream(...args),
  };
  const clients = clientsOver(transport, (cert) => {
    current = make(cert);
    credential = cert;
  });
  clients.download = (path, o) => download(opts.baseUrl, ca, credential, path, o);
  return clients;
}

// One GET over its own HTTP/2 connection (downloads are rare: an update now and then).
function download(
  baseUrl: string,
  ca: { ca?: string },
  credential: AgentCredential,
  path: string,
  o: { signal: AbortSignal; maxBytes: number },
): Promise<Download> {
  const clientCert = "certPem" in credential ? { cert: credential.certPem, key: credential.keyPem } : {};
  return new Promise((resolve, reject) => {
    const session = http2.connect(baseUrl, { ...ca, ...clientCert });
    const fail = (e: unknown) => {
      session.destroy();
      reject(e instanceof Error ? e : new Error(String(e)));
    };
    session.on("error", fail);
    const headers: http2.OutgoingHttpHeaders = { ":method": "GET", ":path": path };
    if ("token" in credential) headers.authorization = `Bearer ${credential.token}`;
    const req = session.request(headers, { signal: o.signal });
    const chunks: Buffer[] = [];
    let size = 0;
    let answer: Record<string, string> = {};
    let status = 0;
    req.on("response", (h) => {
      status = Number(h[":status"] ?? 0);
      answer = Object.fromEntries(
        Object.entries(h)
          .filter(([k]) => !k.startsWith(":"))
          .map(([k, v]) => [k, String(v)]),
      );
    });
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > o.maxBytes) fail(new Error(`${path}: the answer is larger than ${o.maxBytes} bytes`));
      else chunks.push(c);
    });
    req.on("error", fail);
    req.on("end", () => {
      session.close();
      // A stream the server reset part-way ends without an error: a cut answer is a failure.
      const expected = answer["content-length"] === undefined ? undefined : Number(answer["content-length"]);
      if (req.rstCode !== undefined && req.rstCode !== http2.constants.NGHTTP2_NO_ERROR)
        return reject(new Error(`${path}: the stream was reset (code ${req.rstCode}) after ${size} bytes`));
      if (expected !== undefined && expected !== size) return reject(new Error(`${path}: ${size} of ${expected} bytes arrived`));
      resolve({ status, headers: answer, body: Buffer.concat(chunks) });
    });
    req.end();
  });
}

function clientsOver(transport: Transport, useCertificate: ControllerClients["useCertificate"]): ControllerClients {
  return {
    nodes: createClient(NodeService, transport),
    orders: createClient(WorkOrderService, transport),
    enrollment: createClient(EnrollmentService, transport),
    bundles: createClient(AgentBundleService, transport),
    useCertificate,
    relayFor(nodeId) {
      const named = (header: ConstructorParameters<typeof Headers>[0]) => {
        const h = new Headers(header);
        h.set(RELAY_FOR_HEADER, nodeId);
        return h;
      };
      const relayed: Transport = {
        unary: (method, signal, timeoutMs, header, ...rest) => transport.unary(method, signal, timeoutMs, named(header), ...rest),
        stream: (method, signal, timeoutMs, header, ...rest) => transport.stream(method, signal, timeoutMs, named(header), ...rest),
      };
      return clientsOver(relayed, useCertificate);
    },
  };
}
