// The file store: the shared conformance suite, plus what only a file store has — the on-disk
// layout, repairs made at open, path safety and the data-directory lock.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { SnapshotSchema } from "../gen/skipper/v1/snapshot_pb.js";
import { WorkOrderResultSchema, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { DirFsyncBatcher } from "../controller/store/file/dir-fsync.js";
import { encodeMessage, encodeSnapshot } from "../controller/store/record-codec.js";
import { buildSnapshot } from "../controller/snapshots/build-snapshot.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { HistoryRetention } from "../controller/dispatch/history-retention.js";
import { EventSchema } from "../gen/skipper/v1/event_pb.js";
import { pino } from "pino";
import { describeStoreConformance, event, expectCode, order, tenant } from "./store-conformance.js";
import { DeploymentPhase, ResourceSchema, TenantStatusSchema } from "../gen/skipper/v1/resource_pb.js";
import { ordersToKeep } from "../controller/dispatch/orders-in-use.js";

async function tempDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), "skipper-store-"));
}

describeStoreConformance("file", async () => {
  const dir = await tempDir();
  let current = new FileStore(dir);
  await current.open();
  return {
    store: current,
    reopen: async () => {
      await current.close();
      current = new FileStore(dir);
      await current.open();
      return current;
    },
    cleanup: async () => {
      await current.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
});

describe("history retention job", () => {
  it("deletes events older than the retention, from listings and from disk, and logs how many", async () => {
    const dir = await tempDir();
    const store = new FileStore(dir);
    await store.open();
    try {
      const now = new Date("2026-11-23T12:00:00Z");
      const ev = (id: string, at: Date) =>
        create(EventSchema, { id, type: "resource_created", schemaVersion: "v1", timestamp: timestampFromDate(at) });
      await store.appendEvent(ev("ancient", new Date("2026-10-01T00:00:00Z")));
      await store.appendEvent(ev("recent", new Date("2026-11-20T00:00:00Z")));
      const lines: unknown[] = [];
      const logger = pino({ level: "info" }, { write: (l: string) => lines.push(JSON.parse(l)) });
      const job = new HistoryRetention({ store, logger, now: () => now, eventRetentionMs: 30 * 86_400_000, workOrderRetentionMs: 0 });
      expect(await job.prune()).toEqual({ events: 1, workOrders: 0, deployments: 0, audit: 0, webhookDeliveries: 0 });
      expect((await store.listEvents({})).items.map((e) => e.id)).toEqual(["recent"]);
      expect(await readdir(join(dir, "events"))).toEqual(["2026-11-20"]);
      expect(lines).toContainEqual(
        expect.objectContaining({ action: "event_retention", metadata: expect.objectContaining({ pruned: 1 }) }),
      );
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("work-order retention", () => {
  it("deletes old finished orders but keeps each target's last order and the orders of its last 5 successful specs", async () => {
    const dir = await tempDir();
    const store = new FileStore(dir);
    await store.open();
    try {
      const now = new Date("2026-11-23T12:00:00Z");
      const day = (d: number) => new Date(Date.UTC(2026, 9, d, 12)); // October: over 30 days ago
      const finish = async (
        id: string,
        spec: string,
        finishedDay: number,
        opts: { ok?: boolean; type?: WorkOrderType; at?: Date } = {},
      ) => {
        const o = order(id, "node-1", 0, "tenant-a");
        o.type = opts.type ?? WorkOrderType.DEPLOY_SERVICE;
        o.desiredState!.specHash = spec;
        await store.createWorkOrder(o);
        const when = opts.at ?? day(finishedDay);
        await store.claimWorkOrder(id, "node-1", new Date(when.getTime() - 1000));
        const result = create(WorkOrderResultSchema, {
          success: opts.ok ?? true,
          code: (opts.ok ?? true) ? "APPLY_OK" : "COMPOSE_INVALID",
        });
        await store.finishWorkOrder(id, "node-1", result, when);
      };
      // Newest first the specs are h6, h5, h4, h2, h3 (five), then h1: o2 is an older copy of h2.
      await finish("o1", "h1", 1);
      await finish("o2", "h2", 2);
      await finish("o3", "h3", 3);
      await finish("o4", "h2", 4);
      await finish("o5", "h4", 5);
      await finish("o6", "h5", 6);
      await finish("o7", "h6", 7);
      await finish("o8-failed", "h7", 8, { ok: false });
      await finish("o9-command", "", 9, { type: WorkOrderType.EXECUTE_COMMAND });
      await finish("o10-recent", "h8", 0, { type: WorkOrderType.EXECUTE_COMMAND, at: new Date("2026-11-20T00:00:00Z") });
      // Each order's deployment, finished when the order did.
      for (const [id, d] of [
        ["o1", 1],
        ["o2", 2],
        ["o3", 3],
        ["o4", 4],
        ["o5", 5],
        ["o6", 6],
        ["o7", 7],
        ["o8-failed", 8],
      ] as const) {
        await store.createResource(
          create(ResourceSchema, {
            id: `dep-${id}`,
            resourceType: "deployment",
            desiredState: { kind: { case: "deployment", value: { tenantId: "tenant-a", nodeId: "node-1", workOrderId: id } } },
            currentState: {
              kind: {
                case: "deployment",
                value: {
                  phase: id === "o8-failed" ? DeploymentPhase.FAILED : DeploymentPhase.SUCCEEDED,
                  finishedAt: timestampFromDate(day(d)),
                },
              },
            },
          }),
        );
      }
      // The tenant's record still names o1 as its last order on node-1, and dep-o2 as its current
      // deployment (say, after an admin rolled back to it).
      await store.createResource(tenant("tenant-a"));
      await store.updateResource("tenant", "tenant-a", (t) => {
        t.currentState = {
          $typeName: "skipper.v1.ResourceStatus",
          kind: {
            case: "tenant",
            value: create(TenantStatusSchema, { deploymentId: "dep-o2", targets: [{ nodeId: "node-1", lastWorkOrderId: "o1" }] }),
          },
        };
        return t;
      });
      const lines: Array<{ action?: string; metadata?: { pruned?: number } }> = [];
      const logger = pino({ level: "info" }, { write: (l: string) => lines.push(JSON.parse(l)) });
      const job = new HistoryRetention({ store, logger, now: () => now, eventRetentionMs: 0, workOrderRetentionMs: 30 * 86_400_000 });
      expect(await job.prune()).toEqual({ events: 0, workOrders: 3, deployments: 1, audit: 0, webhookDeliveries: 0 });
      const left = (await store.listWorkOrders({})).items.map((o) => o.id).sort();
      expect(left).toEqual(["o1", "o10-recent", "o3", "o4", "o5", "o6", "o7"]);
      // The kept orders' deployments and the current one stay; the failed order's goes.
      const deps = (await store.listResources({ resourceType: "deployment" })).items.map((d) => d.id).sort();
      expect(deps).toEqual(["dep-o1", "dep-o2", "dep-o3", "dep-o4", "dep-o5", "dep-o6", "dep-o7"]);
      expect(await readdir(join(dir, "work-orders", "finished"))).toEqual(left.map((id) => `${id}.json`).sort());
      expect(lines).toContainEqual(
        expect.objectContaining({ action: "work_order_retention", metadata: expect.objectContaining({ pruned: 3 }) }),
      );
      expect(await job.prune()).toEqual({ events: 0, workOrders: 0, deployments: 0, audit: 0, webhookDeliveries: 0 });
    } finally {
      await store.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("the keep rule counts specs per tenant and node, newest first, and only deploys and rollbacks", () => {
    const o = (
      id: string,
      tenantId: string,
      nodeId: string,
      specHash: string,
      finishedAtMs: number,
      type = WorkOrderType.DEPLOY_SERVICE,
    ) => ({ id, tenantId, nodeId, specHash, finishedAtMs, type });
    const keep = ordersToKeep(
      [],
      [
        o("a1", "t", "n1", "x", 1),
        o("a2", "t", "n1", "y", 2),
        o("a3", "t", "n1", "x", 3),
        o("b1", "t", "n2", "x", 1),
        o("r1", "t", "n1", "z", 4, WorkOrderType.ROLLBACK),
        o("c1", "t", "n1", "w", 5, WorkOrderType.RESTART_SERVICE),
      ],
      2,
    );
    expect([...keep].sort()).toEqual(["a3", "b1", "r1"]);
  });
});

describe("file store on disk", () => {
  let parent: string;
  let dataDir: string;
  let store: FileStore;
  let warnings: Array<{ msg: string; meta: object }>;
  const open = async () => {
    store = new FileStore(dataDir, { onWarning: (msg, meta) => warnings.push({ msg, meta }) });
    await store.open();
    return store;
  };
  const readJson = async (rel: string) => JSON.parse(await readFile(join(dataDir, rel), "utf8")) as Record<string, unknown>;

  beforeEach(async () => {
    parent = await tempDir();
    dataDir = join(parent, "data");
    warnings = [];
    await open();
  });
  afterEach(async () => {
    await store.close();
    await rm(parent, { recursive: true, force: true });
  });

  it("records land at the documented paths as readable proto JSON", async () => {
    await store.createResource(tenant("example-tenant"));
    const text = await readFile(join(dataDir, "resources/tenants/example-tenant.json"), "utf8");
    expect(text.endsWith("}\n")).toBe(true);
    expect(text).toContain('\n  "resource_type": "tenant"');
    expect(JSON.parse(text)).toMatchObject({
      id: "example-tenant",
      desired_state: { tenant: { display_name: "example-tenant" } },
      metadata: { resource_version: "1" },
    });

    await store.createWorkOrder(order("wo-1", "node-1"));
    expect(await readJson("work-orders/pending/wo-1.json")).toMatchObject({ id: "wo-1", status: "WORK_ORDER_STATUS_PENDING" });
    await store.claimWorkOrder("wo-1", "node-1", new Date());
    expect(existsSync(join(dataDir, "work-orders/pending/wo-1.json"))).toBe(false);
    expect(await readJson("work-orders/running/wo-1.json")).toMatchObject({ claim: { node_id: "node-1" } });
    await store.finishWorkOrder("wo-1", "node-1", create(WorkOrderResultSchema, { success: true, code: "APPLY_OK" }), new Date());
    expect(existsSync(join(dataDir, "work-orders/running/wo-1.json"))).toBe(false);
    expect(await readJson("work-orders/finished/wo-1.json")).toMatchObject({ status: "WORK_ORDER_STATUS_SUCCESS" });

    const ev = event("ev-1", 0);
    ev.timestamp = timestampFromDate(new Date("2026-11-22T10:15:00.123Z"));
    await store.appendEvent(ev);
    expect(await readJson("events/2026-11-22/20261122T101500123Z-ev-1.json")).toMatchObject({
      id: "ev-1",
      timestamp: "2026-11-22T10:15:00.123Z",
    });

    await store.putSnapshot(create(SnapshotSchema, { snapshotId: "s1", scope: "system" }));
    await store.putSnapshot(create(SnapshotSchema, { snapshotId: "s2", scope: "tenant", tenantId: "example-tenant" }));
    expect(await readJson("snapshots/system/latest.json")).toMatchObject({ snapshot_id: "s1" });
    expect(await readJson("snapshots/tenants/example-tenant.json")).toMatchObject({ snapshot_id: "s2" });

    const key = "ab".repeat(32);
    await store.putIdempotencyRecord({
      key,
      requestHash: "cd",
      response: { a: 1 },
      createdAt: new Date("2026-11-22T10:00:00Z"),
      expiresAt: new Date("2099-01-01T00:00:00Z"),
    });
    expect(await readJson(`idempotency/${key}.json`)).toEqual({
      key,
      request_hash: "cd",
      response: { a: 1 },
      created_at: "2026-11-22T10:00:00.000Z",
      expires_at: "2099-01-01T00:00:00.000Z",
    });
    await store.putNodeCredential({ nodeId: "node-1", tokenHash: "ef", createdAt: new Date("2026-11-22T10:00:00Z") });
    expect(await readJson("auth/nodes/node-1.json")).toEqual({
      node_id: "node-1",
      token_hash: "ef",
      created_at: "2026-11-22T10:00:00.000Z",
    });
    await store.putAdminCredential({ tokenHash: "01", createdAt: new Date("2026-11-22T10:00:00Z") });
    expect(await readJson("auth/admin.json")).toEqual({ token_hash: "01", created_at: "2026-11-22T10:00:00.000Z" });

    expect(existsSync(join(dataDir, "logs"))).toBe(true);
    expect((await readFile(join(dataDir, ".lock"), "utf8")).split("\n")[0]).toBe(String(process.pid));
    await store.close();
    expect(existsSync(join(dataDir, ".lock"))).toBe(false);
  });

  it("a snapshot is written slice by slice as exactly the text encodeMessage gives, and reads back", async () => {
    const resources = Array.from({ length: 450 }, (_, i) => tenant(`t-${i}`, i === 7 ? 'line one\nline "two"\u0000' : `t-${i}`));
    const snapshot = buildSnapshot({
      snapshotId: "s-big",
      scope: "system",
      resources,
      requestId: "r",
      correlationId: "c",
      now: new Date("2026-11-23T09:00:00Z"),
    });
    expect(snapshot.diffs).toHaveLength(450);
    const expected = encodeMessage(SnapshotSchema, snapshot);
    expect(await encodeSnapshot(snapshot, 64)).toBe(expected);
    const empty = create(SnapshotSchema, { snapshotId: "s-empty", scope: "system" });
    expect(await encodeSnapshot(empty)).toBe(encodeMessage(SnapshotSchema, empty));

    await store.putSnapshot(snapshot);
    expect(await readFile(join(dataDir, "snapshots/system/latest.json"), "utf8")).toBe(expected);
    const back = await store.getLatestSnapshot("system");
    expect(back?.resources).toHaveLength(450);
    expect(back && encodeMessage(SnapshotSchema, back)).toBe(expected);
  });

  it("snapshots are read when asked for, not at open; a bad one is quarantined then and reads as none", async () => {
    await store.putSnapshot(create(SnapshotSchema, { snapshotId: "s1", scope: "tenant", tenantId: "t-good" }));
    await store.putSnapshot(create(SnapshotSchema, { snapshotId: "s2", scope: "tenant", tenantId: "t-bad" }));
    await store.close();
    await writeFile(join(dataDir, "snapshots/tenants/t-bad.json"), '{"snapshot_id": "s2", "sco');
    await open();
    expect(warnings).toEqual([]);
    expect((await store.getLatestSnapshot("tenant", "t-good"))?.snapshotId).toBe("s1");
    expect(await store.getLatestSnapshot("tenant", "t-bad")).toBeUndefined();
    expect(warnings.map((w) => w.msg)).toEqual(["moved an unreadable store file to quarantine"]);
    expect(await store.getLatestSnapshot("tenant", "t-none")).toBeUndefined();
    await store.putSnapshot(create(SnapshotSchema, { snapshotId: "s3", scope: "tenant", tenantId: "t-bad" }));
    expect((await store.getLatestSnapshot("tenant", "t-bad"))?.snapshotId).toBe("s3");
  });

  it("leftover temp files are removed at open (in an event day, when the day is first read)", async () => {
    await store.createResource(tenant("kept"));
    await store.close();
    const leftovers = [
      "resources/tenants/.kept.json.0123456789ab.tmp",
      "events/2026-11-22/.x.json.abcdefabcdef.tmp",
      "work-orders/running/.wo.json.000000000000.tmp",
    ];
    await mkdir(join(dataDir, "events/2026-11-22"), { recursive: true });
    for (const rel of leftovers) await writeFile(join(dataDir, rel), '{"torn":');
    await open();
    expect(existsSync(join(dataDir, leftovers[1]!))).toBe(true);
    await store.listEvents({});
    for (const rel of leftovers) expect(existsSync(join(dataDir, rel))).toBe(false);
    expect((await store.getResource("tenant", "kept"))?.id).toBe("kept");
    expect(warnings.filter((w) => w.msg.includes("temp file"))).toHaveLength(3);
  });

  it("an order found in both pending/ and running/ is resolved to running", async () => {
    await store.createWorkOrder(order("wo-x", "node-1"));
    const pendingCopy = await readFile(join(dataDir, "work-orders/pending/wo-x.json"), "utf8");
    await store.claimWorkOrder("wo-x", "node-1", new Date());
    await store.createWorkOrder(order("wo-y", "node-1", 5));
    await store.claimWorkOrder("wo-y", "node-1", new Date());
    const runningY = await readFile(join(dataDir, "work-orders/running/wo-y.json"), "utf8");
    await store.finishWorkOrder("wo-y", "node-1", create(WorkOrderResultSchema, { success: false, code: "E" }), new Date());
    await store.close();
    // As if the process died between writing the new stage and unlinking the old one.
    await writeFile(join(dataDir, "work-orders/pending/wo-x.json"), pendingCopy);
    await writeFile(join(dataDir, "work-orders/running/wo-y.json"), runningY);

    await open();
    expect((await store.getWorkOrder("wo-x"))?.status).toBe(WorkOrderStatus.RUNNING);
    expect((await store.getWorkOrder("wo-y"))?.status).toBe(WorkOrderStatus.FAILED);
    expect(await store.nextPendingWorkOrder("node-1")).toBeUndefined();
    expect(existsSync(join(dataDir, "work-orders/pending/wo-x.json"))).toBe(false);
    expect(existsSync(join(dataDir, "work-orders/running/wo-y.json"))).toBe(false);
    expect(existsSync(join(dataDir, "work-orders/running/wo-x.json"))).toBe(true);
    expect(warnings.filter((w) => w.msg.includes("superseded"))).toHaveLength(2);
  });

  it("a lease expiry interrupted mid-move keeps the pending copy, not the older running one", async () => {
    await store.createWorkOrder(order("wo-z", "node-1"));
    await store.claimWorkOrder("wo-z", "node-1", new Date(1000), 1000);
    const runningCopy = await readFile(join(dataDir, "work-orders/running/wo-z.json"), "utf8");
    await store.expireWorkOrderLease("wo-z", new Date(5000));
    await store.close();
    await writeFile(join(dataDir, "work-orders/running/wo-z.json"), runningCopy);

    await open();
    expect((await store.getWorkOrder("wo-z"))?.status).toBe(WorkOrderStatus.PENDING);
    expect(existsSync(join(dataDir, "work-orders/running/wo-z.json"))).toBe(false);
    expect((await store.claimWorkOrder("wo-z", "node-1", new Date(6000))).claim?.fencingToken).toBe(2n);
  });

  it("a corrupt or misplaced file is quarantined and reported while the rest loads", async () => {
    await store.createResource(tenant("good"));
    await store.close();
    await writeFile(join(dataDir, "resources/tenants/torn.json"), '{"id": "torn", "resource_ty');
    await writeFile(join(dataDir, "resources/tenants/liar.json"), JSON.stringify({ id: "someone-else", resource_type: "tenant" }));
    await writeFile(
      join(dataDir, "work-orders/pending/wo-run.json"),
      JSON.stringify({ id: "wo-run", status: "WORK_ORDER_STATUS_RUNNING" }),
    );

    await open();
    expect((await store.getResource("tenant", "good"))?.id).toBe("good");
    expect(await store.getResource("tenant", "torn")).toBeUndefined();
    expect(await store.getResource("tenant", "someone-else")).toBeUndefined();
    expect(await store.getWorkOrder("wo-run")).toBeUndefined();
    const quarantined = await readdir(join(dataDir, "quarantine"));
    expect(quarantined).toHaveLength(3);
    expect(quarantined.some((f) => f.startsWith("resources__tenants__torn.json."))).toBe(true);
    expect(warnings.filter((w) => w.msg.includes("quarantine"))).toHaveLength(3);
    expect(await readdir(join(dataDir, "resources/tenants"))).toEqual(["good.json"]);
  });

  it("expired idempotency records are pruned at open", async () => {
    const live = "1".repeat(32);
    const dead = "2".repeat(32);
    await store.putIdempotencyRecord({
      key: live,
      requestHash: "h",
      response: {},
      createdAt: new Date(),
      expiresAt: new Date(Date.now() + 60_000),
    });
    await store.putIdempotencyRecord({ key: dead, requestHash: "h", response: {}, createdAt: new Date(0), expiresAt: new Date(1000) });
    await store.close();
    await open();
    expect(await readdir(join(dataDir, "idempotency"))).toEqual([`${live}.json`]);
  });

  it("an expired idempotency record's file is deleted when it is read", async () => {
    const key = "3".repeat(32);
    await store.putIdempotencyRecord({ key, requestHash: "h", response: {}, createdAt: new Date(0), expiresAt: new Date(1000) });
    expect(await store.getIdempotencyRecord(key, new Date(2000))).toBeUndefined();
    expect(existsSync(join(dataDir, `idempotency/${key}.json`))).toBe(false);
  });

  it("ids that could escape the data directory are refused and nothing is written outside it", async () => {
    const bad = ["../x", "..", "a/b", "/etc/passwd", "a\u0000b", "tenänt", "x".repeat(200), "", ".hidden", "a\\b"];
    const ok = create(WorkOrderResultSchema, { success: true, code: "OK" });
    for (const id of bad) {
      await expectCode(store.createResource(tenant(id)), "INVALID_REQUEST");
      await expectCode(
        store.updateResource("tenant", id, (r) => r),
        "INVALID_REQUEST",
      );
      await expectCode(store.createWorkOrder(order(id, "node-1")), "INVALID_REQUEST");
      await expectCode(store.claimWorkOrder(id, "node-1", new Date()), "INVALID_REQUEST");
      await expectCode(store.finishWorkOrder(id, "node-1", ok, new Date()), "INVALID_REQUEST");
      await expectCode(store.appendEvent(event(id, 0)), "INVALID_REQUEST");
      await expectCode(store.putSnapshot(create(SnapshotSchema, { snapshotId: "s", scope: "tenant", tenantId: id })), "INVALID_REQUEST");
      await expectCode(store.putNodeCredential({ nodeId: id, tokenHash: "h", createdAt: new Date() }), "INVALID_REQUEST");
      await expectCode(
        store.putIdempotencyRecord({ key: id, requestHash: "h", response: {}, createdAt: new Date(), expiresAt: new Date() }),
        "INVALID_REQUEST",
      );
    }
    await expectCode(store.claimWorkOrder("wo-ok", "../node", new Date()), "INVALID_REQUEST");
    await expectCode(store.getIdempotencyRecord("ABCDEF0123456789", new Date()), "INVALID_REQUEST");
    await expectCode(
      store.putIdempotencyRecord({ key: "abc", requestHash: "h", response: {}, createdAt: new Date(), expiresAt: new Date() }),
      "INVALID_REQUEST",
    );
    await expectCode(store.createResource(Object.assign(tenant("fine"), { resourceType: "../tenant" })), "INVALID_REQUEST");
    expect(await readdir(parent)).toEqual(["data"]);
    expect((await readdir(join(dataDir, "resources/tenants"))).length).toBe(0);
    expect((await readdir(join(dataDir, "events"))).length).toBe(0);
    expect((await readdir(join(dataDir, "work-orders/pending"))).length).toBe(0);
  });

  it("a second store on the same directory fails to open while the first holds the lock", async () => {
    const second = new FileStore(dataDir);
    await expect(second.open()).rejects.toThrow(/already open/);
    await store.close();
    await second.open();
    await second.close();
  });

  it("a lock held by another live process makes open fail; a dead owner's lock is taken over", async () => {
    await store.close();
    const sleeper = spawn(process.execPath, ["-e", "setTimeout(() => {}, 30000)"], { stdio: "ignore" });
    try {
      await writeFile(join(dataDir, ".lock"), `${sleeper.pid}\n`);
      await expect(open()).rejects.toThrow(/in use by another controller \(pid \d+/);
    } finally {
      sleeper.kill("SIGKILL");
      await new Promise((r) => sleeper.once("exit", r));
    }
    // The sleeper is now dead: its lock is stale.
    await open();
    expect((await readFile(join(dataDir, ".lock"), "utf8")).split("\n")[0]).toBe(String(process.pid));
  });

  it("close is idempotent and a closed store refuses calls", async () => {
    await store.close();
    await store.close();
    await expect(store.getResource("tenant", "x")).rejects.toThrow(/not open/);
  });
});

describe("directory fsync group commit", () => {
  it("sync calls made while a directory fsync runs share the next one", async () => {
    const dir = await tempDir();
    try {
      const batcher = new DirFsyncBatcher();
      const first = batcher.sync(dir); // starts an fsync at once
      const followers = Array.from({ length: 15 }, () => batcher.sync(dir)); // queue behind it
      await Promise.all([first, ...followers]);
      expect(batcher.fsyncCount).toBe(2);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("a sync requested during a running fsync is resolved only by a later fsync", async () => {
    const dir = await tempDir();
    try {
      const batcher = new DirFsyncBatcher();
      const order: string[] = [];
      const a = batcher.sync(dir).then(() => order.push(`a@${batcher.fsyncCount}`));
      const b = batcher.sync(dir).then(() => order.push(`b@${batcher.fsyncCount}`));
      await Promise.all([a, b]);
      expect(order).toEqual(["a@1", "b@2"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
