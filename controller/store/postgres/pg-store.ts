// The PostgreSQL store (backend "postgres"): the same Store contract as the file store, on a
// database that several controllers can share. Every write is committed before the call returns
// (synchronous_commit, the default, makes that durable). Rows are locked, not processes:
// - a resource write locks its row (SELECT ... FOR UPDATE) for its read-modify-write;
// - a work-order step (claim, renewal, result, cancel, expiry: work-order-transitions.ts, shared
//   with the file store) reads the row, computes the next state and writes it only if the row is
//   still the one it read (its xmin); otherwise it reads again. So of concurrent claims through
//   any number of controllers exactly one wins, and fencing tokens and leases hold. A claim names
//   its order (the agent chose it), so there is no queue to SKIP LOCKED over.
//
// Revisions. Resource versions come from a sequence, so writers never wait for each other; but a
// sequence hands out numbers in one order and transactions commit in another, and a reader that
// resumes "since currentRevision()" must never skip a version committed after it looked. So each
// resource write first takes a shared advisory lock (the revision gate) for its transaction, and
// currentRevision() takes the gate exclusively for a moment: once it has it, every version handed
// out so far belongs to a transaction that has ended, and the sequence's last value is safe to
// answer. Writers queue behind that moment for as long as the writes in flight take to commit.
//
// Audit trail. An append takes an advisory lock of its own for its transaction, reads the last
// row and inserts the next (audit-chain.ts), so entries are numbered and chained in one order
// whichever controller writes them. The row keeps the entry's text as made (a text column).
import { copyMessage, freezeMessage } from "../../../common/message-copy.js";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ApiKeySchema } from "../../../gen/skipper/v1/access_pb.js";
import { EnrollmentTokenSchema } from "../../../gen/skipper/v1/enrollment_service_pb.js";
import pg from "pg";
import type { AuditEntry } from "../../../gen/skipper/v1/audit_service_pb.js";
import { EventSchema, type Event } from "../../../gen/skipper/v1/event_pb.js";
import { DeploymentPhase, ResourceSchema, type Resource } from "../../../gen/skipper/v1/resource_pb.js";
import { SnapshotSchema, type Snapshot } from "../../../gen/skipper/v1/snapshot_pb.js";
import {
  WorkOrderSchema,
  WorkOrderStatus,
  WorkOrderType,
  WorkOrderTypeSchema,
  type WorkOrder,
} from "../../../gen/skipper/v1/work_order_pb.js";
import { isSkipperError, notFound, SkipperError } from "../../errors.js";
import type { ResourceType } from "../../../common/ids.js";
import { auditDay, auditTime, chainAuditEntry, readAuditLine, type AuditHead } from "../audit-chain.js";
import { decodeNodeCertificate, encodeNodeCertificate, encodeSnapshot } from "../record-codec.js";
import { decodePageToken, encodePageToken, pageSizeOf, pageTag } from "../paging.js";
import { summaryMessage } from "../order-summary.js";
import { timestampKey } from "../record-keys.js";
import { eventDay } from "../record-keys.js";
import { checkNewWorkOrder, OrderSteps, workOrderExists } from "../order-steps.js";
import type * as S from "../store.js";
import { eventTimestamp, snapshotSlot } from "../record-checks.js";
import { checkCreatable, newResourceRecord, resourceExists, resourceUpdate } from "../resource-writes.js";
import { migrate } from "./migrations.js";
import { WebhookDeliveryState, type WebhookDelivery } from "../../../gen/skipper/v1/webhook_service_pb.js";
import type { JsonObject } from "@bufbuild/protobuf";
import { DELIVERY_PAGE, decodeDelivery, decodeWebhook, deliveryKey, dueAt, encodeDelivery, encodeWebhook } from "../webhook-records.js";
import { checkId, checkResourceType as checkType } from "../../id-checks.js";
import {
  bodyOf,
  EVENT_COLUMNS,
  eventColumns,
  fromColumn,
  messageOf,
  ORDER_COLUMNS,
  orderColumns,
  params,
  RESOURCE_COLUMNS,
  resourceColumns,
  toColumn,
} from "./pg-records.js";

export interface PostgresStoreOptions {
  /** Connections in the pool (default 32). */
  maxConnections?: number;
  /** Called for what open() changed (schema migrations applied). */
  onInfo?: (msg: string, meta: object) => void;
}

// Page tags and key shapes as the file store's, so a token is refused by a listing of another kind.
const RESOURCE_PAGE = { tag: "resources", key: /^[a-z_]{1,32}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/ };
const ORDER_PAGE = { tag: "work-orders", key: /^\d{21}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/ };
const EVENT_PAGE = { tag: "events", key: /^\d{21}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/ };
// An audit page resumes after a sequence number.
const AUDIT_PAGE = { tag: "audit", key: /^\d{1,19}$/ };
// Rows the scan for verification reads at a time.
const AUDIT_SCAN_ROWS = 1000;

// Deadlocks (40P01) can only arise when a create meets an update of the row it is creating;
// serialisation failures (40001) not at all at READ COMMITTED, but are safe to retry all the same.
const RETRIABLE = new Set(["40P01", "40001"]);

// The revision gate: an advisory lock of the (int, int) kind, in a namespace of ours ("skip").
const GATE = "1936421232, 1";
// A resource write's transaction: the gate, shared, before any row lock (so a reader waiting for
// the gate never waits for a writer that waits for a row).
const BEGIN_RESOURCE_WRITE = `BEGIN; SELECT pg_advisory_xact_lock_shared(${GATE})`;
// The audit trail's append lock: ("skip", "audt"), apart from the gate and every other lock.
const BEGIN_AUDIT_APPEND = "BEGIN; SELECT pg_advisory_xact_lock(1936421232, 1635083380)";

type Client = pg.PoolClient;

/** The PostgreSQL-backed Store. */
export class PostgresStore extends OrderSteps implements S.Store {
  readonly backend = "postgres";
  private pool: pg.Pool | undefined;
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly info: (msg: string, meta: object) => void;

  constructor(
    private readonly url: string,
    private readonly options: PostgresStoreOptions = {},
  ) {
    super();
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

  // --- resources -------------------------------------------------------------------------

  async getResource(type: ResourceType, id: string, options: S.GetOptions = {}): Promise<Resource | undefined> {
    checkType(type);
    checkId(id, "resource_id");
    const { rows } = await this.query<{ body: unknown; deleted: boolean }>(
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
    const { rows } = await this.query("SELECT 1 FROM resources WHERE resource_type = $1 AND id = $2 AND NOT deleted", [type, id]);
    return rows.length > 0;
  }

  async currentRevision(): Promise<bigint> {
    // One round trip: the gate (waiting for the resource writes in flight), the last version, done.
    const results = (await this.query(
      `BEGIN; SELECT pg_advisory_xact_lock(${GATE}); SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS value FROM store_revision; COMMIT`,
    )) as unknown as pg.QueryResult<{ value: string }>[];
    return BigInt(results[2]?.rows[0]?.value ?? "0");
  }

  async listResources(filter: S.ResourceFilter): Promise<S.Page<Resource>> {
    const { where, args, arg } = conditions();
    if (filter.resourceType) where.push(`resource_type = ${arg(checkType(filter.resourceType))}`);
    if (filter.tenantId) where.push(`tenant_id = ${arg(filter.tenantId)}`);
    if (!filter.includeDeleted) where.push("NOT deleted");
    if (filter.sinceRevision !== undefined) where.push(`version > ${arg(filter.sinceRevision.toString())}`);
    if (filter.deploymentPhases) where.push(`resource_type = 'deployment' AND phase = ANY(${arg(filter.deploymentPhases)}::int[])`);
    for (const t of filter.labelSelector ?? []) {
      if (t.op === "exists") where.push(`labels ? ${arg(t.key)}`);
      else if (t.op === "=") where.push(`labels ->> ${arg(t.key)} = ${arg(t.value)}`);
      else where.push(`(labels ->> ${arg(t.key)}) IS DISTINCT FROM ${arg(t.value)}`);
    }
    return this.page(filter, RESOURCE_PAGE, "resources", where, args, (body) => messageOf(ResourceSchema, body));
  }

  async scanResources(filter: S.ResourceFilter): Promise<S.Page<Resource>> {
    // Rows are decoded afresh for every call, so nothing is shared; frozen all the same, so that a
    // caller that changes what it scans fails here as it does on the file store.
    const page = await this.listResources(filter);
    for (const r of page.items) freezeMessage(r);
    return page;
  }

  async createResource(resource: Resource): Promise<Resource> {
    const type = checkType(resource.resourceType);
    checkId(resource.id, "resource_id");
    const stored = newResourceRecord(resource);
    return this.transaction(BEGIN_RESOURCE_WRITE, async (c) => {
      const existing = await c.query<{ deleted: boolean }>(
        "SELECT deleted FROM resources WHERE resource_type = $1 AND id = $2 FOR UPDATE",
        [type, resource.id],
      );
      checkCreatable(type, resource.id, existing.rows[0]);
      const row = versioned(resourceColumns(stored, bodyOf(ResourceSchema, stored)));
      const { rows } = await c.query<{ version: string }>(
        `INSERT INTO resources (${RESOURCE_COLUMNS}) VALUES (${row.values})
         ON CONFLICT (resource_type, id) DO UPDATE SET ${setAll(RESOURCE_COLUMNS)} WHERE resources.deleted
         RETURNING version`,
        row.args,
      );
      // Created meanwhile by another controller (the row did not exist when it was looked for).
      if (!rows[0]) throw resourceExists(type, resource.id);
      stored.metadata!.resourceVersion = rows[0].version;
      return copyMessage(ResourceSchema, stored);
    });
  }

  async updateResource(
    type: ResourceType,
    id: string,
    mutate: (current: Resource) => Resource,
    expectedVersion?: string,
  ): Promise<Resource> {
    checkType(type);
    checkId(id, "resource_id");
    return this.transaction(BEGIN_RESOURCE_WRITE, async (c) => {
      const { rows } = await c.query<{ body: unknown }>("SELECT body FROM resources WHERE resource_type = $1 AND id = $2 FOR UPDATE", [
        type,
        id,
      ]);
      const current = rows[0] && messageOf(ResourceSchema, rows[0].body);
      const { resource: next, changed } = resourceUpdate(type, id, current, mutate, expectedVersion);
      if (!changed) return next;
      const row = versioned(resourceColumns(next, bodyOf(ResourceSchema, next)));
      const updated = await c.query<{ version: string }>(
        `UPDATE resources SET (${RESOURCE_COLUMNS}) = (${row.values}) WHERE resource_type = $1 AND id = $2 RETURNING version`,
        row.args,
      );
      next.metadata!.resourceVersion = updated.rows[0]!.version;
      return copyMessage(ResourceSchema, next);
    });
  }

  // --- work orders -----------------------------------------------------------------------

  async createWorkOrder(workOrder: WorkOrder): Promise<WorkOrder> {
    checkId(workOrder.id, "work_order_id");
    checkNewWorkOrder(workOrder);
    const stored = copyMessage(WorkOrderSchema, workOrder);
    const cols = orderColumns(stored, bodyOf(WorkOrderSchema, stored));
    const { rowCount } = await this.query(
      `INSERT INTO work_orders (${ORDER_COLUMNS}) VALUES (${params(cols.length)}) ON CONFLICT (id) DO NOTHING`,
      cols,
    );
    if (rowCount !== 1) throw workOrderExists(workOrder.id);
    return copyMessage(WorkOrderSchema, stored);
  }

  async getWorkOrder(id: string): Promise<WorkOrder | undefined> {
    checkId(id, "work_order_id");
    const { rows } = await this.query<{ body: unknown }>("SELECT body FROM work_orders WHERE id = $1", [id]);
    return rows[0] && messageOf(WorkOrderSchema, rows[0].body);
  }

  async listWorkOrders(filter: S.WorkOrderFilter): Promise<S.Page<WorkOrder>> {
    const { where, args, arg } = conditions();
    if (filter.status) where.push(`status = ${arg(filter.status)}`);
    if (filter.nodeId) where.push(`node_id = ${arg(filter.nodeId)}`);
    if (filter.tenantId) where.push(`tenant_id = ${arg(filter.tenantId)}`);
    if (filter.expiresBy) where.push(`expires_at <= ${arg(filter.expiresBy)}`);
    const out = filter.summaryOnly
      ? (body: unknown) => summaryMessage(messageOf(WorkOrderSchema, body))
      : (body: unknown) => messageOf(WorkOrderSchema, body);
    return this.page(filter, ORDER_PAGE, "work_orders", where, args, out);
  }

  async pruneWorkOrders(finishedBefore: Date, keep: ReadonlySet<string>): Promise<number> {
    const { rowCount } = await this.query("DELETE FROM work_orders WHERE finished_at < $1 AND NOT (id = ANY($2::text[]))", [
      finishedBefore,
      [...keep],
    ]);
    return rowCount ?? 0;
  }

  async pruneDeployments(finishedBefore: Date, keep: ReadonlySet<string>): Promise<number> {
    // Never the row holding the highest version: the file store resumes its revision from it, and
    // this store keeps the same rule so both prune the same records.
    const { rowCount } = await this.query(
      `DELETE FROM resources
        WHERE resource_type = 'deployment' AND phase = ANY($1::int[]) AND finished_at < $2
          AND NOT (id = ANY($3::text[])) AND version < (SELECT max(version) FROM resources)`,
      [[DeploymentPhase.SUCCEEDED, DeploymentPhase.FAILED], finishedBefore, [...keep]],
    );
    return rowCount ?? 0;
  }

  async nextPendingWorkOrder(nodeId: string): Promise<WorkOrder | undefined> {
    const { rows } = await this.query<{ body: unknown }>(
      "SELECT body FROM work_orders WHERE node_id = $1 AND status = $2 ORDER BY priority DESC, sort_key LIMIT 1",
      [nodeId, WorkOrderStatus.PENDING],
    );
    return rows[0] && messageOf(WorkOrderSchema, rows[0].body);
  }

  async countPendingWorkOrders(nodeId: string): Promise<number> {
    const { rows } = await this.query<{ n: number }>("SELECT count(*)::int AS n FROM work_orders WHERE node_id = $1 AND status = $2", [
      nodeId,
      WorkOrderStatus.PENDING,
    ]);
    return rows[0]?.n ?? 0;
  }

  async countWorkOrders(): Promise<S.WorkOrderCount[]> {
    // The type is not a column: it is read from each body, so a scrape of a long history costs a
    // scan (the metrics cache what it gets for a few seconds).
    const { rows } = await this.query<{ status: number; type: string | null; n: number }>(
      "SELECT status, body->>'type' AS type, count(*)::int AS n FROM work_orders GROUP BY 1, 2",
    );
    const byKey = new Map<string, S.WorkOrderCount>();
    for (const r of rows) {
      const type = orderTypeOf(r.type);
      const key = `${r.status}/${type}`;
      const c = byKey.get(key) ?? { status: r.status, type, count: 0 };
      c.count += r.n;
      byKey.set(key, c);
    }
    return [...byKey.values()];
  }

  // One state-machine step, written only if the row is still as it was read (its xmin, the
  // transaction that wrote it, is unchanged); else read again and step again. Two round trips
  // and no transaction of our own: each statement commits alone. Of concurrent steps on one
  // order exactly one writes; the others see its result (a second claim: "not pending").
  protected async transition(id: string, step: (current: WorkOrder) => WorkOrder): Promise<WorkOrder> {
    checkId(id, "work_order_id");
    for (;;) {
      const { rows } = await this.query<{ xmin: string; body: unknown }>("SELECT xmin::text AS xmin, body FROM work_orders WHERE id = $1", [
        id,
      ]);
      if (!rows[0]) throw notFound("work_order", id);
      const current = messageOf(WorkOrderSchema, rows[0].body);
      const next = step(current);
      if (next === current) return current; // nothing to do (idempotent)
      const cols = orderColumns(next, bodyOf(WorkOrderSchema, next));
      const { rowCount } = await this.query(
        `UPDATE work_orders SET (${ORDER_COLUMNS}) = (${params(cols.length)}) WHERE id = $1 AND xmin = $${cols.length + 1}::text::xid`,
        [...cols, rows[0].xmin],
      );
      if (rowCount === 1) return copyMessage(WorkOrderSchema, next);
    }
  }

  // --- events ----------------------------------------------------------------------------

  async appendEvent(event: Event): Promise<void> {
    eventTimestamp(event);
    checkId(event.id, "event_id");
    const cols = eventColumns(event, bodyOf(EventSchema, event));
    await this.query(`INSERT INTO events (${EVENT_COLUMNS}) VALUES (${params(cols.length)}) ON CONFLICT (day, id) DO NOTHING`, cols);
  }

  async listEvents(filter: S.EventFilter): Promise<S.Page<Event>> {
    const { where, args, arg } = conditions();
    if (filter.type) where.push(`type = ${arg(filter.type)}`);
    if (filter.tenantId) where.push(`tenant_id = ${arg(filter.tenantId)}`);
    if (filter.resourceId) where.push(`resource_id = ${arg(filter.resourceId)}`);
    if (filter.workOrderId) where.push(`work_order_id = ${arg(filter.workOrderId)}`);
    if (filter.correlationId) where.push(`correlation_id = ${arg(filter.correlationId)}`);
    if (filter.since) where.push(`sort_key >= ${arg(timestampKey(timestampFromDate(filter.since)))}`);
    if (filter.sinceRevision !== undefined) where.push(`revision > ${arg(filter.sinceRevision.toString())}`);
    return this.page(filter, EVENT_PAGE, "events", where, args, (body) => messageOf(EventSchema, body));
  }

  async pruneEvents(before: Date): Promise<number> {
    // sort_key begins with the timestamp's key, so "< key of before" is "older than before".
    const { rowCount } = await this.query("DELETE FROM events WHERE sort_key < $1", [timestampKey(timestampFromDate(before))]);
    return rowCount ?? 0;
  }

  // --- audit trail ----------------------------------------------------------------------

  async appendAuditEntry(draft: S.AuditDraft): Promise<AuditEntry> {
    // Sequence numbers come back as text (bigint) named `seq`: named `sequence`, ORDER BY sequence
    // would sort by that text column ("9" after "10").
    return this.transaction(BEGIN_AUDIT_APPEND, async (c) => {
      const { rows } = await c.query<AuditRow>(
        "SELECT sequence::text AS seq, recorded_at, text FROM audit_entries ORDER BY sequence DESC LIMIT 1",
      );
      const { entry, text } = chainAuditEntry(draft, rows[0] && headOfRow(rows[0]));
      await c.query("INSERT INTO audit_entries (sequence, day, recorded_at, text) VALUES ($1, $2, $3, $4)", [
        entry.sequence.toString(),
        auditDay(entry),
        auditTime(entry),
        text,
      ]);
      return entry;
    });
  }

  async listAuditEntries(filter: S.AuditFilter): Promise<S.Page<AuditEntry>> {
    const size = pageSizeOf(filter);
    const after = decodePageToken(AUDIT_PAGE.tag, filter.pageToken, AUDIT_PAGE.key);
    const { where, args, arg } = conditions();
    if (filter.since) where.push(`recorded_at >= ${arg(filter.since)}`);
    if (filter.until) where.push(`recorded_at < ${arg(filter.until)}`);
    if (after !== undefined) where.push(`sequence > ${arg(after)}`);
    const { rows } = await this.query<{ seq: string; text: string }>(
      `SELECT sequence::text AS seq, text FROM audit_entries${where.length ? ` WHERE ${where.join(" AND ")}` : ""}
        ORDER BY sequence LIMIT ${arg(size + 1)}`,
      args,
    );
    const page = rows.slice(0, size);
    const items: AuditEntry[] = [];
    for (const r of page) {
      const line = readAuditLine(r.text);
      if (line.ok) items.push(line.entry);
    }
    return { items, nextPageToken: rows.length > size ? encodePageToken(AUDIT_PAGE.tag, page.at(-1)!.seq) : "" };
  }

  async *scanAuditEntries(): AsyncIterable<S.StoredAuditEntry> {
    for (let after = "0"; ; ) {
      const { rows } = await this.query<{ seq: string; text: string }>(
        "SELECT sequence::text AS seq, text FROM audit_entries WHERE sequence > $1 ORDER BY sequence LIMIT $2",
        [after, AUDIT_SCAN_ROWS],
      );
      for (const r of rows) yield { location: `audit_entries sequence ${r.seq}`, text: r.text };
      if (rows.length < AUDIT_SCAN_ROWS) return;
      after = rows.at(-1)!.seq;
    }
  }

  async pruneAuditEntries(before: Date): Promise<number> {
    // Whole days before the cutoff's, never the last entry's day (numbering and the chain go on from it).
    const { rowCount } = await this.query(
      `DELETE FROM audit_entries
        WHERE day < $1::date AND day < (SELECT day FROM audit_entries ORDER BY sequence DESC LIMIT 1)`,
      [eventDay(before)],
    );
    return rowCount ?? 0;
  }

  // --- snapshots -------------------------------------------------------------------------

  async putSnapshot(snapshot: Snapshot): Promise<void> {
    const slot = snapshotSlot(snapshot.scope, snapshot.tenantId);
    // The text the file store writes, made a slice at a time (a system snapshot is big).
    const text = await encodeSnapshot(snapshot);
    await this.query(
      "INSERT INTO snapshots (slot, body, updated_at) VALUES ($1, $2, now()) ON CONFLICT (slot) DO UPDATE SET body = $2, updated_at = now()",
      [slot, text],
    );
  }

  async getLatestSnapshot(scope: "system" | "tenant", tenantId?: string): Promise<Snapshot | undefined> {
    const slot = snapshotSlot(scope, tenantId ?? "");
    const { rows } = await this.query<{ body: unknown }>("SELECT body FROM snapshots WHERE slot = $1", [slot]);
    return rows[0] && messageOf(SnapshotSchema, rows[0].body);
  }

  // --- idempotency -----------------------------------------------------------------------

  async getIdempotencyRecord(key: string, now: Date): Promise<S.IdempotencyRecord | undefined> {
    const { rows } = await this.query<{ request_hash: string; response: unknown; created_at: Date; expires_at: Date }>(
      "SELECT request_hash, response, created_at, expires_at FROM idempotency_records WHERE key = $1",
      [key],
    );
    const r = rows[0];
    if (!r) return undefined;
    if (r.expires_at.getTime() > now.getTime()) {
      return { key, requestHash: r.request_hash, response: r.response, createdAt: r.created_at, expiresAt: r.expires_at };
    }
    // Expired: drop it now (unless it was replaced meanwhile).
    await this.query("DELETE FROM idempotency_records WHERE key = $1 AND expires_at <= $2", [key, now]);
    return undefined;
  }

  async putIdempotencyRecord(record: S.IdempotencyRecord): Promise<void> {
    await this.query(
      `INSERT INTO idempotency_records (key, request_hash, response, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (key) DO UPDATE SET request_hash = $2, response = $3, created_at = $4, expires_at = $5`,
      [record.key, record.requestHash, JSON.stringify(record.response ?? null), record.createdAt, record.expiresAt],
    );
  }

  // --- credentials -----------------------------------------------------------------------

  async getNodeCredential(nodeId: string): Promise<S.NodeCredential | undefined> {
    const { rows } = await this.query<CredentialRow>(
      "SELECT token_hash, created_at, certificates FROM node_credentials WHERE node_id = $1",
      [nodeId],
    );
    return rows[0] && credentialOf(nodeId, rows[0]);
  }

  async getLiveNodeCredential(nodeId: string): Promise<S.NodeCredential | undefined> {
    const { rows } = await this.query<CredentialRow>(
      `SELECT token_hash, created_at, certificates FROM node_credentials WHERE node_id = $1
       AND EXISTS (SELECT 1 FROM resources WHERE resource_type = 'node' AND id = $1 AND NOT deleted)`,
      [nodeId],
    );
    return rows[0] && credentialOf(nodeId, rows[0]);
  }

  async putNodeCredential(credential: S.NodeCredential): Promise<void> {
    checkId(credential.nodeId, "node_id");
    const certificates = credential.certificates === undefined ? null : JSON.stringify(credential.certificates.map(encodeNodeCertificate));
    await this.query(
      `INSERT INTO node_credentials (node_id, token_hash, created_at, certificates) VALUES ($1, $2, $3, $4)
       ON CONFLICT (node_id) DO UPDATE SET token_hash = $2, created_at = $3, certificates = $4`,
      [credential.nodeId, credential.tokenHash, credential.createdAt, certificates],
    );
  }

  async getAdminCredential(): Promise<S.AdminCredential | undefined> {
    const { rows } = await this.query<{ token_hash: string; created_at: Date }>("SELECT token_hash, created_at FROM admin_credential");
    return rows[0] && { tokenHash: rows[0].token_hash, createdAt: rows[0].created_at };
  }

  async putAdminCredential(credential: S.AdminCredential): Promise<void> {
    await this.query(
      `INSERT INTO admin_credential (token_hash, created_at) VALUES ($1, $2)
       ON CONFLICT (singleton) DO UPDATE SET token_hash = $1, created_at = $2`,
      [credential.tokenHash, credential.createdAt],
    );
  }
  async getApiKey(id: string): Promise<S.ApiKeyRecord | undefined> {
    const { rows } = await this.query<ApiKeyRow>("SELECT body, secret_hash, previous_secret_hash FROM api_keys WHERE id = $1", [id]);
    return rows[0] && apiKeyOf(rows[0]);
  }

  async putApiKey(record: S.ApiKeyRecord): Promise<void> {
    checkId(record.key.id, "id");
    await this.query(
      `INSERT INTO api_keys (id, body, secret_hash, previous_secret_hash, created_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (id) DO UPDATE SET body = $2, secret_hash = $3, previous_secret_hash = $4`,
      [
        record.key.id,
        bodyOf(ApiKeySchema, record.key),
        record.secretHash,
        record.previousSecretHash ?? null,
        record.key.createdAt ? timestampDate(record.key.createdAt) : new Date(0),
      ],
    );
  }

  async getEnrollmentToken(id: string): Promise<S.EnrollmentTokenRecord | undefined> {
    const { rows } = await this.query<{ body: unknown; secret_hash: string }>(
      "SELECT body, secret_hash FROM enrollment_tokens WHERE id = $1",
      [id],
    );
    return rows[0] && { token: messageOf(EnrollmentTokenSchema, rows[0].body), secretHash: rows[0].secret_hash };
  }

  async putEnrollmentToken(record: S.EnrollmentTokenRecord): Promise<void> {
    checkId(record.token.id, "id");
    await this.query(
      `INSERT INTO enrollment_tokens (id, body, secret_hash, created_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (id) DO UPDATE SET body = $2, secret_hash = $3`,
      [
        record.token.id,
        bodyOf(EnrollmentTokenSchema, record.token),
        record.secretHash,
        record.token.createdAt ? timestampDate(record.token.createdAt) : new Date(0),
      ],
    );
  }

  async listEnrollmentTokens(): Promise<S.EnrollmentTokenRecord[]> {
    const { rows } = await this.query<{ body: unknown; secret_hash: string }>(
      "SELECT body, secret_hash FROM enrollment_tokens ORDER BY created_at, id",
    );
    return rows.map((r) => ({ token: messageOf(EnrollmentTokenSchema, r.body), secretHash: r.secret_hash }));
  }

  async listApiKeys(): Promise<S.ApiKeyRecord[]> {
    const { rows } = await this.query<ApiKeyRow>("SELECT body, secret_hash, previous_secret_hash FROM api_keys ORDER BY created_at, id");
    return rows.map(apiKeyOf);
  }

  // --- webhooks ------------------------------------------------------------------------------

  async putWebhook(record: S.WebhookRecord): Promise<void> {
    checkId(record.webhook.id, "id");
    await this.query(`INSERT INTO webhooks (id, body, created_at) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET body = $2`, [
      record.webhook.id,
      JSON.stringify(encodeWebhook(record)),
      record.webhook.createdAt ? timestampDate(record.webhook.createdAt) : new Date(0),
    ]);
  }

  async getWebhook(id: string): Promise<S.WebhookRecord | undefined> {
    const { rows } = await this.query<{ body: JsonObject }>("SELECT body FROM webhooks WHERE id = $1", [id]);
    return rows[0] && decodeWebhook(rows[0].body);
  }

  async listWebhooks(): Promise<S.WebhookRecord[]> {
    const { rows } = await this.query<{ body: JsonObject }>("SELECT body FROM webhooks ORDER BY created_at, id");
    return rows.map((r) => decodeWebhook(r.body));
  }

  async deleteWebhook(id: string): Promise<boolean> {
    return this.transaction("BEGIN", async (c) => {
      await c.query("DELETE FROM webhook_deliveries WHERE webhook_id = $1", [id]);
      const { rowCount } = await c.query("DELETE FROM webhooks WHERE id = $1", [id]);
      return (rowCount ?? 0) > 0;
    });
  }

  async enqueueWebhookDeliveries(records: S.WebhookDeliveryRecord[]): Promise<number> {
    let added = 0;
    for (const r of records) {
      checkId(r.delivery.id, "id");
      const { rowCount } = await this.query(
        `INSERT INTO webhook_deliveries (id, webhook_id, state, next_attempt_at, delivered_at, last_failure_at, sort_key, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING`,
        deliveryRow(r),
      );
      added += rowCount ?? 0;
    }
    return added;
  }

  async getWebhookDelivery(id: string): Promise<S.WebhookDeliveryRecord | undefined> {
    const { rows } = await this.query<{ body: JsonObject }>("SELECT body FROM webhook_deliveries WHERE id = $1", [id]);
    return rows[0] && decodeDelivery(rows[0].body);
  }

  async updateWebhookDelivery(delivery: WebhookDelivery): Promise<boolean> {
    const current = await this.getWebhookDelivery(delivery.id);
    if (!current) return false;
    const { rowCount } = await this.query(
      `UPDATE webhook_deliveries SET webhook_id = $2, state = $3, next_attempt_at = $4, delivered_at = $5, last_failure_at = $6,
         sort_key = $7, body = $8 WHERE id = $1`,
      deliveryRow({ delivery, event: current.event }),
    );
    return (rowCount ?? 0) > 0;
  }

  async listWebhookDeliveries(filter: S.WebhookDeliveryFilter): Promise<S.Page<S.WebhookDeliveryRecord>> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (filter.webhookId) {
      args.push(filter.webhookId);
      where.push(`webhook_id = $${args.length}`);
    }
    if (filter.state) {
      args.push(filter.state);
      where.push(`state = $${args.length}`);
    }
    return this.page(filter, DELIVERY_PAGE, "webhook_deliveries", where, args, (body) => decodeDelivery(body as JsonObject));
  }

  async dueWebhookDeliveries(now: Date, limit: number, skipWebhookIds: readonly string[] = []): Promise<S.WebhookDeliveryRecord[]> {
    const { rows } = await this.query<{ body: JsonObject }>(
      `SELECT body FROM webhook_deliveries WHERE state = $1 AND next_attempt_at <= $2 AND NOT (webhook_id = ANY($4::text[]))
       ORDER BY next_attempt_at, id LIMIT $3`,
      [WebhookDeliveryState.PENDING, now, limit, [...skipWebhookIds]],
    );
    return rows.map((r) => decodeDelivery(r.body));
  }

  async webhookDeliveryStats(webhookId: string): Promise<S.WebhookDeliveryStats> {
    const { rows } = await this.query<{ backlog: string; dead: string; last_success: Date | null }>(
      `SELECT count(*) FILTER (WHERE state = $2) AS backlog, count(*) FILTER (WHERE state = $3) AS dead,
         max(delivered_at) AS last_success FROM webhook_deliveries WHERE webhook_id = $1`,
      [webhookId, WebhookDeliveryState.PENDING, WebhookDeliveryState.DEAD_LETTERED],
    );
    const failed = await this.query<{ body: JsonObject }>(
      "SELECT body FROM webhook_deliveries WHERE webhook_id = $1 AND last_failure_at IS NOT NULL ORDER BY last_failure_at DESC LIMIT 1",
      [webhookId],
    );
    const last = failed.rows[0] && decodeDelivery(failed.rows[0].body).delivery;
    return {
      backlog: Number(rows[0]?.backlog ?? 0),
      deadLettered: Number(rows[0]?.dead ?? 0),
      ...(rows[0]?.last_success ? { lastSuccessAt: rows[0].last_success } : {}),
      ...(last?.lastFailureAt ? { lastFailureAt: timestampDate(last.lastFailureAt) } : {}),
      lastFailure: last?.lastFailure ?? "",
    };
  }

  async pruneWebhookDeliveries(before: Date): Promise<number> {
    const { rowCount } = await this.query("DELETE FROM webhook_deliveries WHERE state <> $1 AND sort_key < $2", [
      WebhookDeliveryState.PENDING,
      toColumn(timestampKey(timestampFromDate(before))),
    ]);
    return rowCount ?? 0;
  }

  async getWebhookCursor(): Promise<Date | undefined> {
    const { rows } = await this.query<{ at: Date }>("SELECT at FROM webhook_cursor");
    return rows[0]?.at;
  }

  async putWebhookCursor(at: Date): Promise<void> {
    await this.query("INSERT INTO webhook_cursor (at) VALUES ($1) ON CONFLICT (singleton) DO UPDATE SET at = $1", [at]);
  }

  // --- plumbing --------------------------------------------------------------------------

  // One page of `table` in sort_key order: one row more than the page, so the last page has no token.
  private async page<T>(
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

  private query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, args: unknown[] = []): Promise<pg.QueryResult<R>> {
    const pool = this.openPool();
    return this.track(pool.query<R>(sql, args).catch((e: unknown) => Promise.reject(fromDatabase(e))));
  }

  // Runs `fn` in a transaction on one connection; a deadlock or serialisation failure is retried
  // (the transaction was rolled back, so nothing of the first try remains).
  private transaction<T>(begin: string, fn: (c: Client) => Promise<T>): Promise<T> {
    const pool = this.openPool();
    const run = async (): Promise<T> => {
      for (let attempt = 1; ; attempt++) {
        const c = await pool.connect().catch((e: unknown) => Promise.reject(unavailable(e)));
        let broken: Error | undefined;
        try {
          await c.query(begin);
          const result = await fn(c);
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

  private track<T>(p: Promise<T>): Promise<T> {
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

interface AuditRow {
  seq: string;
  recorded_at: Date;
  text: string;
}

// The head the next entry chains to: the row's number, and its hash and time as its text holds
// them. A row whose text was spoiled gives "" (verification reports that row).
function headOfRow(row: AuditRow): AuditHead {
  const line = readAuditLine(row.text);
  return {
    sequence: BigInt(row.seq),
    hash: line.ok ? line.entry.hash : "",
    time: line.ok ? line.entry.time! : timestampFromDate(row.recorded_at),
  };
}

// The values of a resource row's columns ($1.., RESOURCE_COLUMNS' order) with the next store
// revision as its version, in the column and in the body (the transaction holds the revision
// gate: see the top of this file). One statement takes the number and writes it.
function versioned(cols: unknown[]): { values: string; args: unknown[] } {
  const args = [...cols.slice(0, 3), ...cols.slice(4)]; // all but the version
  const n = args.length;
  const body = `$${n}::jsonb`;
  const values = [
    "$1",
    "$2",
    "$3",
    "nextval('store_revision')",
    ...Array.from({ length: n - 4 }, (_, i) => `$${i + 4}`),
    `jsonb_set(${body}, '{metadata}', coalesce(${body} -> 'metadata', '{}'::jsonb) || jsonb_build_object('resource_version', currval('store_revision')::text))`,
  ].join(", ");
  return { values, args };
}

// WHERE conditions of a listing and their parameters: arg(v) adds a parameter and names it ($n).
function conditions(): { where: string[]; args: unknown[]; arg: (v: unknown) => string } {
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

function setAll(columns: string): string {
  return columns
    .split(", ")
    .map((c) => `${c} = EXCLUDED.${c}`)
    .join(", ");
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

interface ApiKeyRow {
  body: unknown;
  secret_hash: string;
  previous_secret_hash: string | null;
}

function apiKeyOf(row: ApiKeyRow): S.ApiKeyRecord {
  return {
    key: messageOf(ApiKeySchema, row.body),
    secretHash: row.secret_hash,
    ...(row.previous_secret_hash === null ? {} : { previousSecretHash: row.previous_secret_hash }),
  };
}

interface CredentialRow {
  token_hash: string;
  created_at: Date;
  certificates: unknown[] | null;
}

function credentialOf(nodeId: string, row: CredentialRow): S.NodeCredential {
  return {
    nodeId,
    tokenHash: row.token_hash,
    createdAt: row.created_at,
    ...(row.certificates === null ? {} : { certificates: row.certificates.map(decodeNodeCertificate) }),
  };
}

// The columns of a delivery row, in the order the INSERT and UPDATE above name them.
function deliveryRow(r: S.WebhookDeliveryRecord): unknown[] {
  const d = r.delivery;
  return [
    d.id,
    d.webhookId,
    d.state,
    new Date(dueAt(d)),
    d.deliveredAt ? timestampDate(d.deliveredAt) : null,
    d.lastFailureAt ? timestampDate(d.lastFailureAt) : null,
    toColumn(deliveryKey(d)),
    JSON.stringify(encodeDelivery(r)),
  ];
}

/** A work order's type as its proto-JSON body spells it (the name; absent for UNSPECIFIED). */
function orderTypeOf(json: string | null): WorkOrderType {
  if (json === null) return WorkOrderType.UNSPECIFIED;
  if (/^\d{1,9}$/.test(json)) return Number(json);
  return WorkOrderTypeSchema.values.find((v) => v.name === json)?.number ?? WorkOrderType.UNSPECIFIED;
}
