// The file store's work orders: work-orders/{pending,running,finished}/<id>.json, a file per
// order in the directory of its stage, served from an in-memory index (work-order-index.ts). A
// finished order is held as a summary (order-summary.ts) and read from its file when a read needs
// all of it; the finished orders' summary file (summary-file.ts) spares open() reading them all.
// Each step of an order's state machine runs under the order's lock (transition, for OrderSteps).
import { readFile, rm } from "node:fs/promises";
import { copyMessage } from "../../../common/message-copy.js";
import { WorkOrderSchema, type WorkOrder } from "../../../gen/skipper/v1/work_order_pb.js";
import { notFound } from "../../base/errors.js";
import { checkNewWorkOrder, OrderSteps, workOrderExists } from "../order-steps.js";
import { isOrderSummary, summarise, summaryMessage } from "../order-summary.js";
import * as codec from "../record-codec.js";
import { stepWrites } from "../store.js";
import type * as S from "../store.js";
import { isFinished } from "../../domain/work-order-transitions.js";
import type { FileOp } from "./atomic-write.js";
import type { FileCore } from "./file-core.js";
import type { FileEvents } from "./file-events.js";
import type { FileResources } from "./file-resources.js";
import { ORDER_SUMMARY_ROWS } from "./order-summary-rows.js";
import { summaryDue, writeSummary } from "./summary-file.js";
import { stageOf, WorkOrderIndex } from "./work-order-index.js";

/** The WorkOrderStore facet of the file store. */
export class FileWorkOrders extends OrderSteps implements S.WorkOrderStore {
  private index = new WorkOrderIndex();
  // Finished or pruned orders the summary file on disk does not reflect yet.
  private summaryLag = 0;

  constructor(
    private readonly core: FileCore,
    private readonly summaryEvery: number,
    private readonly events: FileEvents,
    private readonly resources: Pick<FileResources, "withEdits">,
  ) {
    super();
  }

  /**
   * Replaces the index with the orders read at open (finished ones read in full, not named by
   * the summary, are held as summaries too); `summaryStale` when the summary file is behind.
   */
  load(orders: WorkOrder[], summaryStale: boolean): void {
    this.index = new WorkOrderIndex();
    this.index.load(orders.map((o) => (isFinished(o) ? summarise(o) : o)));
    this.summaryLag = summaryStale ? this.summaryEvery : 0;
  }

  async createWorkOrder(workOrder: WorkOrder, events?: S.EventsOf<WorkOrder>): Promise<WorkOrder> {
    const path = this.core.paths.workOrder("pending", workOrder.id);
    checkNewWorkOrder(workOrder);
    return this.core.write(`work-order/${workOrder.id}`, async () => {
      if (this.index.get(workOrder.id)) throw workOrderExists(workOrder.id);
      const stored = copyMessage(WorkOrderSchema, workOrder);
      const text = codec.encodeMessage(WorkOrderSchema, stored);
      const staged = events && (await this.events.stage(events(copyMessage(WorkOrderSchema, stored))));
      if (staged) await this.core.fs.commit([{ path, data: text }, ...staged.files]);
      else await this.core.fs.writeFile(path, text);
      this.index.put(stored);
      staged?.indexed();
      return copyMessage(WorkOrderSchema, stored);
    });
  }

  async getWorkOrder(id: string): Promise<WorkOrder | undefined> {
    this.core.ensureOpen();
    const o = this.index.get(id);
    return o && this.wholeOrder(o);
  }

  async listWorkOrders(filter: S.WorkOrderFilter): Promise<S.Page<WorkOrder>> {
    this.core.ensureOpen();
    if (filter.summaryOnly) return this.index.list(filter, summaryMessage);
    const page = this.index.list(filter, (o) => o);
    const items = await Promise.all(page.items.map((o) => this.wholeOrder(o)));
    return { items: items.filter((o) => o !== undefined), nextPageToken: page.nextPageToken };
  }

  // A copy of the stored order: a summary's record is read from its file (a finished order's
  // file is never rewritten). One that cannot be read is left out with a warning.
  private async wholeOrder(o: WorkOrder): Promise<WorkOrder | undefined> {
    if (!isOrderSummary(o)) return copyMessage(WorkOrderSchema, o);
    const path = this.core.paths.workOrder("finished", o.id);
    try {
      const whole = codec.decodeMessage(WorkOrderSchema, await readFile(path, "utf8"));
      if (whole.id === o.id && whole.status === o.status) return whole;
    } catch (e) {
      this.core.warn("could not read a finished work order", { work_order_id: o.id, reason: e instanceof Error ? e.message : String(e) });
      return undefined;
    }
    this.core.warn("a finished work order's file does not match its summary", { work_order_id: o.id });
    return undefined;
  }

  // The stored order in full for a transition under its lock (see wholeOrder).
  private async currentOrder(id: string): Promise<WorkOrder> {
    const o = this.index.get(id);
    const whole = o && (isOrderSummary(o) ? await this.wholeOrder(o) : o);
    if (!whole) throw notFound("work_order", id);
    return whole;
  }

  async nextPendingWorkOrder(nodeId: string): Promise<WorkOrder | undefined> {
    this.core.ensureOpen();
    const o = this.index.nextPending(nodeId);
    return o && copyMessage(WorkOrderSchema, o);
  }

  async countPendingWorkOrders(nodeId: string): Promise<number> {
    this.core.ensureOpen();
    return this.index.countPending(nodeId);
  }

  async pendingPoolOrders(limit: number, after?: Pick<WorkOrder, "priority" | "createdAt" | "id">): Promise<WorkOrder[]> {
    this.core.ensureOpen();
    return this.index.pendingPool(limit, after).map((o) => copyMessage(WorkOrderSchema, o));
  }

  async countWorkOrders(): Promise<S.WorkOrderCount[]> {
    this.core.ensureOpen();
    return this.index.counts();
  }

  // One state-machine step of an order under its lock, made durable.
  // The order's lock is taken before the locks of the records its step edits (withEdits).
  protected transition(id: string, step: (current: WorkOrder) => WorkOrder, events?: S.StepOf<WorkOrder>): Promise<WorkOrder> {
    this.core.paths.workOrder("pending", id);
    return this.core.write(`work-order/${id}`, async () => {
      const current = await this.currentOrder(id);
      const next = step(current);
      if (next === current) return copyMessage(WorkOrderSchema, current); // nothing to do (idempotent)
      const writes = events && stepWrites(events(copyMessage(WorkOrderSchema, next)));
      const staged = writes && (await this.events.stage(writes.events));
      return this.resources.withEdits(writes?.resources ?? [], async (edited) => {
        await this.moveOrder(current, next, [...(staged?.files ?? []), ...edited]);
        staged?.indexed();
        return copyMessage(WorkOrderSchema, next);
      });
    });
  }

  async pruneWorkOrders(finishedBefore: Date, keep: ReadonlySet<string>): Promise<number> {
    this.core.ensureOpen();
    // Out of the indexes in one synchronous step, then off the disk. A finished order is never
    // written again, so nothing can put a pruned file back; a crash midway leaves files the next
    // prune deletes.
    const gone = this.index.removeFinished(finishedBefore, keep);
    for (const o of gone) await rm(this.core.paths.workOrder("finished", o.id), { force: true });
    this.summaryLag += gone.length;
    this.summariseIfBehind();
    return gone.length;
  }

  // Writes the order's new stage file, then removes the old one. A crash in between leaves two
  // copies; open() keeps the more advanced one (progressOf), so the transition is never lost nor
  // undone. `withFiles` (its events' files) is written in the same step.
  private async moveOrder(current: WorkOrder, next: WorkOrder, withFiles: FileOp[]): Promise<void> {
    const from = stageOf(current.status);
    const to = stageOf(next.status);
    const text = codec.encodeMessage(WorkOrderSchema, next);
    const fromPath = this.core.paths.workOrder(from, current.id);
    const toPath = this.core.paths.workOrder(to, next.id);
    if (withFiles.length > 0) {
      await this.core.fs.commit([
        { path: toPath, data: text },
        ...(from === to ? [] : [{ op: "unlink" as const, path: fromPath }]),
        ...withFiles,
      ]);
    } else if (from === to) {
      // A lease renewal stays in its stage: the write replaces the file.
      await this.core.fs.writeFile(toPath, text);
    } else await this.core.fs.move(fromPath, toPath, text);
    if (to !== "finished") return this.index.put(next);
    this.index.put(summarise(next));
    this.summaryLag++;
    this.summariseIfBehind();
  }

  /**
   * Rewrites the finished orders' summary (in the background, tracked like a write) when it is due
   * (summaryDue) or, with `now`, when it lags at all. It only saves work at the next open(): see
   * summary-file.ts.
   */
  summariseIfBehind(now = false): void {
    if (now ? this.summaryLag === 0 : !summaryDue(this.summaryLag, this.index.finishedCount, this.summaryEvery)) return;
    this.summaryLag = 0;
    const rows = [...this.index.finished()].map((o): [string, WorkOrder] => [`${o.id}.json`, o]);
    this.core
      .write("summary/finished-orders", () =>
        writeSummary(this.core.fs, this.core.paths.dir("work-orders", "finished"), ORDER_SUMMARY_ROWS, rows),
      )
      .catch((e: unknown) => {
        this.summaryLag++;
        this.core.warn("could not write the finished work orders' summary", { reason: e instanceof Error ? e.message : String(e) });
      });
  }
}
