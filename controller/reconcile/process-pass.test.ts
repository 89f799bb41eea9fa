// One pass of the process reconciler on a real file store: an order dispatch refuses for one node
// fails that node alone, and the status (with the other nodes' orders) is written all the same.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { ProcessModuleReason as R } from "../../gen/skipper/v1/process_pb.js";
import { NodeLiveness, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { SkipperError, conflict } from "../base/errors.js";
import { FileStore } from "../store/file/file-store.js";
import { processOrderId } from "./plan-processes.js";
import { runProcessPass } from "./process-pass.js";

const NOW = new Date("2026-11-29T16:00:00Z");
const CREATED = new Date("2026-11-29T15:00:00Z");
let dir: string | undefined;
let store: FileStore | undefined;
afterEach(async () => {
  await store?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
  store = undefined;
  dir = undefined;
});

function nodeResource(id: string): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "node",
    schemaVersion: "v1",
    metadata: {},
    createdAt: timestampFromDate(CREATED),
    desiredState: { kind: { case: "node", value: {} } },
    currentState: {
      kind: {
        case: "node",
        value: {
          liveness: NodeLiveness.ONLINE,
          capabilities: { allowedProcessSources: ["/srv"] },
          lastHeartbeatAt: timestampFromDate(NOW),
        },
      },
    },
  });
}

function processResource(): Resource {
  return create(ResourceSchema, {
    id: "app",
    resourceType: "process",
    schemaVersion: "v1",
    metadata: {},
    createdAt: timestampFromDate(CREATED),
    desiredState: {
      kind: {
        case: "process",
        value: {
          spec: {
            module: "app",
            version: "1.0",
            source: { kind: { case: "path", value: "/srv/app.tgz" } },
            sha256: "a".repeat(64),
            argv: ["bin/app"],
          },
        },
      },
    },
  });
}

describe("process pass", () => {
  it("an order refused for one node fails that node (FAILED, no order named); the other's order and the status are written", async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-process-pass-"));
    store = new FileStore(dir);
    await store.open();
    for (const r of [nodeResource("n1"), nodeResource("n2"), processResource()]) await store.createResource(r);
    const queued: string[] = [];
    const queueOrder = async (_req: unknown, _trace: unknown, id: string): Promise<WorkOrder> => {
      if (id === processOrderId("app", CREATED.getTime(), "n1", 1)) throw conflict("node n1 is disabled", { reason: "NODE_DISABLED" });
      queued.push(id);
      return create(WorkOrderSchema, { id });
    };
    const s = store;
    const wakeAt = await runProcessPass({
      store: s,
      logger: pino({ level: "silent" }),
      now: () => NOW,
      queueOrder,
      backoffMs: 1000,
      backoffCapMs: 60_000,
    });
    expect(queued).toEqual([processOrderId("app", CREATED.getTime(), "n2", 1)]);
    const r = await s.getResource("process", "app");
    const st = r?.currentState?.kind.case === "process" ? r.currentState.kind.value : undefined;
    expect(st?.nodes.map((n) => [n.nodeId, n.reason, n.workOrderId])).toEqual([
      ["n1", R.FAILED, ""],
      ["n2", R.DOWNLOADING, queued[0]],
    ]);
    expect(st?.nodes[0]?.message).toMatch(/could not be queued: CONFLICT: node n1 is disabled/);
    expect(wakeAt).toBe(NOW.getTime() + 1000);
  });

  it("a store that does not answer fails the whole pass: no status is written, the next pass queues the same ids", async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-process-pass-"));
    store = new FileStore(dir);
    await store.open();
    for (const r of [nodeResource("n1"), processResource()]) await store.createResource(r);
    const s = store;
    const down = async (): Promise<WorkOrder> => {
      throw new SkipperError("UNAVAILABLE", "the store is not answering");
    };
    await runProcessPass({
      store: s,
      logger: pino({ level: "silent" }),
      now: () => NOW,
      queueOrder: down,
      backoffMs: 1000,
      backoffCapMs: 60_000,
    });
    expect((await s.getResource("process", "app"))?.currentState?.kind.case).toBeUndefined();
  });
});
