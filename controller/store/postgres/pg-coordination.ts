// Coordination of controllers that share one PostgreSQL database (see ../coordination.ts), on one
// connection of each controller's own:
// - leadership is a session-level advisory lock: the controller whose session holds it leads. A
//   leader that dies (kill -9, a lost machine) loses its session and with it the lock, which the
//   others try for every `pollMs`; so the loops move within about a second of the old session's end.
// - messages are NOTIFYs on one channel, each a JSON envelope {from, topic, message}; everyone
//   LISTENs and skips its own. PostgreSQL delivers a NOTIFY only once its transaction commits, in
//   order, to every listening session; a session that is down misses them (best effort).
import pg from "pg";
import type { Coordination, CoordinationListener } from "../coordination.js";

export interface PgCoordinationOptions {
  controllerId: string;
  /** How often a follower tries for leadership and a leader checks its session (default 1 s). */
  pollMs?: number;
  /** A connection problem (it is retried at the next poll). */
  onError?: (msg: string, err: unknown) => void;
  /** Sessions for exclusive sections held at once (default 16; more wait for one). */
  lockSessions?: number;
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
  private closed = false;
  private readonly pollMs: number;
  private readonly onError: (msg: string, err: unknown) => void;

  constructor(
    private readonly url: string,
    options: PgCoordinationOptions,
  ) {
    this.controllerId = options.controllerId;
    this.pollMs = options.pollMs ?? 1000;
    this.onError = options.onError ?? (() => undefined);
    this.lockPool = new pg.Pool({ connectionString: url, max: options.lockSessions ?? 16 });
    this.lockPool.on("error", (e) => this.onError("a lock session to PostgreSQL broke", e));
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
    c.query("SELECT pg_notify($1, $2)", [CHANNEL, payload]).catch((e: unknown) => this.onError("could not notify other controllers", e));
  }

  subscribe(topic: string, fn: CoordinationListener): void {
    let set = this.listeners.get(topic);
    if (!set) this.listeners.set(topic, (set = new Set()));
    set.add(fn);
  }

  async exclusive<T>(key: string, fn: () => Promise<T>): Promise<T> {
    // A 64-bit hash of the key in its own namespace: a collision only makes two keys wait for each other.
    const id = `skipper:${key}`;
    const c = await this.lockPool.connect();
    try {
      await c.query("SELECT pg_advisory_lock(hashtextextended($1, 0))", [id]);
    } catch (e) {
      c.release(asError(e));
      throw e;
    }
    try {
      return await fn();
    } finally {
      // A session that cannot unlock is discarded: its end releases the lock instead.
      const failed = await c.query("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [id]).then(() => undefined, asError);
      c.release(failed);
    }
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
    await this.lockPool.end().catch(() => undefined);
  }

  // Connects if need be, then tries for leadership (a follower) or checks the session (a leader).
  private poll(): Promise<void> {
    const run = async () => {
      try {
        const c = this.client ?? (await this.connect());
        if (this.isLeading) {
          await c.query("SELECT 1");
        } else {
          const { rows } = await c.query<{ got: boolean }>("SELECT pg_try_advisory_lock($1) AS got", [LEADER_LOCK]);
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
