// Coordination of controllers that share one PostgreSQL database (see ../coordination.ts), on one
// connection of each controller's own:
// - leadership is a session-level advisory lock: the controller whose session holds it leads. A
//   leader that dies (kill -9, a lost machine) loses its session and with it the lock, which the
//   others try for every `pollMs`; so the loops move within about a second of the old session's end.
// - messages are NOTIFYs on one channel, each a JSON envelope {from, topic, message}; everyone
//   LISTENs and skips its own. PostgreSQL delivers a NOTIFY only once its transaction commits, in
//   order, to every listening session; a session that is down misses them (best effort).
// - exclusive sections are session-level advisory locks on sessions from a small pool. A section
//   entered inside another one of the same call (a keyed Apply holds its idempotency key, then
//   takes its tenant's records) takes its lock on the session the outer one holds, so one caller
//   never holds a session while it waits for a second: with separate sessions, as many keyed
//   Applies as the pool has sessions each held one and waited for another, for ever. Every wait
//   (for a session, for a lock) gives up after lockWaitMs with UNAVAILABLE; a leader whose waits
//   keep giving up steps down, and close() ends the sessions still waiting.
import { AsyncLocalStorage } from "node:async_hooks";
import pg from "pg";
import { SkipperError } from "../../base/errors.js";
import type { Coordination, CoordinationListener } from "../coordination.js";

export interface PgCoordinationOptions {
  controllerId: string;
  /** How often a follower tries for leadership and a leader checks its session (default 1 s). */
  pollMs?: number;
  /** A connection problem (it is retried at the next poll). */
  onError?: (msg: string, err: unknown) => void;
  /** Sessions for exclusive sections held at once (default 16; more wait for one). */
  lockSessions?: number;
  /** How long an exclusive section waits for a session and then for its lock before UNAVAILABLE (default 30 s). */
  lockWaitMs?: number;
  /** A leader whose waits give up this many times in a row, with none succeeding, steps down (default 3). */
  stepDownAfter?: number;
}

/** The session an exclusive section holds, for sections entered inside it. */
interface HeldSession {
  client: pg.PoolClient;
  /** False once the outer section has given the session back. */
  open: boolean;
  /** True while a nested section uses it (a second nested one at the same time takes its own). */
  busy: boolean;
}

const CHANNEL = "skipper_controllers";
// pg_advisory_lock takes a bigint: any constant every controller agrees on ("lead").
const LEADER_LOCK = 0x6c656164;
// NOTIFY payloads must stay under 8000 bytes.
export const MAX_MESSAGE_BYTES = 7500;

export class PgCoordination implements Coordination {
  readonly shared = true;
  readonly controllerId: string;
  private client: pg.Client | undefined;
  private connecting: Promise<pg.Client> | undefined;
  private isLeading = false;
  private change: ((leading: boolean) => void) | undefined;
  private readonly listeners = new Map<string, Set<CoordinationListener>>();
  // Sessions for exclusive sections (a session-level advisory lock lives and dies with its session).
  private readonly lockPool: pg.Pool;
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | undefined;
  private queries: Promise<unknown> = Promise.resolve();
  private closed = false;
  private readonly pollMs: number;
  private readonly onError: (msg: string, err: unknown) => void;
  private readonly held = new AsyncLocalStorage<HeldSession>();
  private readonly lockWaitMs: number;
  private readonly stepDownAfter: number;
  private timeoutsInARow = 0;
  // Sessions taken for exclusive sections: close() ends those still waiting.
  private readonly inUse = new Set<pg.PoolClient>();

  constructor(
    private readonly url: string,
    options: PgCoordinationOptions,
  ) {
    this.controllerId = options.controllerId;
    this.pollMs = options.pollMs ?? 1000;
    this.onError = options.onError ?? (() => undefined);
    this.lockWaitMs = options.lockWaitMs ?? 30_000;
    this.stepDownAfter = options.stepDownAfter ?? 3;
    this.lockPool = new pg.Pool({ connectionString: url, max: options.lockSessions ?? 16, connectionTimeoutMillis: this.lockWaitMs });
    this.lockPool.on("error", (e) => this.onError("a lock session to PostgreSQL broke", e));
    // lock_timeout bounds pg_advisory_lock's wait like any other lock's.
    this.lockPool.on("connect", (c) => {
      c.query(`SET lock_timeout = ${Math.max(1, Math.round(this.lockWaitMs))}`).catch((e: unknown) =>
        this.onError("could not set lock_timeout", e),
      );
    });
  }

  get leading(): boolean {
    return this.isLeading;
  }

  async start(change: (leading: boolean) => void): Promise<void> {
    this.change = change;
    await this.poll();
  }

  broadcast(topic: string, message: string): void {
    const payload = JSON.stringify({ from: this.controllerId, topic, message });
    if (Buffer.byteLength(payload) > MAX_MESSAGE_BYTES) throw new Error(`a ${topic} message of ${payload.length} bytes is too big to send`);
    const c = this.client;
    if (!c) return; // reconnecting: lost, as the contract allows
    this.serial(c, "SELECT pg_notify($1, $2)", [CHANNEL, payload]).catch((e: unknown) =>
      this.onError("could not notify other controllers", e),
    );
  }

  // The session's queries one after another: notifies come at any time, between the poll's
  // checks, and pg wants one query at a time on a client (a second one queued inside it is
  // deprecated and goes in pg 9).
  private serial<R extends pg.QueryResultRow>(c: pg.Client, sql: string, args?: unknown[]): Promise<pg.QueryResult<R>> {
    const next = this.queries.then(() => c.query<R>(sql, args));
    this.queries = next.catch(() => undefined);
    return next;
  }

  subscribe(topic: string, fn: CoordinationListener): void {
    let set = this.listeners.get(topic);
    if (!set) this.listeners.set(topic, (set = new Set()));
    set.add(fn);
  }

  async exclusive<T>(key: string, fn: () => Promise<T>): Promise<T> {
    // A 64-bit hash of the key in its own namespace: a collision only makes two keys wait for each other.
    const id = `skipper:${key}`;
    const outer = this.held.getStore();
    if (outer?.open && !outer.busy) {
      outer.busy = true;
      try {
        await this.lock(outer.client, key, id);
        try {
          return await fn();
        } finally {
          await outer.client.query("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [id]).catch((e: unknown) => {
            this.onError("could not release a nested lock; it goes with its session", e);
          });
        }
      } finally {
        outer.busy = false;
      }
    }
    const c = await this.session(key);
    try {
      await this.lock(c, key, id);
    } catch (e) {
      this.giveBack(c, e instanceof SkipperError ? undefined : asError(e));
      throw e;
    }
    const mine: HeldSession = { client: c, open: true, busy: false };
    try {
      return await this.held.run(mine, fn);
    } finally {
      mine.open = false;
      // A session that cannot unlock is discarded: its end releases the lock instead.
      const failed = await c.query("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [id]).then(() => undefined, asError);
      this.giveBack(c, failed);
    }
  }

  // A session of the lock pool, or UNAVAILABLE when none came free within lockWaitMs.
  private async session(key: string): Promise<pg.PoolClient> {
    if (this.closed) throw this.unavailable(key, "the controller is shutting down");
    let c: pg.PoolClient;
    try {
      c = await this.lockPool.connect();
    } catch (e) {
      if (/timeout/i.test(asError(e).message)) throw this.timedOut(key, "no lock session came free");
      throw e;
    }
    this.inUse.add(c);
    return c;
  }

  private giveBack(c: pg.PoolClient, failed: Error | undefined): void {
    this.inUse.delete(c);
    c.release(failed);
  }

  // Takes the lock on `c`; UNAVAILABLE when it stayed taken for lockWaitMs (lock_timeout).
  private async lock(c: pg.PoolClient, key: string, id: string): Promise<void> {
    try {
      await c.query("SELECT pg_advisory_lock(hashtextextended($1, 0))", [id]);
    } catch (e) {
      if ((e as { code?: string }).code === "55P03") throw this.timedOut(key, "the lock stayed taken");
      if (this.closed) throw this.unavailable(key, "the controller is shutting down");
      throw e;
    }
    this.timeoutsInARow = 0;
  }

  private timedOut(key: string, why: string): SkipperError {
    this.timeoutsInARow++;
    if (this.isLeading && this.timeoutsInARow >= this.stepDownAfter) {
      // A leader that cannot take the locks its loops need does no work; another controller may.
      this.onError(`stepping down: ${this.timeoutsInARow} lock waits in a row gave up`, new Error(why));
      this.timeoutsInARow = 0;
      this.dropClient(this.client);
    }
    return this.unavailable(key, `${why} within ${this.lockWaitMs} ms`);
  }

  private unavailable(key: string, why: string): SkipperError {
    const what = key.startsWith("idem:") ? "idempotency key" : key.replace(/:.*/, "");
    return new SkipperError("UNAVAILABLE", `busy: could not take the ${what} lock (${why}); retry`, {
      lock: what,
      retry_after_ms: 1000,
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.polling;
    const c = this.client;
    this.client = undefined;
    this.isLeading = false;
    // Ending the session releases the advisory lock: a follower takes over at its next poll.
    await c?.end().catch(() => undefined);
    // Sessions still waiting for a lock would hold pool.end() for as long as they wait: end them
    // (their callers get an error, and their locks go with them).
    for (const s of this.inUse) (s as unknown as pg.Client).end().catch(() => undefined);
    await this.lockPool.end().catch(() => undefined);
  }

  // Connects if need be, then tries for leadership (a follower) or checks the session (a leader).
  private poll(): Promise<void> {
    const run = async () => {
      try {
        const c = this.client ?? (await this.connect());
        if (this.isLeading) {
          await this.serial(c, "SELECT 1");
        } else {
          const { rows } = await this.serial<{ got: boolean }>(c, "SELECT pg_try_advisory_lock($1) AS got", [LEADER_LOCK]);
          if (rows[0]?.got && this.client === c && !this.closed) {
            this.isLeading = true;
            this.change?.(true);
          }
        }
      } catch (e) {
        this.onError("the coordination connection to PostgreSQL failed; retrying", e);
        this.dropClient(this.client);
      }
    };
    this.polling = run().finally(() => {
      this.polling = undefined;
      if (!this.closed) {
        this.timer = setTimeout(() => void this.poll(), this.pollMs);
        this.timer.unref();
      }
    });
    return this.polling;
  }

  private connect(): Promise<pg.Client> {
    this.connecting ??= (async () => {
      // A hung connection must not hold a leader's check for ever.
      const c = new pg.Client({ connectionString: this.url, keepAlive: true, query_timeout: Math.max(5000, this.pollMs * 5) });
      c.on("error", (e) => {
        this.onError("the coordination connection to PostgreSQL broke", e);
        this.dropClient(c);
      });
      c.on("end", () => this.dropClient(c));
      c.on("notification", (n) => this.deliver(n.payload));
      await c.connect();
      await c.query(`LISTEN ${CHANNEL}`);
      if (this.closed) {
        await c.end();
        throw new Error("closed");
      }
      this.client = c;
      return c;
    })().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  // The session is gone: so are the lock and the LISTEN. A leader stops leading at once.
  private dropClient(c: pg.Client | undefined): void {
    if (!c || this.client !== c) return;
    this.client = undefined;
    c.end().catch(() => undefined);
    if (this.isLeading) {
      this.isLeading = false;
      this.change?.(false);
    }
  }

  private deliver(payload: string | undefined): void {
    if (!payload) return;
    let m: { from?: unknown; topic?: unknown; message?: unknown };
    try {
      m = JSON.parse(payload) as typeof m;
    } catch {
      return;
    }
    if (m.from === this.controllerId || typeof m.topic !== "string" || typeof m.message !== "string") return;
    for (const fn of this.listeners.get(m.topic) ?? []) {
      try {
        fn(m.message);
      } catch (e) {
        this.onError(`a ${m.topic} message could not be handled`, e);
      }
    }
  }
}

function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}
