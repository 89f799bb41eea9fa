// The finished work orders' summary file (controller/store/file/summary-file.ts): open() indexes
// finished orders from it instead of reading each one, and the summary is only a cache checked
// against the directory, so a crash between an order's write and the summary's write can
// neither lose nor hide an order.
import { create } from "@bufbuild/protobuf";
import { cp, mkdir, mkdtemp, readFile, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { WorkOrderResultSchema, WorkOrderSchema, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { DurableFs } from "../controller/store/file/atomic-write.js";
import { loadSummarised, summaryDue, SUMMARY_FILE, writeSummary } from "../controller/store/file/summary-file.js";
import { json, order } from "./store-conformance.js";

const T0 = Date.parse("2026-11-01T00:00:00Z");
const at = (ms: number) => new Date(T0 + ms);

let dir: string;
let warnings: string[];
let store: FileStore;

async function reopen(): Promise<FileStore> {
  await store.close();
  store = new FileStore(dir, { onWarning: (msg) => warnings.push(msg) });
  await store.open();
  return store;
}

async function finish(id: string, tenantId = "tenant-a"): Promise<WorkOrder> {
  await store.createWorkOrder(order(id, "node-1", 0, tenantId));
  await store.claimWorkOrder(id, "node-1", at(100));
  return (await store.finishWorkOrder(id, "node-1", create(WorkOrderResultSchema, { success: true, code: "APPLY_OK" }), at(200))).workOrder;
}

const finishedPath = (id: string) => join(dir, "work-orders", "finished", `${id}.json`);
const summaryPath = () => join(dir, "work-orders", "finished", SUMMARY_FILE);
const listed = async () => (await store.listWorkOrders({ pageSize: 1000 })).items.map((o) => json(WorkOrderSchema, o));
const summaryNames = async () =>
  (JSON.parse(await readFile(summaryPath(), "utf8")) as { rows: string[] }).rows.map((r) => r.split("\t")[0]!).sort();

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "skipper-summary-"));
  warnings = [];
  store = new FileStore(dir, { onWarning: (msg) => warnings.push(msg) });
  await store.open();
});

afterEach(async () => {
  await store.close();
  await rm(dir, { recursive: true, force: true });
});

describe("finished work orders' summary", () => {
  it("open() takes finished orders from the summary without reading their files", async () => {
    await finish("wo-a");
    await finish("wo-b");
    await store.close(); // writes the summary
    expect(await summaryNames()).toEqual(["wo-a.json", "wo-b.json"]);
    // A file open() read would be quarantined; one it does not read stays put, listed by its summary.
    await writeFile(finishedPath("wo-a"), "not json");
    await reopen();
    expect(warnings).toEqual([]);
    expect((await store.listWorkOrders({ summaryOnly: true })).items.map((o) => o.id)).toEqual(["wo-a", "wo-b"]);
    expect(await readFile(finishedPath("wo-a"), "utf8")).toBe("not json");
    // Read in full only when asked for: the unreadable one is then left out, with a warning.
    expect(await store.getWorkOrder("wo-a")).toBeUndefined();
    expect(warnings).toEqual(["could not read a finished work order"]);
  });

  it("listings after a restart equal those before it", async () => {
    for (let i = 0; i < 5; i++) await finish(`wo-${i}`, i % 2 === 0 ? "tenant-a" : "tenant-b");
    await store.createWorkOrder(order("wo-pending", "node-2", 50));
    const before = await listed();
    const beforeB = (await store.listWorkOrders({ tenantId: "tenant-b" })).items.map((o) => json(WorkOrderSchema, o));
    await reopen();
    expect(await listed()).toEqual(before);
    expect((await store.listWorkOrders({ tenantId: "tenant-b" })).items.map((o) => json(WorkOrderSchema, o))).toEqual(beforeB);
  });

  it("an order finished after the summary was written (a crash before it was rewritten) is read at open", async () => {
    await finish("wo-old");
    await store.close();
    const stale = await readFile(summaryPath(), "utf8");
    await reopen();
    const late = await finish("wo-late");
    await store.close();
    await writeFile(summaryPath(), stale); // as if killed before the summary caught up
    await reopen();
    expect(json(WorkOrderSchema, await store.getWorkOrder("wo-late"))).toEqual(json(WorkOrderSchema, late));
    expect((await store.listWorkOrders({})).items.map((o) => o.id)).toEqual(["wo-late", "wo-old"]);
    await store.close(); // the stale summary is rewritten
    expect(await summaryNames()).toEqual(["wo-late.json", "wo-old.json"]);
  });

  it("a summary row whose file is gone (pruned before the summary was rewritten) is dropped", async () => {
    await finish("wo-keep");
    await finish("wo-gone");
    await store.close();
    await unlink(finishedPath("wo-gone"));
    await reopen();
    expect((await store.listWorkOrders({})).items.map((o) => o.id)).toEqual(["wo-keep"]);
    expect(await store.getWorkOrder("wo-gone")).toBeUndefined();
    expect(warnings).toEqual([]);
  });

  it("a summary that does not parse, or is missing, is rebuilt from the files", async () => {
    await finish("wo-1");
    await finish("wo-2");
    await store.close();
    const copy = `${dir}-copy`;
    await cp(dir, copy, { recursive: true });
    await writeFile(summaryPath(), '{"format":2,"rows":["wo-1.json\t3');
    await reopen();
    expect((await store.listWorkOrders({})).items.map((o) => o.id)).toEqual(["wo-1", "wo-2"]);
    await store.close();
    expect(await summaryNames()).toEqual(["wo-1.json", "wo-2.json"]);
    await unlink(summaryPath());
    await reopen();
    expect((await store.listWorkOrders({})).items.map((o) => o.id)).toEqual(["wo-1", "wo-2"]);
    await rm(copy, { recursive: true, force: true });
  });

  it("a summary row's values keep tabs and backslashes; a row of another shape makes the summary rebuilt", async () => {
    const rows = { toRow: (v: string[]) => v, fromRow: (c: string[]) => c };
    const sub = join(dir, "rows");
    await mkdir(sub);
    const values = ["a\tb", "c\\d\\", "\\t", ""];
    await writeFile(join(sub, "r.json"), "{}");
    await writeSummary(new DurableFs(dir), sub, rows, [["r.json", values]]);
    const none = async () => undefined;
    const read = await loadSummarised(sub, rows, async () => ["read in full"], none);
    expect([read.items, read.stale, read.get("r.json")]).toEqual([[values], false, values]);
    const picky = {
      ...rows,
      fromRow: (c: string[]) => {
        if (c.length !== 4) throw new Error("a short row");
        return c;
      },
    };
    await writeFile(join(sub, SUMMARY_FILE), '{"format":2,"rows":["r.json\\tonly"]}');
    const rebuilt = await loadSummarised(sub, picky, async () => ["read in full"], none);
    expect([rebuilt.items, rebuilt.stale]).toEqual([[["read in full"]], true]);
  });

  it("the summary is rewritten after every `summaryEvery` finished orders, not only at close", async () => {
    await store.close();
    store = new FileStore(dir, { summaryEvery: 2 });
    await store.open();
    await finish("wo-1");
    await finish("wo-2");
    await store.createWorkOrder(order("wo-3", "node-1", 10)); // pending: not in the summary
    // The rewrite runs in the background: wait until the file shows it (close would write it too).
    const written = async () => (await summaryNames().catch((): string[] => [])).includes("wo-2.json");
    for (let i = 0; i < 500 && !(await written()); i++) await new Promise((r) => setTimeout(r, 10));
    expect(await summaryNames()).toEqual(["wo-1.json", "wo-2.json"]);
  });

  it("the rewrite step grows with the directory, so rewriting costs each new record a bounded share", () => {
    // Small directories: every `summaryEvery` changes.
    expect(summaryDue(999, 5_000, 1000)).toBe(false);
    expect(summaryDue(1000, 5_000, 1000)).toBe(true);
    // 100,000 records: a tenth of them, not every 1,000 (which would rewrite 100 rows per record).
    expect(summaryDue(1000, 100_000, 1000)).toBe(false);
    expect(summaryDue(9_999, 100_000, 1000)).toBe(false);
    expect(summaryDue(10_000, 100_000, 1000)).toBe(true);
    // Rows written per change over a long run stay near ten, whatever the size.
    for (const size of [10_000, 100_000, 1_000_000]) {
      let lag = 0;
      let rows = 0;
      for (let change = 0; change < 200_000; change++) {
        lag++;
        if (summaryDue(lag, size, 1000)) {
          rows += size;
          lag = 0;
        }
      }
      expect(rows / 200_000).toBeLessThanOrEqual(11);
    }
    expect(summaryDue(0, 0, 1)).toBe(false);
  });
});
