// What a request body may cost the controller, for every protocol alike (REST, Connect, gRPC,
// gRPC-Web): one table keyed by the permission the contract declares for the method, and the
// budgets that bound the bytes every unfinished body holds at once.
//
// A body is read under three limits: its own size cap, an overall deadline from its first byte to
// its end (not an idle timer, which a byte every 30 s resets for ever), and a reservation of every
// byte it buffers against three pools — its connection's, its client address's and the whole
// controller's, kept apart for open calls (no credential) and admitted ones. So the memory held
// by unfinished request bodies is bounded in total by construction, whatever the number of
// connections, streams or the trickle rate: at most `open.total + admitted.total` bytes.
import type { IncomingMessage } from "node:http";
import type { Http2ServerRequest } from "node:http2";
import type { DescMethod } from "@bufbuild/protobuf";
import { isOpen } from "../auth/admission.js";

/** The limits of one class of calls. */
export interface BodyClass {
  /** Largest body of one call. */
  maxBytes: number;
  /** A body must end within this from the start of reading it. */
  deadlineMs: number;
  /** Bytes all unfinished bodies of this class may hold on one connection, one address, in all. */
  perConnection: number;
  perAddress: number;
  total: number;
}

/** The table: open calls (public and enrollment, nobody vouches for them) and admitted ones. */
export interface BodyLimits {
  open: BodyClass;
  admitted: BodyClass;
}

const MiB = 1024 * 1024;

/**
 * The defaults. Open calls carry a health check or an enrollment's CSR (a few KiB); admitted ones
 * up to a 4 MiB manifest. An admitted body gets a minute, enough for 4 MiB at 1 Mbit/s.
 */
export const DEFAULT_BODY_LIMITS: BodyLimits = {
  open: { maxBytes: 16 * 1024, deadlineMs: 10_000, perConnection: 256 * 1024, perAddress: 1 * MiB, total: 8 * MiB },
  admitted: { maxBytes: 4 * MiB, deadlineMs: 60_000, perConnection: 32 * MiB, perAddress: 64 * MiB, total: 160 * MiB },
};

/** The connection a request arrived on (its HTTP/2 session, or its socket) and the client's address. */
export function connectionOf(req: IncomingMessage | Http2ServerRequest): { connection: object; address: string } {
  const stream = (req as Http2ServerRequest).stream as { session?: object } | undefined;
  return { connection: stream?.session ?? req.socket, address: req.socket?.remoteAddress ?? "" };
}

/** The longest any body may take: what the listener allows a request before its body must end. */
export function longestBodyDeadline(limits: BodyLimits): number {
  return Math.max(limits.open.deadlineMs, limits.admitted.deadlineMs);
}

/** Bytes one body has reserved; give them back with release() when the body is done with. */
export interface BodyReservation {
  /** Reserves `n` more bytes; false (reserving nothing) when a pool would go over. */
  take(n: number): boolean;
  /** Returns everything reserved (idempotent). */
  release(): void;
  /** Which pool refused the last take, if one did. */
  readonly refusedBy: "connection" | "address" | "total" | undefined;
}

/** The pools of one class. Connections are keyed by object (a socket or an HTTP/2 session). */
export class BodyBudget {
  private total = 0;
  private readonly byAddress = new Map<string, number>();
  private readonly byConnection = new WeakMap<object, number>();

  constructor(private readonly limits: Pick<BodyClass, "perConnection" | "perAddress" | "total">) {}

  /** Bytes held in all now. */
  held(): number {
    return this.total;
  }

  /** A reservation for one body arriving on `connection` from `address`. */
  reserve(connection: object, address: string): BodyReservation {
    let mine = 0;
    let refusedBy: BodyReservation["refusedBy"];
    return {
      take: (n) => {
        const onConnection = this.byConnection.get(connection) ?? 0;
        const onAddress = this.byAddress.get(address) ?? 0;
        refusedBy =
          onConnection + n > this.limits.perConnection
            ? "connection"
            : onAddress + n > this.limits.perAddress
              ? "address"
              : this.total + n > this.limits.total
                ? "total"
                : undefined;
        if (refusedBy) return false;
        mine += n;
        this.total += n;
        this.byAddress.set(address, onAddress + n);
        this.byConnection.set(connection, onConnection + n);
        return true;
      },
      release: () => {
        if (mine === 0) return;
        this.total -= mine;
        const onAddress = (this.byAddress.get(address) ?? mine) - mine;
        if (onAddress > 0) this.byAddress.set(address, onAddress);
        else this.byAddress.delete(address);
        const onConnection = (this.byConnection.get(connection) ?? mine) - mine;
        if (onConnection > 0) this.byConnection.set(connection, onConnection);
        else this.byConnection.delete(connection);
        mine = 0;
      },
      get refusedBy() {
        return refusedBy;
      },
    };
  }
}

/** Both classes' budgets, made from one table. */
export class BodyBudgets {
  readonly open: BodyBudget;
  readonly admitted: BodyBudget;
  constructor(readonly limits: BodyLimits = DEFAULT_BODY_LIMITS) {
    this.open = new BodyBudget(limits.open);
    this.admitted = new BodyBudget(limits.admitted);
  }

  /** The class and budget of `method`. */
  of(method: DescMethod): { cls: BodyClass; budget: BodyBudget } {
    return isOpen(method) ? { cls: this.limits.open, budget: this.open } : { cls: this.limits.admitted, budget: this.admitted };
  }
}
