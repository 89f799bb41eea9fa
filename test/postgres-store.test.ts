// The PostgreSQL store against a real PostgreSQL (the private server scripts/postgres.sh starts
// for the test run): the whole conformance suite, each case on a database of its own, plus what
// only a shared database can show (two stores at once, schema migrations under a lock).
import pg from "pg";
import { describe, expect, it } from "vitest";
import { PostgresStore } from "../controller/store/postgres/pg-store.js";
import { migrate, MIGRATIONS } from "../controller/store/postgres/migrations.js";
import { describeStoreConformance, expectCode, order, tenant } from "./store-conformance.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";

const url = pgUrl();
if (!url) console.warn("\n!!! no PostgreSQL for the tests: the PostgreSQL store's tests are SKIPPED\n");

let n = 0;
const nextName = () => `store_${process.pid}_${n++}`;

describe.skipIf(!url)("PostgreSQL store", () => {
  describeStoreConformance("postgres", async () => {
    const db = await freshDatabase(nextName());
    let current = new PostgresStore(db, { maxConnections: 25 });
    await current.open();
    return {
      store: current,
      reopen: async () => {
        await current.close();
        current = new PostgresStore(db, { maxConnections: 25 });
        await current.open();
        return current;
      },
      cleanup: async () => {
        await current.close();
      },
    };
  });

  it("two stores on one database see each other's writes, and of their claims of one order exactly one wins", async () => {
    const db = await freshDatabase(nextName());
    const a = new PostgresStore(db);
    const b = new PostgresStore(db);
    await Promise.all([a.open(), b.open()]);
    try {
      const created = await a.createResource(tenant("shared"));
      expect((await b.getResource("tenant", "shared"))?.metadata?.resourceVersion).toBe(created.metadata?.resourceVersion);
      await expectCode(b.createResource(tenant("shared")), "CONFLICT");
      // Versions keep growing whichever store writes.
      const updated = await b.updateResource("tenant", "shared", (r) => {
        r.metadata!.annotations = { by: "b" };
        return r;
      });
      expect(BigInt(updated.metadata!.resourceVersion)).toBeGreaterThan(BigInt(created.metadata!.resourceVersion));
      expect(await a.currentRevision()).toBe(BigInt(updated.metadata!.resourceVersion));

      await a.createWorkOrder(order("wo-shared", "node-1"));
      const claims = await Promise.allSettled(
        Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).claimWorkOrder("wo-shared", "node-1", new Date(), 30_000)),
      );
      expect(claims.filter((c) => c.status === "fulfilled")).toHaveLength(1);
      const running = await b.getWorkOrder("wo-shared");
      expect(running?.fencingToken).toBe(1n);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("controllers starting at once apply each schema migration once", async () => {
    const db = await freshDatabase(nextName());
    const clients = Array.from({ length: 4 }, () => new pg.Client({ connectionString: db }));
    await Promise.all(clients.map((c) => c.connect()));
    try {
      const applied = await Promise.all(clients.map((c) => migrate(c)));
      expect(applied.flat().sort()).toEqual(MIGRATIONS.map((m) => m.version));
      const { rows } = await clients[0]!.query("SELECT version FROM schema_migrations ORDER BY version");
      expect(rows.map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version));
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  it("a database with a schema newer than this controller knows is refused, and left as it was", async () => {
    const db = await freshDatabase(nextName());
    const store = new PostgresStore(db);
    await store.open();
    await store.close();
    const c = new pg.Client({ connectionString: db });
    await c.connect();
    try {
      await c.query("INSERT INTO schema_migrations (version, name) VALUES (9999, 'from the future')");
      await expect(new PostgresStore(db).open()).rejects.toThrow(/newer than this controller knows/);
      const { rows } = await c.query("SELECT count(*)::int AS n FROM schema_migrations");
      expect(rows[0].n).toBe(MIGRATIONS.length + 1);
    } finally {
      await c.end();
    }
  });
});
