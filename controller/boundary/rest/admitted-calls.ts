// How the REST front door hands the caller it admitted to the interceptor. REST calls run through
// an in-memory Connect transport, which does not carry the server-side context values that the
// RPC front door uses; so the REST handler parks the caller (and the connection's client
// certificate) here under a random ticket, sends the ticket in a header of the in-memory call, and
// the interceptor takes it back. The header is never forwarded from a client (rest-handler.ts
// forwards a fixed set), and a ticket a client made up matches nothing.
import { randomUUID } from "node:crypto";
import type { PeerCertificate, Principal } from "../../base/context.js";

/** The header of an in-memory call that names its ticket. */
export const ADMITTED_HEADER = "skipper-admitted";

/** What the front door knew of a call. */
export interface Admitted {
  principal?: Principal;
  peer?: PeerCertificate;
}

const parked = new Map<string, Admitted>();

/** Parks `what` for one call; returns its ticket. Release it when the call is over. */
export function park(what: Admitted): string {
  const ticket = randomUUID();
  parked.set(ticket, what);
  return ticket;
}

/** Forgets a ticket (a call that ended before the interceptor took it). */
export function release(ticket: string): void {
  parked.delete(ticket);
}

/** What was parked under the ticket these headers name, taken (once). */
export function takeParked(headers: { get(name: string): string | null }): Admitted | undefined {
  const ticket = headers.get(ADMITTED_HEADER);
  if (ticket === null) return undefined;
  const what = parked.get(ticket);
  parked.delete(ticket);
  return what;
}
