// scripts/postgres.sh's server as the global setup started it: its URL answers, it keeps the
// durability settings, and freshDatabase hands out empty databases.
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";

const url = pgUrl();
if (!url) console.warn("\n!!! SKIPPER_TEST_PG_URL is unset: the PostgreSQL server tests are SKIPPED\n");

describe.skipIf(!url)("the test run's PostgreSQL server", () => {
  const clients: pg.Client[] = [];
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.end()));
  });

  async function connect(to: string): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: to });
    await client.connect();
    clients.push(client);
    return client;
  }

  it("answers select 1 at its URL", async () => {
    const client = await connect(url!);
    const { rows } = await client.query("select 1 as one");
    expect(rows).toEqual([{ one: 1 }]);
  });

  it("runs with fsync and synchronous commits on", async () => {
    const client = await connect(url!);
    expect((await client.query("show fsync")).rows[0].fsync).toBe("on");
    expect((await client.query("show synchronous_commit")).rows[0].synchronous_commit).toBe("on");
  });

  it("freshDatabase gives an empty database, also in place of one that had tables and a connection", async () => {
    const first = await connect(await freshDatabase("postgres_script_test"));
    await first.query("create table leftover (id int)");
    first.on("error", () => {}); // the drop below closes this connection
    const again = await connect(await freshDatabase("postgres_script_test"));
    const { rows } = await again.query("select count(*)::int as n from information_schema.tables where table_schema = 'public'");
    expect(rows).toEqual([{ n: 0 }]);
  });

  it("freshDatabase refuses names outside [a-z0-9_] and the databases others need", async () => {
    await expect(freshDatabase("Robert'); drop")).rejects.toThrow(/must match/);
    await expect(freshDatabase("template1")).rejects.toThrow(/not one a test may drop/);
    await expect(freshDatabase("skipper")).rejects.toThrow(/not one a test may drop/);
  });
});
