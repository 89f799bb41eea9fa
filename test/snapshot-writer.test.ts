// Snapshot writes are coalesced per scope: a burst of changes costs a few writes, not one each;
// a read of the latest snapshot first makes the write still owed, so it shows the last change;
// after a crash, start-up writes the snapshots of tenants changed since their latest one.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Snapshot } from "../gen/skipper/v1/snapshot_pb.js";
import { SnapshotWriter } from "../controller/snapshots/snapshot-writer.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { tenant } from "./store-conformance.js";

const log = pino({ level: "silent" });
const trace = (n: number) => ({ requestId: `req-${n}`, correlationId: `corr-${n}` });

// Counts the snapshots written per scope.
class CountingStore extends FileStore {
  readonly written: Snapshot[] = [];
  // Tenant snapshots being written at this moment, and the most there ever were at once.
  private writingTenants = 0;
  mostTenantsAtOnce = 0;
  override async putSnapshot(s: Snapshot): Promise<void> {
    if (s.scope === "tenant") this.mostTenantsAtOnce = Math.max(this.mostTenantsAtOnce, ++this.writingTenants);
    try {
      await super.putSnapshot(s);
    } finally {
      if (s.scope === "tenant") this.writingTenants--;
    }
    this.written.push(s);
  }
}

describe("SnapshotWriter", () => {
  let dir: string;
  let store: CountingStore;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-snap-"));
    store = new CountingStore(dir);
    await store.open();
    await store.createResource(tenant("t1", "first"));
  });
  afterEach(async () => {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });

  const displayName = (s: Snapshot | undefined) => {
    const k = s?.resources.find((r) => r.id === "t1")?.desiredState?.kind;
    return k?.case === "tenant" ? k.value.displayName : undefined;
  };

  it("writes a burst of changes as a few snapshots, and a read shows the last change", async () => {
    const writer = new SnapshotWriter(store, log, 60_000);
    for (let i = 1; i <= 50; i++) {
      await store.updateResource("tenant", "t1", (t) => {
        if (t.desiredState?.kind.case === "tenant") t.desiredState.kind.value.displayName = `name-${i}`;
        return t;
      });
      await writer.afterChange("t1", trace(i));
    }
    await writer.settle("t1");
    const latest = await store.getLatestSnapshot("tenant", "t1");
    expect(displayName(latest)).toBe("name-50");
    expect(latest?.requestId).toBe("req-50");
    const tenantWrites = store.written.filter((s) => s.scope === "tenant").length;
    expect(tenantWrites).toBeGreaterThanOrEqual(1);
    expect(tenantWrites).toBeLessThan(10);
    // The system snapshot: the first change wrote one at once, the rest owe one more.
    await writer.settle();
    expect(store.written.filter((s) => s.scope === "system").length).toBe(2);
    expect((await store.getLatestSnapshot("system"))?.requestId).toBe("req-50");
    // Nothing owed: settling again writes nothing.
    const before = store.written.length;
    await writer.flush();
    expect(store.written.length).toBe(before);
  });

  it("many tenants changing at once share one budget: one tenant snapshot at a time, each tenant's last change written", async () => {
    const writer = new SnapshotWriter(store, log, 60_000);
    const ids = Array.from({ length: 30 }, (_, i) => `bulk-${i}`);
    for (const id of ids) await store.createResource(tenant(id, `${id}-v1`));
    for (const round of [1, 2, 3])
      for (const id of ids) {
        await store.updateResource("tenant", id, (t) => {
          if (t.desiredState?.kind.case === "tenant") t.desiredState.kind.value.displayName = `${id}-r${round}`;
          return t;
        });
        await writer.afterChange(id, trace(round));
      }
    await writer.flush();
    expect(store.mostTenantsAtOnce).toBe(1);
    for (const id of ids) {
      const latest = await store.getLatestSnapshot("tenant", id);
      const k = latest?.resources.find((r) => r.id === id)?.desiredState?.kind;
      expect(k?.case === "tenant" ? k.value.displayName : undefined).toBe(`${id}-r3`);
    }
    // Each tenant's three changes cost at most three writes, usually one.
    expect(store.written.filter((s) => s.scope === "tenant").length).toBeLessThanOrEqual(3 * ids.length);
  });

  it("on start-up writes the snapshots of tenants changed after their latest one, and only those", async () => {
    await store.createResource(tenant("t2", "second"));
    const first = new SnapshotWriter(store, log);
    await first.afterChange("t1", trace(1));
    await first.afterChange("t2", trace(2));
    await first.flush();
    // A change whose snapshot was owed when the controller stopped without flushing.
    await store.updateResource("tenant", "t1", (t) => {
      if (t.desiredState?.kind.case === "tenant") t.desiredState.kind.value.displayName = "renamed";
      t.updatedAt = timestampFromDate(new Date(Date.now() + 1000));
      return t;
    });
    const t2Before = await store.getLatestSnapshot("tenant", "t2");
    const restarted = new SnapshotWriter(store, log);
    // Start-up does not wait for the catch-up; a read of the snapshot does.
    const owed = restarted.catchUp(trace(3));
    await restarted.settle("t1");
    expect(displayName(await store.getLatestSnapshot("tenant", "t1"))).toBe("renamed");
    expect(await owed).toBe(1);
    await restarted.flush();
    expect((await store.getLatestSnapshot("tenant", "t2"))?.snapshotId).toBe(t2Before?.snapshotId);
  });
});
