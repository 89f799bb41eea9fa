// The controller killed by its own crash point inside a store write (SKIPPER_CRASH_AT): after the
// write's operation is appended to the write-ahead log and synced but before its record file is
// written, after the temp file is written but before the rename, and after the rename but before
// the write is acknowledged. Writers create tenants (each one also makes the reconciler write a deployment,
// a work order, events and the tenant's records) until the process dies at the n-th pass of the
// point; the moment is the point, never a time. Restarted on the same data: every acknowledged
// tenant is there, the store opened clean (no temp file read as a record, none left, nothing
// quarantined), the listings agree with the records, and every tenant stored has its
// resource_created event (one write with it), acknowledged or not. Killed after the log append, the log holds
// operations whose record files are not written yet; the next open puts every one in place.
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterAll, describe, expect, it } from "vitest";
import type { CrashPointName } from "../common/crash-points.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { lastPerPath, readSegments, type LogOp } from "../controller/store/file/write-ahead-log.js";
import { allFiles, crashAt, crashOf, halfWritten } from "./helpers/crash.js";
import { startControllerProcess, stopProcess, type ControllerProcess } from "./helpers/processes.js";

const WRITERS = 4;
const NODE = "store-crash-node";

describe("crash points in a store write", () => {
  const roots: string[] = [];
  let ctl: ControllerProcess | undefined;
  afterAll(async () => {
    if (ctl) await stopProcess(ctl.child);
    for (const r of roots) await rm(r, { recursive: true, force: true });
  });

  // Writers create tenants until the process dies at the n-th pass of `point`.
  async function crashWhileCreating(point: CrashPointName): Promise<{ dataDir: string; port: number; acked: string[]; tried: string[] }> {
    const root = await mkdtemp(join(tmpdir(), "skipper-crash-store-"));
    roots.push(root);
    const dataDir = join(root, "data");
    // Somewhere in the traffic (registering the node alone writes a handful of files).
    const n = 30 + Math.floor(Math.random() * 120);
    ctl = await startControllerProcess({ dataDir, env: crashAt(point, n) });
    const ended = crashOf(ctl.child);
    const port = Number(new URL(ctl.url).port);
    await ctl.admin(NodeService).registerNode({ nodeId: NODE });
    const acked: string[] = [];
    const tried: string[] = [];
    const resources = ctl.admin(ResourceService);
    // Each writer creates tenants one after another until a create fails (the process is gone).
    await Promise.all(
      Array.from({ length: WRITERS }, async (_, w) => {
        for (let i = 0; ; i++) {
          const id = `sc-${w}-${i}`;
          tried.push(id);
          try {
            await resources.createResource({ resourceType: "tenant", resource: tenant(id) });
          } catch {
            return;
          }
          acked.push(id);
        }
      }),
    );
    const end = await ended;
    expect(end, `died at ${point}:${n}`).toMatchObject({ signal: "SIGKILL", point });
    expect(acked.length).toBeGreaterThan(0);
    return { dataDir, port, acked, tried };
  }

  // Restarted on the same data: every acknowledged tenant is there, listings agree, nothing half-written is left.
  async function checkRestart(point: CrashPointName, dataDir: string, port: number, acked: string[], tried: string[]): Promise<void> {
    ctl = await startControllerProcess({ dataDir, port });
    const api = ctl.admin(ResourceService);
    for (const id of acked) expect((await api.getResource({ resourceType: "tenant", id })).resource?.id, id).toBe(id);
    // The listing holds exactly the tenants that can be read, and only ones a writer sent.
    const listed = (await api.listResources({ resourceType: "tenant", pageSize: 1000 })).resources.map((r) => r.id);
    expect(listed.filter((id) => !tried.includes(id))).toEqual([]);
    expect(listed).toEqual(expect.arrayContaining(acked));
    for (const id of listed) expect((await api.getResource({ resourceType: "tenant", id })).resource?.id).toBe(id);
    // A tenant and its resource_created event are one write: every tenant stored has its event,
    // once (a crash keeps both or neither), whether or not its create was acknowledged.
    const events = ctl.admin(EventService);
    const created = new Map<string, number>();
    for (let pageToken = ""; ; ) {
      const page = await events.listEvents({ type: "resource_created", pageSize: 1000, pageToken });
      for (const e of page.events) if (e.resourceType === "tenant") created.set(e.resourceId, (created.get(e.resourceId) ?? 0) + 1);
      pageToken = page.nextPageToken;
      if (!pageToken) break;
    }
    for (const id of listed) expect(created.get(id), `resource_created of ${id}`).toBe(1);
    expect([...created.keys()].filter((id) => !listed.includes(id))).toEqual([]);
    // Every order listed can be read, and names a tenant that exists.
    const orders = ctl.admin(WorkOrderService);
    for (const o of (await orders.listWorkOrders({ pageSize: 1000 })).workOrders) {
      expect((await orders.getWorkOrder({ id: o.id })).workOrder?.id).toBe(o.id);
      expect(listed).toContain(o.target?.tenantId);
    }
    // The restarted controller takes writes again.
    await api.createResource({ resourceType: "tenant", resource: tenant(`sc-after-${point}`) });
    // Stopped (its own writes finished), no temp file or torn record is left: open removed them.
    await stopProcess(ctl.child);
    ctl = undefined;
    expect(await halfWritten(dataDir)).toEqual([]);
    // A clean stop checkpoints the log: nothing is left in it.
    expect(await readdir(join(dataDir, "wal"))).toEqual([]);
  }

  it.each<CrashPointName>(["store.after-write", "store.after-rename"])(
    "%s: no acknowledged write is lost and nothing half-written is read or left",
    async (point) => {
      const { dataDir, port, acked, tried } = await crashWhileCreating(point);
      // Killed between the temp file and the rename, the temp file is still there.
      const temps = (await allFiles(dataDir)).filter((f) => f.endsWith(".tmp"));
      if (point === "store.after-write") expect(temps.length).toBeGreaterThan(0);
      await checkRestart(point, dataDir, port, acked, tried);
    },
    120_000,
  );

  it("store.after-log-append: the next open writes every logged operation's record file, and no acknowledged write is lost", async () => {
    const point = "store.after-log-append";
    const { dataDir, port, acked, tried } = await crashWhileCreating(point);
    const logged = [...lastPerPath((await readSegments(dataDir)).flatMap((s) => s.ops)).values()];
    // The write that died at the point is in the log, its record file is not (yet) what it logged.
    const behind: LogOp[] = [];
    for (const op of logged) if (!(await matches(op))) behind.push(op);
    expect(behind.length).toBeGreaterThan(0);

    const info: string[] = [];
    const store = new FileStore(dataDir, { onInfo: (msg) => info.push(msg) });
    await store.open();
    try {
      expect(info).toContain("replayed the write-ahead log a stop left behind");
      for (const op of logged) expect(await matches(op), `${op.op} ${op.path}`).toBe(true);
    } finally {
      await store.close();
    }
    await checkRestart(point, dataDir, port, acked, tried);
  }, 120_000);
});

// True when the file at the operation's path is what the operation left (put: its data; unlink: no file).
async function matches(op: LogOp): Promise<boolean> {
  const text = await readFile(op.path).catch(() => undefined);
  if (op.op === "put") return text?.equals(op.data) === true;
  return op.op === "unlink" ? text === undefined : true;
}

function tenant(id: string) {
  return create(ResourceSchema, {
    id,
    resourceType: "tenant",
    desiredState: {
      kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE }, compose: { composeFile: "services: {}\n" } } },
    },
  });
}
