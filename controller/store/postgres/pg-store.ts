// The PostgreSQL store (backend "postgres"): the same Store contract as the file store, on a
// database that several controllers can share. Every write is committed before the call returns
// (synchronous_commit, the default, makes that durable). Rows are locked, not processes: a
// resource write locks its row (pg-resources.ts, with the revision gate that keeps versions in
// commit order); a work-order step writes its row only if it is still the one it read
// (pg-work-orders.ts); an audit append takes a lock of its own (pg-audit.ts).
//
// PostgresStore opens and closes the pool (pg-database.ts, shared by the facets) and hands each
// call to the facet it belongs to: pg-resources.ts, pg-work-orders.ts, pg-events.ts,
// pg-snapshots.ts, pg-audit.ts, pg-idempotency.ts, pg-credentials.ts, pg-webhooks.ts.
import { FacetedStore, type Facets } from "../faceted-store.js";
import { PgAudit } from "./pg-audit.js";
import { PgCredentials } from "./pg-credentials.js";
import { PgDatabase, type PostgresStoreOptions } from "./pg-database.js";
import { PgEvents } from "./pg-events.js";
import { PgIdempotency } from "./pg-idempotency.js";
import { PgResources } from "./pg-resources.js";
import { PgSnapshots } from "./pg-snapshots.js";
import { PgWebhooks } from "./pg-webhooks.js";
import { PgWorkOrders } from "./pg-work-orders.js";

export type { PostgresStoreOptions } from "./pg-database.js";

/** The PostgreSQL-backed Store. */
export class PostgresStore extends FacetedStore<Facets> {
  readonly backend = "postgres";
  private readonly db: PgDatabase;

  constructor(url: string, options: PostgresStoreOptions = {}) {
    const db = new PgDatabase(url, options);
    super({
      resources: new PgResources(db),
      workOrders: new PgWorkOrders(db),
      events: new PgEvents(db),
      snapshots: new PgSnapshots(db),
      audit: new PgAudit(db),
      idempotency: new PgIdempotency(db),
      credentials: new PgCredentials(db),
      webhooks: new PgWebhooks(db),
    });
    this.db = db;
  }

  /** Connects and brings the schema up to date (under an advisory lock: see migrations.ts). */
  open(): Promise<void> {
    return this.db.open();
  }

  /** Waits for calls in flight, then closes the pool. Idempotent. */
  close(): Promise<void> {
    return this.db.close();
  }
}
