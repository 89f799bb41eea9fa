// The client certificate a caller presented, read from its TLS socket. The listener asks every
// client for a certificate signed by the client CA but does not insist (bearer credentials and
// anonymous health checks come without one); whether TLS accepted it travels along as `error`.
import type { TLSSocket } from "node:tls";
import type { PeerCertificate } from "../context.js";

const NODE_URI = /(?:^|,\s*)URI:spiffe:\/\/skipper\/node\/([^,\s]+)/;

/** The certificate presented on `socket`, or undefined when none was (or it is not TLS). */
export function peerCertificateOf(socket: unknown): PeerCertificate | undefined {
  const s = socket as Partial<TLSSocket> | undefined;
  if (typeof s?.getPeerCertificate !== "function") return undefined;
  const c = s.getPeerCertificate();
  if (!c || !c.serialNumber) return undefined;
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
