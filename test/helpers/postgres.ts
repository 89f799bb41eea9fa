// The test run's PostgreSQL server (test/global-setup.ts starts it with scripts/postgres.sh and
// exports SKIPPER_TEST_PG_URL). Tests that need it skip, loudly, when pgUrl() is undefined, and
// take a database of their own from freshDatabase.
import pg from "pg";

/** Database names the server needs, or that the whole run shares. */
const RESERVED = new Set(["postgres", "template0", "template1"]);

/** The URL of the test server's shared database, or undefined when the run has no server. */
export function pgUrl(): string | undefined {
  return process.env.SKIPPER_TEST_PG_URL || undefined;
}

/**
 * An empty database `name` ([a-z0-9_]+) on the test server, dropped first if it exists (its
 * connections are closed); returns its URL. Test files run in parallel: each should use names
 * of its own.
 */
export async function freshDatabase(name: string): Promise<string> {
  const url = pgUrl();
  if (!url) throw new Error("no PostgreSQL server for tests (SKIPPER_TEST_PG_URL is unset)");
  const shared = new URL(url);
  if (!/^[a-z0-9_]{1,63}$/.test(name)) throw new Error(`database name must match [a-z0-9_]{1,63}: ${JSON.stringify(name)}`);
  if (RESERVED.has(name) || name === shared.pathname.slice(1)) throw new Error(`database ${name} is not one a test may drop`);
  // From the maintenance database: a database cannot be dropped by a session inside it.
  const client = new pg.Client({ connectionString: withDatabase(shared, "postgres") });
  await client.connect();
  try {
    // Close the sessions left in it (the tests' own role's), then drop it. Not WITH (FORCE): that
    // must be allowed to end every process in the database, and an autovacuum worker that happens
    // to be there is not ours to end (a clean-clone CI run failed so). A plain DROP waits a few
    // seconds for the ended sessions to go and has autovacuum leave by itself.
    await client.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND usename = current_user AND pid <> pg_backend_pid()",
      [name],
    );
    await client.query(`DROP DATABASE IF EXISTS "${name}"`);
    await client.query(`CREATE DATABASE "${name}"`);
  } finally {
    await client.end();
  }
  return withDatabase(shared, name);
}

function withDatabase(url: URL, name: string): string {
  const copy = new URL(url);
  copy.pathname = `/${name}`;
  return copy.toString();
}
