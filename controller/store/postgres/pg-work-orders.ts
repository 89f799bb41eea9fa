// The PostgreSQL store's work orders: one row per order. A step of an order's state machine
// (claim, renewal, result, cancel, expiry: work-order-transitions.ts, shared with the file store
// through OrderSteps) reads the row, computes the next state and writes it only if the row is
// still the one it read (its xmin); otherwise it reads again. So of concurrent claims through any
// number of controllers exactly one wins, and fencing tokens and leases hold. A claim names its
// order (the agent chose it), so there is no queue to SKIP LOCKED over.
import { copyMessage } from "../../../common/message-copy.js";
import {
  WorkOrderSchema,
  WorkOrderStatus,
  WorkOrderType,
  WorkOrderTypeSchema,
  type WorkOrder,
} from "../../../gen/skipper/v1/work_order_pb.js";
import { notFound } from "../../base/errors.js";
import { summaryMessage } from "../order-summary.js";
import { checkNewWorkOrder, OrderSteps, workOrderExists } from "../order-steps.js";
import { stepWrites } from "../store.js";
import type * as S from "../store.js";
import { checkId } from "../../base/id-checks.js";
import { bodyOf, messageOf, ORDER_COLUMNS, orderColumns, orderKey, params, toColumn } from "./pg-records.js";
import { conditions, type PgDatabase } from "./pg-database.js";
import { eventsIfWritten } from "./pg-events.js";
import { beginEdits, editsIfWritten } from "./pg-resources.js";

const ORDER_PAGE = { tag: "work-orders", key: /^\d{21}\0[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/ };

/** A work order's type as its proto-JSON body spells it (the name; absent for UNSPECIFIED). */
function orderTypeOf(json: string | null): WorkOrderType {
  if (json === null) return WorkOrderType.UNSPECIFIED;
  if (/^\d{1,9}$/.test(json)) return Number(json);
  return WorkOrderTypeSchema.values.find((v) => v.name === json)?.number ?? WorkOrderType.UNSPECIFIED;
}

/** The WorkOrderStore facet of the PostgreSQL store. */
export class PgWorkOrders extends OrderSteps implements S.WorkOrderStore {
  constructor(private readonly db: PgDatabase) {
    super();
  }

  async createWorkOrder(workOrder: WorkOrder, events?: S.EventsOf<WorkOrder>): Promise<WorkOrder> {
    checkId(workOrder.id, "work_order_id");
    checkNewWorkOrder(workOrder);
    const stored = copyMessage(WorkOrderSchema, workOrder);
    const cols = orderColumns(stored, bodyOf(WorkOrderSchema, stored));
    const insert = `INSERT INTO work_orders (${ORDER_COLUMNS}) VALUES (${params(cols.length)}) ON CONFLICT (id) DO NOTHING`;
    if (!events) {
      const { rowCount } = await this.db.query(insert, cols);
      if (rowCount !== 1) throw workOrderExists(workOrder.id);
      return copyMessage(WorkOrderSchema, stored);
    }
    // The order and its events in one statement: one step.
    const written = copyMessage(WorkOrderSchema, stored);
    const told = eventsIfWritten(events(written), cols.length + 1);
    const { rows } = await this.db.query<{ n: number }>(
      `WITH written AS (${insert} RETURNING 1)${told.sql} SELECT count(*)::int AS n FROM written`,
      [...cols, ...told.args],
    );
    if (rows[0]?.n !== 1) throw workOrderExists(workOrder.id);
    return written;
  }

  async getWorkOrder(id: string): Promise<WorkOrder | undefined> {
    checkId(id, "work_order_id");
    const { rows } = await this.db.query<{ body: unknown }>("SELECT body FROM work_orders WHERE id = $1", [id]);
    return rows[0] && messageOf(WorkOrderSchema, rows[0].body);
  }

  async listWorkOrders(filter: S.WorkOrderFilter): Promise<S.Page<WorkOrder>> {
    const { where, args, arg } = conditions();
    if (filter.status) where.push(`status = ${arg(filter.status)}`);
    if (filter.statuses) where.push(`status = ANY(${arg([...filter.statuses])}::int[])`);
    if (filter.nodeId) where.push(`node_id = ${arg(filter.nodeId)}`);
    if (filter.tenantId) where.push(`tenant_id = ${arg(filter.tenantId)}`);
    if (filter.expiresBy) where.push(`expires_at <= ${arg(filter.expiresBy)}`);
    const out = filter.summaryOnly
      ? (body: unknown) => summaryMessage(messageOf(WorkOrderSchema, body))
      : (body: unknown) => messageOf(WorkOrderSchema, body);
    return this.db.page(filter, ORDER_PAGE, "work_orders", where, args, out);
  }

  async pruneWorkOrders(finishedBefore: Date, keep: ReadonlySet<string>): Promise<number> {
    const { rowCount } = await this.db.query("DELETE FROM work_orders WHERE finished_at < $1 AND NOT (id = ANY($2::text[]))", [
      finishedBefore,
      [...keep],
    ]);
    return rowCount ?? 0;
  }

  async nextPendingWorkOrder(nodeId: string): Promise<WorkOrder | undefined> {
    const { rows } = await this.db.query<{ body: unknown }>(
      "SELECT body FROM work_orders WHERE node_id = $1 AND status = $2 ORDER BY priority DESC, sort_key LIMIT 1",
      [nodeId, WorkOrderStatus.PENDING],
    );
    return rows[0] && messageOf(WorkOrderSchema, rows[0].body);
  }

  async countPendingWorkOrders(nodeId: string): Promise<number> {
    const { rows } = await this.db.query<{ n: number }>("SELECT count(*)::int AS n FROM work_orders WHERE node_id = $1 AND status = $2", [
      nodeId,
      WorkOrderStatus.PENDING,
    ]);
    return rows[0]?.n ?? 0;
  }

  async pendingPoolOrders(limit: number, after?: Pick<WorkOrder, "priority" | "createdAt" | "id">): Promise<WorkOrder[]> {
    // A pool order waiting for its node has node_id ''; every other order names its node. A page
    // after `after` resumes in (priority DESC, sort_key) order.
    const args: unknown[] = [WorkOrderStatus.PENDING, Math.max(0, Math.min(1000, Math.floor(limit)))];
    let resume = "";
    if (after) {
      args.push(after.priority, toColumn(orderKey(after)));
      resume = " AND (priority < $3 OR (priority = $3 AND sort_key > $4))";
    }
    const { rows } = await this.db.query<{ body: unknown }>(
      `SELECT body FROM work_orders WHERE node_id = '' AND status = $1 AND body->'target' ? 'pool'${resume} ORDER BY priority DESC, sort_key LIMIT $2`,
      args,
    );
    return rows.map((r) => messageOf(WorkOrderSchema, r.body));
  }

  async countWorkOrders(): Promise<S.WorkOrderCount[]> {
    // The type is not a column: it is read from each body, so a scrape of a long history costs a
    // scan (the metrics cache what it gets for a few seconds).
    const { rows } = await this.db.query<{ status: number; type: string | null; n: number }>(
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
  // order exactly one writes; the others see its result (a second claim: "not pending"). A step
  // with events writes the row and them in one statement.
  protected async transition(id: string, step: (current: WorkOrder) => WorkOrder, events?: S.StepOf<WorkOrder>): Promise<WorkOrder> {
    checkId(id, "work_order_id");
    for (;;) {
      const { rows } = await this.db.query<{ xmin: string; body: unknown }>(
        "SELECT xmin::text AS xmin, body FROM work_orders WHERE id = $1",
        [id],
      );
      if (!rows[0]) throw notFound("work_order", id);
      const current = messageOf(WorkOrderSchema, rows[0].body);
      const next = step(current);
      if (next === current) return current; // nothing to do (idempotent)
      const cols = orderColumns(next, bodyOf(WorkOrderSchema, next));
      const update = `UPDATE work_orders SET (${ORDER_COLUMNS}) = (${params(cols.length)}) WHERE id = $1 AND xmin = $${cols.length + 1}::text::xid`;
      const args = [...cols, rows[0].xmin];
      if (!events) {
        const { rowCount } = await this.db.query(update, args);
        if (rowCount === 1) return copyMessage(WorkOrderSchema, next);
        continue;
      }
      // The step and its events in one statement: one step, written only if the row is as read.
      const written = copyMessage(WorkOrderSchema, next);
      const writes = stepWrites(events(written));
      const told = eventsIfWritten(writes.events, args.length + 1);
      const statement = `WITH written AS (${update} RETURNING 1)${told.sql}`;
      const counted = " SELECT count(*)::int AS n FROM written";
      if (writes.resources.length === 0) {
        const { rows: done } = await this.db.query<{ n: number }>(statement + counted, [...args, ...told.args]);
        if (done[0]?.n === 1) return written;
        continue;
      }
      // With edits of other records: in a transaction that holds their rows (and the revision
      // gate, as every resource write does), the step, its events and the edits as one statement.
      const stepped = await this.db.transaction(beginEdits(writes.resources), async (c, begun) => {
        const edits = editsIfWritten(begun[2]!.rows as { body: unknown }[], writes.resources, args.length + told.args.length + 1);
        const { rows: done } = await c.query<{ n: number }>(statement + edits.sql + counted, [...args, ...told.args, ...edits.args]);
        return done[0]?.n === 1;
      });
      if (stepped) return written;
    }
  }
}
