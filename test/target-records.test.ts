// Outcomes of one tenant's orders that arrive while its lock is held are recorded together, with
// one write of the tenant's record; each call returns once its own outcome is stored, a failing
// step before it fails that call alone, and a late result of a superseded order changes nothing.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  ConvergenceSchema,
  ConvergenceStatus,
  type Resource,
  ResourceStatusSchema,
  TargetStatusSchema,
  TenantReleaseSchema,
} from "../gen/skipper/v1/resource_pb.js";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { TargetRecords, tenantStatusOf } from "../controller/reconcile/target-records.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { tenant } from "./store-conformance.js";

const TENANT = "t-batch";
const NODES = Array.from({ length: 20 }, (_, i) => `node-${String(i).padStart(2, "0")}`);

class CountingStore extends FileStore {
  tenantWrites = 0;
  override async updateResource(...args: Parameters<FileStore["updateResource"]>): Promise<Resource> {
    const before = (await this.getResource(args[0], args[1]))?.metadata?.resourceVersion;
    const after = await super.updateResource(...args);
    if (args[0] === "tenant" && after.metadata?.resourceVersion !== before) this.tenantWrites++;
    return after;
  }
}

function finished(nodeId: string, orderId: string, code = "APPLY_OK") {
  return create(WorkOrderSchema, {
    id: orderId,
    type: WorkOrderType.DEPLOY_SERVICE,
    status: code === "APPLY_OK" ? WorkOrderStatus.SUCCESS : WorkOrderStatus.FAILED,
    target: { tenantId: TENANT, nodeId },
    desiredState: { specHash: `hash-${orderId}` },
    result: { success: code === "APPLY_OK", code, message: code },
  });
}

// Takes the tenant's lock and keeps it until release() is called.
async function holdLock(records: TargetRecords): Promise<{ held: Promise<void>; release: () => void }> {
  let release!: () => void;
  let taken!: () => void;
  const isTaken = new Promise<void>((r) => (taken = r));
  const held = records.exclusive(TENANT, () => {
    taken();
    return new Promise<void>((r) => (release = r));
  });
  await isTaken;
  return { held, release };
}

describe("TargetRecords.recordFinished", () => {
  let dir: string;
  let store: CountingStore;
  let records: TargetRecords;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-records-"));
    store = new CountingStore(dir);
    await store.open();
    const t = tenant(TENANT);
    t.currentState = create(ResourceStatusSchema, {
      kind: {
        case: "tenant",
        value: { targets: NODES.map((nodeId) => create(TargetStatusSchema, { nodeId, lastWorkOrderId: `order-${nodeId}` })) },
      },
    });
    await store.createResource(t);
    records = new TargetRecords(store);
  });
  afterEach(async () => {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("records the outcomes that waited for the lock with one write", async () => {
    const { held, release } = await holdLock(records);
    const calls = NODES.map((n, i) =>
      records.recordFinished(finished(n, `order-${n}`, i === 3 ? "COMPOSE_FAILED" : "APPLY_OK"), new Date()),
    );
    // A result of an order the target no longer waits for.
    const late = records.recordFinished(finished(NODES[0]!, "order-old"), new Date());
    const writesBefore = store.tenantWrites;
    release();
    await held;
    await Promise.all([...calls, late]);
    expect(store.tenantWrites - writesBefore).toBe(1);
    const targets = tenantStatusOf(await store.getResource("tenant", TENANT)).targets;
    expect(targets).toHaveLength(NODES.length);
    for (const n of NODES) {
      const t = targets.find((x) => x.nodeId === n)!;
      expect(t.lastWorkOrderId).toBe(`order-${n}`);
      expect(t.lastResultCode).toBe(n === NODES[3] ? "COMPOSE_FAILED" : "APPLY_OK");
      expect(t.finishedAt).toBeDefined();
      if (n !== NODES[3]) expect(t.appliedHash).toBe(`hash-order-${n}`);
    }
  });

  it("fails only the call whose step before it failed", async () => {
    const { held, release } = await holdLock(records);
    const good = records.recordFinished(finished(NODES[1]!, `order-${NODES[1]}`), new Date());
    const bad = records
      .recordFinished(finished(NODES[2]!, `order-${NODES[2]}`), new Date(), async () => {
        throw new Error("disk full");
      })
      .then(
        () => "recorded",
        (e: Error) => e.message,
      );
    release();
    await held;
    await expect(good).resolves.toBeUndefined();
    expect(await bad).toBe("disk full");
    const targets = tenantStatusOf(await store.getResource("tenant", TENANT)).targets;
    expect(targets.find((x) => x.nodeId === NODES[1])?.lastResultCode).toBe("APPLY_OK");
    expect(targets.find((x) => x.nodeId === NODES[2])?.lastResultCode).toBe("");
  });
});

describe("TargetRecords.writePass and a tenant's release record", () => {
  it("keeps the stored converged_since of the same release, though the pass read the tenant before it was stamped", async () => {
    const dir = await mkdtemp(join(tmpdir(), "skipper-release-"));
    const store = new FileStore(dir);
    await store.open();
    try {
      const records = new TargetRecords(store);
      const stale = await store.createResource(tenant(TENANT));
      const conv = create(ConvergenceSchema, { status: ConvergenceStatus.CONVERGED });
      const release = (sinceMs: number, releaseId = "rel-1") =>
        create(TenantReleaseSchema, { environmentId: "test", releaseId, convergedSince: timestampFromMs(sinceMs) });
      await records.writePass(stale, [], conv, "", release(1000));
      // A pass that read the tenant before that write stamps a later time: the first one stays.
      await records.writePass(stale, [], conv, "", release(5000));
      const kept = tenantStatusOf(await store.getResource("tenant", TENANT)).release;
      expect(kept?.convergedSince && timestampMs(kept.convergedSince)).toBe(1000);
      // Another release starts its own time.
      await records.writePass(stale, [], conv, "", release(7000, "rel-2"));
      const next = tenantStatusOf(await store.getResource("tenant", TENANT)).release;
      expect([next?.releaseId, next?.convergedSince && timestampMs(next.convergedSince)]).toEqual(["rel-2", 7000]);
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
