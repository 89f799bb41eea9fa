// The PostgreSQL store's resources: one row per resource (body and the columns listings filter
// on: pg-records.ts). A write locks its row (SELECT ... FOR UPDATE) for its read-modify-write;
// resource-writes.ts says what it writes.
//
// Revisions. Resource versions come from a sequence, so writers never wait for each other; but a
// sequence hands out numbers in one order and transactions commit in another, and a reader that
// resumes "since currentRevision()" must never skip a version committed after it looked. So each
// resource write first takes a shared advisory lock (the revision gate) for its transaction, and
// currentRevision() takes the gate exclusively for a moment: once it has it, every version handed
// out so far belongs to a transaction that has ended, and the sequence's last value is safe to
// answer. Writers queue behind that moment for as long as the writes in flight take to commit.
import { copyMessage, freezeMessage } from "../../../common/message-copy.js";
import pg from "pg";
import { ResourceSchema, type Resource } from "../../../gen/skipper/v1/resource_pb.js";
import type { ResourceType } from "../../../common/ids.js";
import type * as S from "../store.js";
import {
  checkCreatable,
  editedResources,
  ENDED_DEPLOYMENT_PHASES,
  newResourceRecord,
  resourceExists,
  resourceUpdate,
} from "../resource-writes.js";
import { checkId, checkResourceType as checkType } from "../../base/id-checks.js";
import { bodyOf, messageOf, params, RESOURCE_COLUMNS, resourceColumns, toColumn } from "./pg-records.js";
import { tupleKey } from "../record-keys.js";
import { conditions, type PgDatabase } from "./pg-database.js";
import { eventsIfWritten, insertEvents } from "./pg-events.js";

// Page tags and key shapes as the file store's, so a token is refused by a listing of another kind.
const RESOURCE_PAGE = { tag: "resources", key: /^[a-z_]{1,32}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/ };

// The revision gate: an advisory lock of the (int, int) kind, in a namespace of ours ("skip").
const GATE = "1936421232, 1";

// A resource write's transaction and its first read, as one simple query (one round trip): the
// gate, shared, before any row lock (so a reader waiting for the gate never waits for a writer
// that waits for a row), then `read`. A simple query takes no parameters, so the row's type and
// id go in as literals; both passed checkType/checkId (letters, digits, ".", "_", "-") first.
function beginResourceWrite(read: string): string {
  return `BEGIN; SELECT pg_advisory_xact_lock_shared(${GATE}); ${read}`;
}

function rowOf(type: ResourceType, id: string): string {
  return `resource_type = ${pg.escapeLiteral(type)} AND id = ${pg.escapeLiteral(id)}`;
}

// A create's read: the row if there is one (locked), and the next store revision, taken after the
// lock (a version taken before it could be written after a higher one that held the lock).
function createRead(type: ResourceType, id: string): string {
  return `SELECT r.deleted, nextval('store_revision')::text AS version
    FROM (VALUES (1)) one LEFT JOIN LATERAL (SELECT deleted FROM resources WHERE ${rowOf(type, id)} FOR UPDATE) r ON true`;
}

// The values of a resource row's columns ($1.., RESOURCE_COLUMNS' order) with the next store
// revision as its version, in the column and in the body (the transaction holds the revision
// gate: see the top of this file). One statement takes the number and writes it.
function versioned(cols: unknown[], from = 1): { values: string; args: unknown[] } {
  const args = [...cols.slice(0, 3), ...cols.slice(4)]; // all but the version
  const n = args.length;
  const p = (i: number) => `$${from + i - 1}`;
  const body = `${p(n)}::jsonb`;
  const values = [
    p(1),
    p(2),
    p(3),
    "nextval('store_revision')",
    ...Array.from({ length: n - 4 }, (_, i) => p(i + 4)),
    `jsonb_set(${body}, '{metadata}', coalesce(${body} -> 'metadata', '{}'::jsonb) || jsonb_build_object('resource_version', currval('store_revision')::text))`,
  ].join(", ");
  return { values, args };
}

/**
 * The start of a transaction that writes `edits` (store.ts ResourceEdit) with a work order's step,
 * as one simple query: BEGIN, the revision gate (shared), then the edited rows, locked in one
 * order (type, id). Each edit's type and id passed checkType/checkId (editedRows checks them).
 */
export function beginEdits(edits: readonly S.ResourceEdit[]): string {
  const keys = [
    ...new Set(edits.map((e) => `(${pg.escapeLiteral(checkType(e.resourceType))}, ${pg.escapeLiteral(checkId(e.id, "resource_id"))})`)),
  ];
  return beginResourceWrite(
    `SELECT body FROM resources WHERE (resource_type, id) IN (${keys.join(", ")}) ORDER BY resource_type, id FOR UPDATE`,
  );
}

/**
 * The CTEs that write what `edits` change of the `rows` beginEdits read (bodies), each only when
 * the statement's CTE `written` has a row: the order's step and its edits are one statement.
 * Edits of a resource not stored, or that change nothing, write nothing.
 */
export function editsIfWritten(
  rows: readonly { body: unknown }[],
  edits: readonly S.ResourceEdit[],
  from: number,
): { sql: string; args: unknown[] } {
  const stored = new Map(rows.map((r) => messageOf(ResourceSchema, r.body)).map((r) => [`${r.resourceType}\0${r.id}`, r]));
  let sql = "";
  const args: unknown[] = [];
  for (const next of editedResources(edits, (type, id) => stored.get(`${type}\0${id}`))) {
    const row = versioned(resourceColumns(next, bodyOf(ResourceSchema, next)), from + args.length);
    sql += `, edit${args.length} AS (UPDATE resources SET (${RESOURCE_COLUMNS}) = (${row.values}) WHERE resource_type = $${from + args.length} AND id = $${from + args.length + 1} AND EXISTS (SELECT 1 FROM written))`;
    args.push(...row.args);
  }
  return { sql, args };
}

function setAll(columns: string): string {
  return columns
    .split(", ")
    .map((c) => `${c} = EXCLUDED.${c}`)
    .join(", ");
}

/** The ResourceStore facet of the PostgreSQL store. */
export class PgResources implements S.ResourceStore {
  constructor(private readonly db: PgDatabase) {}

  async getResource(type: ResourceType, id: string, options: S.GetOptions = {}): Promise<Resource | undefined> {
    checkType(type);
    checkId(id, "resource_id");
    const { rows } = await this.db.query<{ body: unknown; deleted: boolean }>(
      "SELECT body, deleted FROM resources WHERE resource_type = $1 AND id = $2",
      [type, id],
    );
    const row = rows[0];
    if (!row || (row.deleted && !options.includeDeleted)) return undefined;
    return messageOf(ResourceSchema, row.body);
  }

  async resourceExists(type: ResourceType, id: string): Promise<boolean> {
    checkType(type);
    checkId(id, "resource_id");
    const { rows } = await this.db.query("SELECT 1 FROM resources WHERE resource_type = $1 AND id = $2 AND NOT deleted", [type, id]);
    return rows.length > 0;
  }

  async currentRevision(): Promise<bigint> {
    // One round trip: the gate (waiting for the resource writes in flight), the last version, done.
    const results = (await this.db.query(
      `BEGIN; SELECT pg_advisory_xact_lock(${GATE}); SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS value FROM store_revision; COMMIT`,
    )) as unknown as pg.QueryResult<{ value: string }>[];
    return BigInt(results[2]?.rows[0]?.value ?? "0");
  }

  async listResources(filter: S.ResourceFilter): Promise<S.Page<Resource>> {
    const { where, args, arg } = conditions();
    if (filter.resourceType) where.push(`resource_type = ${arg(checkType(filter.resourceType))}`);
    if (filter.tenantId) where.push(`tenant_id = ${arg(filter.tenantId)}`);
    if (filter.idPrefix) {
      // A range of resources_sort (sort_key is "<type> <id>", collation C) when the type is given.
      if (filter.resourceType) {
        const from = toColumn(tupleKey(filter.resourceType, filter.idPrefix));
        where.push(`sort_key >= ${arg(from)} AND sort_key < ${arg(`${from}\u007f`)}`);
      } else where.push(`starts_with(id, ${arg(filter.idPrefix)})`);
    }
    if (!filter.includeDeleted) where.push("NOT deleted");
    if (filter.sinceRevision !== undefined) where.push(`version > ${arg(filter.sinceRevision.toString())}`);
    if (filter.deploymentPhases) where.push(`resource_type = 'deployment' AND phase = ANY(${arg(filter.deploymentPhases)}::int[])`);
    for (const t of filter.labelSelector ?? []) {
      if (t.op === "exists") where.push(`labels ? ${arg(t.key)}`);
      else if (t.op === "=") where.push(`labels ->> ${arg(t.key)} = ${arg(t.value)}`);
      else where.push(`(labels ->> ${arg(t.key)}) IS DISTINCT FROM ${arg(t.value)}`);
    }
    return this.db.page(filter, RESOURCE_PAGE, "resources", where, args, (body) => messageOf(ResourceSchema, body));
  }

  async scanResources(filter: S.ResourceFilter): Promise<S.Page<Resource>> {
    // Rows are decoded afresh for every call, so nothing is shared; frozen all the same, so that a
    // caller that changes what it scans fails here as it does on the file store.
    const page = await this.listResources(filter);
    for (const r of page.items) freezeMessage(r);
    return page;
  }

  async createResource(resource: Resource, events?: S.EventsOf<Resource>): Promise<Resource> {
    const type = checkType(resource.resourceType);
    checkId(resource.id, "resource_id");
    // Three round trips: begin with the gate, the row's lock and the version; the row and its
    // events as one statement; commit.
    return this.db.transaction(beginResourceWrite(createRead(type, resource.id)), async (c, begun) => {
      const read = begun[2]!.rows[0] as { deleted: boolean | null; version: string };
      checkCreatable(type, resource.id, read.deleted === null ? undefined : { deleted: read.deleted });
      const stored = newResourceRecord(resource);
      stored.metadata!.resourceVersion = read.version;
      const written = copyMessage(ResourceSchema, stored);
      const cols = resourceColumns(stored, bodyOf(ResourceSchema, stored));
      const told = eventsIfWritten(events ? events(written) : [], cols.length + 1);
      const { rows } = await c.query<{ n: number }>(
        `WITH written AS (INSERT INTO resources (${RESOURCE_COLUMNS}) VALUES (${params(cols.length)})
         ON CONFLICT (resource_type, id) DO UPDATE SET ${setAll(RESOURCE_COLUMNS)} WHERE resources.deleted
         RETURNING 1)${told.sql}
         SELECT count(*)::int AS n FROM written`,
        [...cols, ...told.args],
      );
      // Created meanwhile by another controller (the row did not exist when it was looked for).
      if (rows[0]?.n !== 1) throw resourceExists(type, resource.id);
      return written;
    });
  }

  async updateResource(
    type: ResourceType,
    id: string,
    mutate: (current: Resource) => Resource,
    expectedVersion?: string,
    events?: S.EventsOf<Resource>,
  ): Promise<Resource> {
    checkType(type);
    checkId(id, "resource_id");
    const read = `SELECT body FROM resources WHERE ${rowOf(type, id)} FOR UPDATE`;
    return this.db.transaction(beginResourceWrite(read), async (c, begun) => {
      const rows = begun[2]!.rows as { body: unknown }[];
      const current = rows[0] && messageOf(ResourceSchema, rows[0].body);
      const { resource: next, changed } = resourceUpdate(type, id, current, mutate, expectedVersion);
      if (!changed) return next;
      const row = versioned(resourceColumns(next, bodyOf(ResourceSchema, next)));
      const updated = await c.query<{ version: string }>(
        `UPDATE resources SET (${RESOURCE_COLUMNS}) = (${row.values}) WHERE resource_type = $1 AND id = $2 RETURNING version`,
        row.args,
      );
      next.metadata!.resourceVersion = updated.rows[0]!.version;
      const written = copyMessage(ResourceSchema, next);
      if (events) await insertEvents(c, events(written));
      return written;
    });
  }

  async pruneDeployments(finishedBefore: Date, keep: ReadonlySet<string>): Promise<number> {
    // Never the row holding the highest version: the file store resumes its revision from it, and
    // this store keeps the same rule so both prune the same records.
    const { rowCount } = await this.db.query(
      `DELETE FROM resources
        WHERE resource_type = 'deployment' AND phase = ANY($1::int[]) AND finished_at < $2
          AND NOT (id = ANY($3::text[])) AND version < (SELECT max(version) FROM resources)`,
      [ENDED_DEPLOYMENT_PHASES, finishedBefore, [...keep]],
    );
    return rowCount ?? 0;
  }
}
