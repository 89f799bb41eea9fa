// What controllers sharing one store tell each other, and which of them runs the singleton loops
// (reconcile passes and sweeps, lease expiry, node liveness, retention). A store that only one
// controller can open (the file store: the data directory is locked) has soleCoordination: this
// controller always leads and has nobody to tell. The PostgreSQL store's is pg-coordination.ts.
import { KeyedLock } from "../base/keyed-lock.js";

/** A message from another controller on one topic. */
export type CoordinationListener = (message: string) => void;

export interface Coordination {
  /** This controller's id among its peers (logs and messages carry it). */
  readonly controllerId: string;
  /** True when other controllers may share the store (messages then matter). */
  readonly shared: boolean;
  /** True while this controller leads. */
  readonly leading: boolean;
  /**
   * Starts seeking leadership: `change(true)` once this controller leads, `change(false)` if it
   * stops leading (its hold on the store was lost); a controller that lost leadership should stop
   * its loops before another one starts them, and in practice exit and be restarted.
   */
  start(change: (leading: boolean) => void): Promise<void>;
  /** Sends `message` on `topic` to every other controller (best effort: a lost message costs latency, not correctness). */
  broadcast(topic: string, message: string): void;
  /** Calls `fn` for every message of `topic` from another controller. */
  subscribe(topic: string, fn: CoordinationListener): void;
  /**
   * Runs `fn` while no other controller runs an exclusive section of the same key (a tenant's
   * target records, an idempotency key). Within one process, callers serialise through
   * sharedLock's in-process lock first, so each waiting key costs one database session at most.
   */
  exclusive<T>(key: string, fn: () => Promise<T>): Promise<T>;
  /** Stops seeking leadership and releases it. Idempotent. */
  close(): Promise<void>;
}

/** One controller alone on its store: it leads from the start and has nobody to tell. */
export function soleCoordination(controllerId = "sole"): Coordination {
  let leading = false;
  return {
    controllerId,
    shared: false,
    get leading() {
      return leading;
    },
    async start(change) {
      leading = true;
      change(true);
    },
    broadcast: () => undefined,
    subscribe: () => undefined,
    exclusive: (_key, fn) => fn(),
    async close() {
      leading = false;
    },
  };
}

/** A lock per key that holds across the controllers of `coordination` (and within this one). */
export function sharedLock(coordination: Coordination): { run<T>(key: string, fn: () => Promise<T>): Promise<T> } {
  const local = new KeyedLock();
  return { run: (key, fn) => local.run(key, () => coordination.exclusive(key, fn)) };
}
