// The PostgreSQL store's connection pool, shared by its facets: queries and transactions (a
// deadlock or serialisation failure retried), pages of a table in sort_key order, the calls in
// flight (close() waits for them), and the database's errors made the store's own.
import pg from "pg";
import { isSkipperError, SkipperError } from "../../base/errors.js";
import { decodePageToken, encodePageToken, pageSizeOf, pageTag } from "../paging.js";
import type * as S from "../store.js";
import { migrate } from "./migrations.js";
import { fromColumn, toColumn } from "./pg-records.js";

// Deadlocks (40P01) can only arise when a create meets an update of the row it is creating;
// serialisation failures (40001) not at all at READ COMMITTED, but are safe to retry all the same.
const RETRIABLE = new Set(["40P01", "40001"]);

export type Client = pg.PoolClient;

export interface PostgresStoreOptions {
  /** Connections in the pool (default 32). */
  maxConnections?: number;
  /** Called for what open() changed (schema migrations applied). */
  onInfo?: (msg: string, meta: object) => void;
}

/** The pool and what every facet of the PostgreSQL store does with it. */
export class PgDatabase {
  private pool: pg.Pool | undefined;
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly info: (msg: string, meta: object) => void;

  constructor(
    private readonly url: string,
    private readonly options: PostgresStoreOptions = {},
  ) {
    this.info = options.onInfo ?? (() => undefined);
  }

  /** Connects and brings the schema up to date (under an advisory lock: see migrations.ts). */
  async open(): Promise<void> {
    if (this.pool) return;
    const pool = new pg.Pool({ connectionString: this.url, max: this.options.maxConnections ?? 32 });
    // An idle connection the server drops must not take the process down.
    pool.on("error", () => undefined);
    try {
      const client = await pool.connect();
      try {
        const applied = await migrate(client);
        if (applied.length > 0) this.info("applied schema migrations to the PostgreSQL store", { versions: applied });
      } finally {
        client.release();
      }
    } catch (e) {
      await pool.end().catch(() => undefined);
      throw unavailable(e);
    }
    this.pool = pool;
  }

  /** Waits for calls in flight, then closes the pool. Idempotent. */
  async close(): Promise<void> {
    const pool = this.pool;
    if (!pool) return;
    this.pool = undefined;
    await Promise.allSettled([...this.inFlight]);
    await pool.end();
  }

  // One page of `table` in sort_key order: one row more than the page, so the last page has no token.
  async page<T>(
    req: S.PageRequest,
    kind: { tag: string; key: RegExp },
    table: string,
    where: string[],
    args: unknown[],
    out: (body: unknown) => T,
  ): Promise<S.Page<T>> {
    const size = pageSizeOf(req);
    const tag = pageTag(kind.tag, req);
    const resume = decodePageToken(tag, req.pageToken, kind.key);
    const conds = [...where];
    const all = [...args];
    if (resume !== undefined) {
      all.push(toColumn(resume));
      conds.push(`sort_key ${req.newestFirst ? "<" : ">"} $${all.length}`);
    }
    all.push(size + 1);
    const sql = `SELECT sort_key, body FROM ${table}${conds.length ? ` WHERE ${conds.join(" AND ")}` : ""} ORDER BY sort_key${req.newestFirst ? " DESC" : ""} LIMIT $${all.length}`;
    const { rows } = await this.query<{ sort_key: string; body: unknown }>(sql, all);
    const page = rows.slice(0, size);
    return {
      items: page.map((r) => out(r.body)),
      nextPageToken: rows.length > size ? encodePageToken(tag, fromColumn(page[page.length - 1]!.sort_key)) : "",
    };
  }

  query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, args: unknown[] = []): Promise<pg.QueryResult<R>> {
    const pool = this.openPool();
    return this.track(pool.query<R>(sql, args).catch((e: unknown) => Promise.reject(fromDatabase(e))));
  }

  // Runs `fn` in a transaction on one connection; a deadlock or serialisation failure is retried
  // (the transaction was rolled back, so nothing of the first try remains). `begin` may hold more
  // statements after BEGIN (no parameters: it is sent as one simple query, one round trip); `fn`
  // gets their results, one per statement.
  transaction<T>(begin: string, fn: (c: Client, begun: pg.QueryResult[]) => Promise<T>): Promise<T> {
    const pool = this.openPool();
    const run = async (): Promise<T> => {
      for (let attempt = 1; ; attempt++) {
        const c = await pool.connect().catch((e: unknown) => Promise.reject(unavailable(e)));
        let broken: Error | undefined;
        try {
          const begun = (await c.query(begin)) as unknown as pg.QueryResult | pg.QueryResult[];
          const result = await fn(c, Array.isArray(begun) ? begun : [begun]);
          await c.query("COMMIT");
          return result;
        } catch (e) {
          try {
            await c.query("ROLLBACK");
          } catch (rollbackError) {
            broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
          }
          const code = (e as { code?: unknown }).code;
          if (typeof code === "string" && RETRIABLE.has(code) && attempt < 5) continue;
          throw fromDatabase(e);
        } finally {
          // A connection whose rollback failed is discarded, not handed to the next caller.
          c.release(broken);
        }
      }
    };
    return this.track(run());
  }

  track<T>(p: Promise<T>): Promise<T> {
    this.inFlight.add(p);
    const forget = () => this.inFlight.delete(p);
    p.then(forget, forget);
    return p;
  }

  private openPool(): pg.Pool {
    if (!this.pool) throw new SkipperError("INTERNAL_ERROR", "the PostgreSQL store is not open");
    return this.pool;
  }
}

// WHERE conditions of a listing and their parameters: arg(v) adds a parameter and names it ($n).
export function conditions(): { where: string[]; args: unknown[]; arg: (v: unknown) => string } {
  const where: string[] = [];
  const args: unknown[] = [];
  return {
    where,
    args,
    arg: (v) => {
      args.push(v);
      return `$${args.length}`;
    },
  };
}

// Errors of the store's own making pass through; the database's become INTERNAL_ERROR with the
// cause kept for logs (callers never see a backend's error types).
function fromDatabase(e: unknown): Error {
  if (isSkipperError(e)) return e;
  if (e instanceof pg.DatabaseError) {
    return new SkipperError("INTERNAL_ERROR", `the PostgreSQL store failed (SQLSTATE ${e.code ?? "?"})`, {}, { cause: e });
  }
  return unavailable(e);
}

function unavailable(e: unknown): SkipperError {
  if (isSkipperError(e)) return e;
  const reason = e instanceof Error ? e.message : String(e);
  return new SkipperError("INTERNAL_ERROR", `the PostgreSQL store is unavailable: ${reason}`, {}, { cause: e });
}
