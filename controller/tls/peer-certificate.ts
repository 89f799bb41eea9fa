// The client certificate a caller presented, read from its TLS socket. The listener asks every
// client for a certificate signed by the client CA but does not insist (bearer credentials and
// anonymous health checks come without one); whether TLS accepted it travels along as `error`.
import type { TLSSocket } from "node:tls";
import type { PeerCertificate } from "../base/context.js";

const NODE_URI = /(?:^|,\s*)URI:spiffe:\/\/skipper\/node\/([^,\s]+)/;

// getPeerCertificate() builds the whole certificate object (DER, key, fingerprints) on every call:
// about a tenth of a small call's CPU. A connection's certificate cannot change (HTTP/2 forbids
// renegotiation), so it is read once per connection.
const perConnection = new WeakMap<object, PeerCertificate | null>();

/** The client certificate of the connection `req` came on, or undefined when none was presented. */
export function peerCertificateOf(req: { socket: unknown; stream?: { session?: { socket?: unknown } } }): PeerCertificate | undefined {
  // HTTP/2 requests see a proxy of the connection's socket, made anew per request: the session
  // socket is the connection's own object. HTTP/1.1 requests see the socket itself.
  const socket = (req.stream?.session?.socket ?? req.socket) as object | undefined;
  if (!socket) return undefined;
  const known = perConnection.get(socket);
  if (known !== undefined) return known ?? undefined;
  const read = readPeer(socket);
  perConnection.set(socket, read ?? null);
  return read;
}

function readPeer(socket: unknown): PeerCertificate | undefined {
  const s = socket as Partial<TLSSocket> | undefined;
  if (typeof s?.getPeerCertificate !== "function") return undefined;
  const c = s.getPeerCertificate();
  if (!c?.serialNumber) return undefined;
  const nodeId = NODE_URI.exec(c.subjectaltname ?? "")?.[1];
  return {
    serial: normalSerial(c.serialNumber),
    ...(nodeId ? { nodeId } : {}),
    notAfter: new Date(c.valid_to),
    ...(s.authorized ? {} : { error: String(s.authorizationError ?? "not accepted") }),
  };
}

/** A serial number as compared everywhere: uppercase hex without leading zeros. */
export function normalSerial(hex: string): string {
  return hex.toUpperCase().replace(/^0+(?=.)/, "");
}
