// The file store's event log (controller/store/file/event-log.ts, event-day.ts): open() reads no event
// and no day; a day is read from its summary file and file names when first needed, and an
// event's body from its file when it is listed. The summary is only a cache checked against the
// directory, so a crash between an event's write and its day's summary can neither lose nor hide
// an event.
import { readFile, rm, unlink, writeFile, mkdtemp } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { EventSchema, type Event } from "../gen/skipper/v1/event_pb.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { StorePaths } from "../controller/store/file/store-paths.js";
import { SUMMARY_FILE } from "../controller/store/file/summary-file.js";
import { event, json } from "./store-conformance.js";

const DAY = 86_400_000;

let dir: string;
let warnings: string[];
let store: FileStore;

async function reopen(options: { summaryEvery?: number } = {}): Promise<FileStore> {
  await store.close();
  store = new FileStore(dir, { ...options, onWarning: (msg) => warnings.push(msg) });
  await store.open();
  return store;
}

const fileOf = (e: Event) => new StorePaths(dir).event(timestampDate(e.timestamp!), e.id);
const summaryOf = (e: Event) => join(dirname(fileOf(e)), SUMMARY_FILE);
const summaryNames = async (e: Event) =>
  (JSON.parse(await readFile(summaryOf(e), "utf8")) as { rows: string[] }).rows.map((r) => r.split("\t")[0]!).sort();
const listed = async () => (await store.listEvents({ pageSize: 1000 })).items.map((e) => json(EventSchema, e));
const ids = async () => (await store.listEvents({ pageSize: 1000 })).items.map((e) => e.id);

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "skipper-events-"));
  warnings = [];
  store = new FileStore(dir, { onWarning: (msg) => warnings.push(msg) });
  await store.open();
});

afterEach(async () => {
  await store.close();
  await rm(dir, { recursive: true, force: true });
});

describe("file store event log", () => {
  it("open() reads no event; a listed event's body is read from its file", async () => {
    const a = event("ev-a", 0);
    await store.appendEvent(a);
    await store.appendEvent(event("ev-b", 10));
    await store.appendEvent(event("ev-c", DAY));
    await store.close(); // writes each day's summary
    expect(await summaryNames(a)).toHaveLength(2);
    // A file open() read would be quarantined; one it does not read stays put.
    await writeFile(fileOf(a), "not json");
    await reopen();
    expect(warnings).toEqual([]);
    expect(await readFile(fileOf(a), "utf8")).toBe("not json");
    // Listed, its row is found in the summary but its body cannot be read: left out, with a warning.
    expect(await ids()).toEqual(["ev-b", "ev-c"]);
    expect(warnings).toEqual(["could not read an event"]);
  });

  it("listings and page tokens after a restart equal those before it", async () => {
    for (let i = 0; i < 7; i++) await store.appendEvent(event(`ev-${i}`, i * 0.4 * DAY, { tenantId: i % 2 ? "t1" : "t2" }));
    const before = await listed();
    const first = await store.listEvents({ pageSize: 3 });
    await reopen();
    expect(await listed()).toEqual(before);
    const next = await store.listEvents({ pageSize: 3, pageToken: first.nextPageToken });
    expect(next.items.map((e) => e.id)).toEqual(["ev-3", "ev-4", "ev-5"]);
    expect(
      (await store.listEvents({ tenantId: "t1", since: timestampDate(event("x", 0.5 * DAY).timestamp!) })).items.map((e) => e.id),
    ).toEqual(["ev-3", "ev-5"]);
  });

  it("an event written after its day's summary (a crash before the rewrite) is read in full when the day is read", async () => {
    const old = event("ev-old", 0);
    await store.appendEvent(old);
    await store.close();
    const stale = await readFile(summaryOf(old), "utf8");
    await reopen();
    const late = event("ev-late", 5, { type: "resource_updated", resourceId: "r1" });
    await store.appendEvent(late);
    await store.close();
    await writeFile(summaryOf(old), stale); // as if killed before the summary caught up
    await reopen();
    expect(await listed()).toEqual([json(EventSchema, old), json(EventSchema, late)]);
    expect((await store.listEvents({ resourceId: "r1" })).items.map((e) => e.id)).toEqual(["ev-late"]);
    await store.close(); // the stale summary was rewritten when the day was read
    expect(await summaryNames(old)).toHaveLength(2);
    expect(warnings).toEqual([]);
  });

  it("a summary row whose file is gone is dropped; a summary that does not parse is rebuilt", async () => {
    const keep = event("ev-keep", 0);
    const gone = event("ev-gone", 1);
    await store.appendEvent(keep);
    await store.appendEvent(gone);
    await store.close();
    await unlink(fileOf(gone));
    await reopen();
    expect(await ids()).toEqual(["ev-keep"]);
    await writeFile(summaryOf(keep), '{"format":2,"rows":["x.json\t3');
    await reopen();
    expect(await ids()).toEqual(["ev-keep"]);
    await unlink(summaryOf(keep));
    await reopen();
    expect(await ids()).toEqual(["ev-keep"]);
    expect(warnings).toEqual([]);
  });

  it("a bad event file the summary does not name is quarantined when its day is read, not at open", async () => {
    const good = event("ev-good", 0);
    await store.appendEvent(good);
    await store.close();
    const bad = join(dirname(fileOf(good)), "20261122T100000001Z-ev-bad.json");
    await writeFile(bad, '{"id": "ev-ba');
    await reopen();
    expect(existsSync(bad)).toBe(true);
    expect(await ids()).toEqual(["ev-good"]);
    expect(existsSync(bad)).toBe(false);
    expect(warnings).toEqual(["moved an unreadable store file to quarantine"]);
  });

  it("appending an event again after a restart is a no-op, on a day not read before", async () => {
    await store.appendEvent(event("ev-1", 0, { type: "resource_created" }));
    await store.appendEvent(event("ev-2", 2 * DAY));
    await reopen();
    await store.appendEvent(event("ev-1", 0, { type: "resource_updated" }));
    expect((await store.listEvents({})).items.map((e) => [e.id, e.type])).toEqual([
      ["ev-1", "resource_created"],
      ["ev-2", "resource_created"],
    ]);
  });

  it("pruning counts and removes the events of days never read", async () => {
    for (let i = 0; i < 3; i++) await store.appendEvent(event(`old-${i}`, -3 * DAY + i));
    await store.appendEvent(event("new", 0));
    await reopen();
    expect(await store.pruneEvents(new Date(timestampDate(event("x", -DAY).timestamp!)))).toBe(3);
    expect(await ids()).toEqual(["new"]);
    await reopen();
    expect(await ids()).toEqual(["new"]);
  });

  it("a day's summary is rewritten after every `summaryEvery` events, not only at close", async () => {
    await reopen({ summaryEvery: 2 });
    const first = event("ev-1", 0);
    await store.appendEvent(first);
    await store.appendEvent(event("ev-2", 1));
    // The rewrite runs in the background: wait until the file shows it (close would write it too).
    const written = async () => (await summaryNames(first).catch((): string[] => [])).length === 2;
    for (let i = 0; i < 500 && !(await written()); i++) await new Promise((r) => setTimeout(r, 10));
    expect(await summaryNames(first)).toHaveLength(2);
  });
});
