// Which connections a credential has vouched for. The listener (listener.ts) keeps connections
// nobody vouched for in a bounded pool (the oldest closed first) and lets them open few HTTP/2
// streams; the front doors call vouchFor once a call on a connection is admitted with a
// credential, and the connection leaves the pool with every stream it is allowed. So a client
// without a credential holds a bounded number of connections and streams, whatever it sends.
import type http from "node:http";
import type http2 from "node:http2";
import type net from "node:net";

/** Set by the listener on a connection's TCP socket: what vouching for it does. */
export const VOUCH = Symbol("skipper.vouch");

export type Vouchable = net.Socket & { [VOUCH]?: () => void };

/** Marks the connection `req` arrived on as vouched for (a call on it was admitted with a credential). */
export function vouchFor(req: http.IncomingMessage | http2.Http2ServerRequest): void {
  const session = (req as http2.Http2ServerRequest).stream?.session;
  rawSocket(session?.socket ?? req.socket)?.[VOUCH]?.();
}

/** The TCP socket under a TLS one (what the connection caps count); the socket itself otherwise. */
export function rawSocket(socket: unknown): Vouchable | undefined {
  const s = socket as (Vouchable & { _parent?: Vouchable }) | undefined;
  return s?._parent ?? s;
}
