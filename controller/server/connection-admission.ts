// Admission of accepted TCP connections, before any TLS work is spent on them: the caps in all and
// per address, and the pool of connections no admitted call has vouched for yet. When that pool
// is full and none of it may be evicted, an arrival waits in a bounded line (waiting-line.ts),
// held unread by TLS, and is let in as a pool member leaves (vouched, closed, evicted). Refusing
// it instead sent each client to its backoff (0.5 s doubling to 30 s) while the controller idled:
// a 10,000-agent restart storm took 153-164 s with the default pool (bench:fleet, README).
import type net from "node:net";
import { VOUCH, type Vouchable } from "../boundary/connection-vouch.js";
import { type LineExit, WaitingLine } from "./waiting-line.js";

/** The caps admission keeps (listener.ts ConnectionLimits says what each means). */
export interface AdmissionLimits {
  maxConnectionsPerAddress: number;
  maxConnections: number;
  maxUnvouchedConnections: number;
  unvouchedGraceMs: number;
  maxWaitingConnections: number;
  connectionWaitMs: number;
}

/** Which cap closed a connection on arrival. */
export type RefusedCap = "per-address" | "total" | "unvouched";

/** What became of a connection held in the line: held, let in, or closed while waiting (past connectionWaitMs, or by its client). */
export type LineEvent = "held" | "let-in" | LineExit;

export interface AdmissionOptions {
  /** False when maxUnvouchedConnections is 0: no pool, no line. */
  vouching: boolean;
  /** Connections do a TLS handshake (their grace starts at its end). */
  tlsHandshakes: boolean;
  /** Hands an admitted connection on to TLS or HTTP (it may be paused: the receiver reads it). */
  enter(s: net.Socket): void;
  onRefusedConnection?: (address: string, cap: RefusedCap) => void;
  onWaitingConnection?: (address: string, event: LineEvent) => void;
}

/** Admits accepted connections under the caps; told when a connection's TLS handshake is done. */
export interface Admission {
  arrive(s: net.Socket): void;
  handshaken(s: net.Socket | undefined): void;
  /** Stops the line's clock (the server closes; its sockets, held ones too, are closed by it). */
  stop(): void;
}

/**
 * How often the line is looked at while someone waits: those past their wait are closed, and pool
 * members past their grace make room for the first in line (as an arrival's would).
 */
const LINE_TICK_MS = 250;

/**
 * Connections no admitted call has vouched for yet, by client address, each oldest first; when
 * each one's grace began (its arrival, then the end of its TLS handshake), and which are past
 * their handshake (all of them without TLS).
 */
class UnvouchedPool {
  private readonly byAddress = new Map<string, Set<net.Socket>>();
  private readonly graceFrom = new WeakMap<net.Socket, number>();
  private readonly shaken = new WeakSet<net.Socket>();
  private size = 0;

  constructor(
    private readonly limits: AdmissionLimits,
    private readonly tlsHandshakes: boolean,
    /** Told after a member left (vouched for, closed, evicted). */
    private readonly onLeave: () => void,
  ) {}

  full(): boolean {
    return this.size >= this.limits.maxUnvouchedConnections;
  }

  join(s: net.Socket, address: string, now: number): void {
    this.graceFrom.set(s, now);
    if (!this.tlsHandshakes) this.shaken.add(s);
    let group = this.byAddress.get(address);
    if (!group) this.byAddress.set(address, (group = new Set()));
    group.add(s);
    this.size++;
    (s as Vouchable)[VOUCH] = () => this.leave(s, address);
  }

  leave(s: net.Socket, address: string): void {
    const group = this.byAddress.get(address);
    if (!group?.delete(s)) return;
    this.size--;
    if (group.size === 0) this.byAddress.delete(address);
    this.onLeave();
  }

  handshaken(s: net.Socket): void {
    if (this.shaken.has(s)) return;
    this.shaken.add(s);
    this.graceFrom.set(s, Date.now());
  }

  /**
   * The address holding most of the pool gives up its oldest connection if evictable (a client
   * without a credential evicts its own connections, not other addresses' agents on their way
   * in); it is returned, out of the pool. Undefined when no candidate is.
   */
  evictOne(now: number): net.Socket | undefined {
    const groups = [...this.byAddress.values()].sort((a, b) => b.size - a.size);
    for (const group of groups) {
      const oldest: net.Socket | undefined = group.values().next().value;
      if (!oldest || !this.evictable(oldest, group.size, now)) continue;
      this.leave(oldest, oldest.remoteAddress ?? "");
      return oldest;
    }
    return undefined;
  }

  // Past its grace, a connection may be evicted once its handshake is done, or while it is not
  // when its address holds others in the pool (one client's many half-open connections).
  private evictable(s: net.Socket, groupSize: number, now: number): boolean {
    return now - (this.graceFrom.get(s) ?? 0) >= this.limits.unvouchedGraceMs && (groupSize > 1 || this.shaken.has(s));
  }
}

/** Admits each accepted connection under `limits`, keeping `sockets` to those open (held ones too). */
export function connectionAdmission(limits: AdmissionLimits, sockets: Set<net.Socket>, opts: AdmissionOptions): Admission {
  const { vouching, enter, onRefusedConnection, onWaitingConnection } = opts;
  const perAddress = new Map<string, number>();
  const line = new WaitingLine(limits.maxWaitingConnections, limits.connectionWaitMs, (s, why) =>
    onWaitingConnection?.(s.remoteAddress ?? "", why),
  );
  // Deferred: a member leaves inside a call's admission or a socket's close, not the place to start a handshake.
  const pool = new UnvouchedPool(limits, opts.tlsHandshakes, () => line.size > 0 && process.nextTick(letIn));
  let tick: NodeJS.Timeout | undefined;

  // The first in line take the room there is, in order.
  const letIn = () => {
    while (!pool.full() && line.size > 0) {
      const s = line.take()!;
      pool.join(s, s.remoteAddress ?? "", Date.now());
      onWaitingConnection?.(s.remoteAddress ?? "", "let-in");
      enter(s);
    }
    if (line.size === 0 && tick) {
      clearInterval(tick);
      tick = undefined;
    }
  };
  // The pool is full: one member past its grace, if any, is closed to make room. False when none is.
  const evictOne = (now: number): boolean => {
    const evicted = pool.evictOne(now);
    if (!evicted) return false;
    onRefusedConnection?.(evicted.remoteAddress ?? "", "unvouched");
    evicted.destroy();
    return true;
  };
  const lookAtLine = () => {
    const now = Date.now();
    line.expire(now);
    letIn();
    // Each waiting connection may evict one pool member, as it would have on arrival.
    for (let n = line.size; n > 0 && evictOne(now); n--) letIn();
  };
  const count = (s: net.Socket, address: string) => {
    perAddress.set(address, (perAddress.get(address) ?? 0) + 1);
    sockets.add(s);
    s.on("close", () => {
      pool.leave(s, address);
      sockets.delete(s);
      const left = (perAddress.get(address) ?? 1) - 1;
      if (left > 0) perAddress.set(address, left);
      else perAddress.delete(address);
    });
  };
  const refuse = (s: net.Socket, address: string, cap: RefusedCap) => {
    onRefusedConnection?.(address, cap);
    s.destroy();
  };

  const arrive = (s: net.Socket) => {
    const address = s.remoteAddress ?? "";
    const open = perAddress.get(address) ?? 0;
    if (limits.maxConnectionsPerAddress > 0 && open >= limits.maxConnectionsPerAddress) return refuse(s, address, "per-address");
    if (limits.maxConnections > 0 && sockets.size >= limits.maxConnections) return refuse(s, address, "total");
    // The socket errors of a connection not yet handed on (a reset while it waits) end it quietly.
    s.on("error", () => undefined);
    if (!vouching) {
      count(s, address);
      return enter(s);
    }
    const now = Date.now();
    // Room made here goes to the first in line (letIn); a newcomer never overtakes a held one.
    if (pool.full()) evictOne(now);
    if (!pool.full() && line.size === 0) {
      count(s, address);
      pool.join(s, address, now);
      return enter(s);
    }
    // Closed before its handshake costs anything; the client retries after its backoff.
    if (!line.hasRoom()) return refuse(s, address, "unvouched");
    count(s, address);
    line.hold(s, now);
    onWaitingConnection?.(address, "held");
    tick ??= setInterval(lookAtLine, LINE_TICK_MS).unref();
  };
  const handshaken = (s: net.Socket | undefined) => s && pool.handshaken(s);
  return { arrive, handshaken, stop: () => clearInterval(tick) };
}
