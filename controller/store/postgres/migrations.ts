// Versioned schema migrations of the PostgreSQL store, applied at open(). Several controllers may
// start at once: each takes the same advisory lock first, so exactly one applies a missing
// version and the others then find it recorded. A database whose schema is newer than this
// controller knows is refused (an older controller must not write to it).
import type pg from "pg";
import * as m0001 from "./migrations/0001-initial.js";
import * as m0002 from "./migrations/0002-api-keys.js";
import * as m0003 from "./migrations/0003-audit.js";
import * as m0004 from "./migrations/0004-enrollment.js";
import * as m0005 from "./migrations/0005-webhooks.js";

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Every migration, in version order. */
export const MIGRATIONS: readonly Migration[] = [m0001, m0002, m0003, m0004, m0005];

// Any constant both sides agree on: pg_advisory_lock takes a bigint key.
const MIGRATION_LOCK = 0x736b6970; // "skip"

/** Applies the migrations `client`'s database lacks; returns the versions applied now. */
export async function migrate(client: pg.ClientBase, migrations: readonly Migration[] = MIGRATIONS): Promise<number[]> {
  await client.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK]);
  try {
    await client.query(
      "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
    );
    const { rows } = await client.query<{ version: number }>("SELECT version FROM schema_migrations ORDER BY version");
    const have = new Set(rows.map((r) => r.version));
    const newest = Math.max(0, ...have);
    const known = Math.max(0, ...migrations.map((m) => m.version));
    if (newest > known) {
      throw new Error(`the database's schema is version ${newest}, newer than this controller knows (${known}): upgrade the controller`);
    }
    const applied: number[] = [];
    for (const m of migrations) {
      if (have.has(m.version)) continue;
      await client.query("BEGIN");
      try {
        await client.query(m.sql);
        await client.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [m.version, m.name]);
        await client.query("COMMIT");
      } catch (e) {
        await client.query("ROLLBACK");
        throw new Error(`schema migration ${m.version} (${m.name}) failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      }
      applied.push(m.version);
    }
    return applied;
  } finally {
    await client.query("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK]);
  }
}
