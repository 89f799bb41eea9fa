// Passes of the agent updater's reconciler on a real file store and the real rollout records: an
// agent_update becomes a rollout that starts one node at a time (update_agent orders under fixed
// ids), a node reporting the new bundle is done and the next starts, and an abort sends the node it
// moved back to its previous version, the rollout ending ROLLED_BACK once it reports it. A node
// without the updater is listed with why and never gets an order.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { clone, create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { DeletionSchema, NodeLiveness, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { RolloutActorSchema, RolloutNodeState as S, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { WorkOrderResultSchema, WorkOrderSchema, WorkOrderStatus, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import type { CreateWorkOrderRequest } from "../../gen/skipper/v1/work_order_service_pb.js";
import { conflict } from "../base/errors.js";
import { FileStore } from "../store/file/file-store.js";
import { RolloutRecords } from "../rollouts/rollout-records.js";
import { runCommand } from "../rollouts/rollout-commands.js";
import { runAgentUpdatePass } from "./agent-update-pass.js";

const NOW = new Date("2026-11-29T16:00:00Z");
const SHA_OLD = "a".repeat(64);
const SHA_NEW = "b".repeat(64);
let dir: string | undefined;
let store: FileStore | undefined;
afterEach(async () => {
  await store?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
  store = undefined;
  dir = undefined;
});

function nodeResource(id: string, version: string, sha: string, supervised = true): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "node",
    schemaVersion: "v1",
    metadata: {},
    createdAt: timestampFromDate(NOW),
    desiredState: { kind: { case: "node", value: {} } },
    currentState: {
      kind: {
        case: "node",
        value: {
          liveness: NodeLiveness.ONLINE,
          agentVersion: version,
          capabilities: { capabilities: supervised ? ["agent.update"] : [] },
          agentUpdate: { supervised, runningSha256: supervised ? sha : "" },
          lastHeartbeatAt: timestampFromDate(NOW),
        },
      },
    },
  });
}

function versionResource(version: string, sha: string): Resource {
  return create(ResourceSchema, {
    id: version,
    resourceType: "agent_version",
    schemaVersion: "v1",
    metadata: {},
    createdAt: timestampFromDate(NOW),
    desiredState: { kind: { case: "agentVersion", value: { version, sha256: sha, size: 10n, signature: "c2ln" } } },
  });
}

async function reports(s: FileStore, id: string, version: string, sha: string): Promise<void> {
  await s.updateResource("node", id, (cur) => {
    const next = clone(ResourceSchema, cur);
    if (next.currentState?.kind.case === "node") {
      next.currentState.kind.value.agentVersion = version;
      next.currentState.kind.value.agentUpdate!.runningSha256 = sha;
    }
    return next;
  });
}

describe("agent update pass", () => {
  it("rolls a version out one node at a time, lists a node without the updater, and an abort sends the moved node back", async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-agent-update-pass-"));
    store = new FileStore(dir);
    await store.open();
    const s = store;
    for (const r of [
      nodeResource("n1", "1.0.0", SHA_OLD),
      nodeResource("n2", "1.0.0", SHA_OLD),
      nodeResource("bare", "1.0.0", SHA_OLD, false),
      versionResource("1.0.0", SHA_OLD),
      versionResource("2.0.0", SHA_NEW),
    ])
      await s.createResource(r);
    await s.createResource(
      create(ResourceSchema, {
        id: "fleet",
        resourceType: "agent_update",
        schemaVersion: "v1",
        metadata: {},
        createdAt: timestampFromDate(NOW),
        desiredState: { kind: { case: "agentUpdate", value: { version: "2.0.0", policy: { maxParallel: 1 } } } },
      }),
    );
    const rollouts = new RolloutRecords(s);
    const queued: CreateWorkOrderRequest[] = [];
    const queueOrder = async (req: CreateWorkOrderRequest, _t: unknown, id: string): Promise<WorkOrder> => {
      const have = await s.getWorkOrder(id);
      if (have) return have;
      queued.push(req);
      return s.createWorkOrder(
        create(WorkOrderSchema, {
          id,
          type: req.type,
          target: req.target,
          action: req.action,
          status: WorkOrderStatus.PENDING,
          createdAt: timestampFromDate(NOW),
        }),
      );
    };
    const pass = () =>
      runAgentUpdatePass({
        store: s,
        logger: pino({ level: "silent" }),
        now: () => NOW,
        rollouts,
        versions: { has: async () => true },
        exclusive: (fn) => fn(),
        queueOrder,
      });
    const status = async () => {
      const r = await s.getResource("agent_update", "fleet");
      return r?.currentState?.kind.case === "agentUpdate" ? r.currentState.kind.value : undefined;
    };

    await pass();
    const st = await status();
    expect(st?.nodesSelected).toBe(3);
    expect(st?.nodesCurrent).toBe(0);
    expect(st?.nodes.find((n) => n.nodeId === "bare")?.reason).toMatch(/skippy-updater/);
    const r1 = (await rollouts.get(st!.rolloutId))!;
    expect(r1.agentUpdateId).toBe("fleet");
    expect(r1.toSpecHash).toBe("agent:2.0.0@bbbbbbbbbbbb");
    expect(r1.waves.flatMap((w) => w.nodes.map((n) => [n.nodeId, n.state]))).toEqual([
      ["n1", S.DEPLOYING],
      ["n2", S.WAITING],
    ]);
    expect(queued.map((q) => [q.target?.nodeId, q.action?.kind.case === "updateAgent" && q.action.kind.value.downloadPath])).toEqual([
      ["n1", "/v1/agent-versions/2.0.0/skippy.mjs"],
    ]);
    // A second pass changes nothing and queues nothing more.
    await pass();
    expect(queued).toHaveLength(1);

    await reports(s, "n1", "2.0.0", SHA_NEW);
    await pass();
    const r2 = (await rollouts.get(st!.rolloutId))!;
    expect(r2.waves.flatMap((w) => w.nodes.map((n) => n.state))).toEqual([S.DONE, S.DEPLOYING]);
    expect(queued.map((q) => q.target?.nodeId)).toEqual(["n1", "n2"]);
    expect((await status())?.nodesCurrent).toBe(1);

    // Abort: n1 (moved) goes back to 1.0.0; n2's order is in flight and it still runs 1.0.0.
    const aborted = runCommand(r2, { kind: "abort" }, create(RolloutActorSchema, { actor: "admin", at: timestampFromDate(NOW) }));
    await rollouts.save(aborted.rollout, [aborted.event!], { requestId: "r", correlationId: "c" });
    await pass();
    const back = queued.at(-1)!;
    expect(back.target?.nodeId).toBe("n1");
    expect(back.action?.kind.case === "updateAgent" && back.action.kind.value.version).toBe("1.0.0");
    expect((await rollouts.get(st!.rolloutId))!.status).toBe(RolloutStatus.ROLLING_BACK);
    // n2's order to 2.0.0, which no node took, is cancelled: it must not run after the rollback.
    const forward = (await rollouts.get(st!.rolloutId))!.waves[0]!.nodes[1]!.workOrderId;
    expect((await s.getWorkOrder(forward))?.status).toBe(WorkOrderStatus.CANCELLED);

    await reports(s, "n1", "1.0.0", SHA_OLD);
    const rb = (await rollouts.get(st!.rolloutId))!.waves[0]!.nodes[0]!.rollbackWorkOrderId;
    await s.claimWorkOrder(rb, "n1", NOW);
    await s.finishWorkOrder(rb, "n1", create(WorkOrderResultSchema, { success: true, code: "UPDATE_REQUESTED" }), NOW);
    await pass();
    const end = (await rollouts.get(st!.rolloutId))!;
    expect(end.status).toBe(RolloutStatus.ROLLED_BACK);
    expect(end.waves[0]!.nodes.map((n) => [n.nodeId, n.state])).toEqual([
      ["n1", S.ROLLED_BACK],
      ["n2", S.ROLLED_BACK],
    ]);
  });

  it("a node that cannot take its order fails alone; a deleted update ends its rollout; nothing restarts after a rollback", async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-agent-update-pass-"));
    store = new FileStore(dir);
    await store.open();
    const s = store;
    for (const r of [
      nodeResource("n1", "1.0.0", SHA_OLD),
      nodeResource("n2", "1.0.0", SHA_OLD),
      versionResource("1.0.0", SHA_OLD),
      versionResource("2.0.0", SHA_NEW),
    ])
      await s.createResource(r);
    const update = (version: string) =>
      create(ResourceSchema, {
        id: "fleet",
        resourceType: "agent_update",
        schemaVersion: "v1",
        metadata: {},
        createdAt: timestampFromDate(NOW),
        desiredState: { kind: { case: "agentUpdate", value: { version, policy: { maxParallel: 1 } } } },
      });
    await s.createResource(update("2.0.0"));
    const rollouts = new RolloutRecords(s);
    const queued: string[] = [];
    let n2Disabled = true;
    const pass = () =>
      runAgentUpdatePass({
        store: s,
        logger: pino({ level: "silent" }),
        now: () => NOW,
        rollouts,
        versions: { has: async () => true },
        exclusive: (fn) => fn(),
        queueOrder: async (req, _t, id) => {
          if (req.target?.nodeId === "n2" && n2Disabled)
            throw conflict("node n2 is disabled and takes no new work orders", { reason: "NODE_DISABLED" });
          queued.push(id);
          return (
            (await s.getWorkOrder(id)) ??
            s.createWorkOrder(
              create(WorkOrderSchema, { id, type: req.type, target: req.target, action: req.action, status: WorkOrderStatus.PENDING }),
            )
          );
        },
      });
    const rolloutId = async () => {
      const r = await s.getResource("agent_update", "fleet");
      return r?.currentState?.kind.case === "agentUpdate" ? r.currentState.kind.value.rolloutId : "";
    };
    await pass();
    await reports(s, "n1", "2.0.0", SHA_NEW);
    await pass();
    await pass();
    const first = (await rollouts.get(await rolloutId()))!;
    expect(first.waves[0]!.nodes.map((n) => [n.nodeId, n.state])).toEqual([
      ["n1", S.DONE],
      ["n2", S.FAILED],
    ]);
    expect(first.waves[0]!.nodes[1]!.reason).toMatch(/could not be queued: CONFLICT: node n2 is disabled/);
    expect(first.status).toBe(RolloutStatus.SUCCEEDED);

    // Back to 1.0.0 as a new rollout; aborted at once: ROLLED_BACK (n1 never moved). A node that
    // joins behind 1.0.0 afterwards starts nothing: only a change of the update does.
    await s.updateResource("agent_update", "fleet", (cur) => {
      const next = clone(ResourceSchema, cur);
      next.desiredState = update("1.0.0").desiredState;
      return next;
    });
    await pass();
    const second = (await rollouts.get(await rolloutId()))!;
    expect(second.id).not.toBe(first.id);
    const aborted = runCommand(second, { kind: "abort" }, create(RolloutActorSchema, { actor: "admin", at: timestampFromDate(NOW) }));
    await rollouts.save(aborted.rollout, [aborted.event!], { requestId: "r", correlationId: "c" });
    await pass();
    await s.createResource(nodeResource("n3", "2.0.0", SHA_NEW));
    await pass();
    expect(await rolloutId()).toBe(second.id);

    // Deleted while a rollout runs: it ends SUPERSEDED and its untaken order is cancelled.
    n2Disabled = false;
    await s.updateResource("agent_update", "fleet", (cur) => {
      const next = clone(ResourceSchema, cur);
      next.desiredState = update("2.0.0").desiredState;
      return next;
    });
    await pass();
    const third = (await rollouts.get(await rolloutId()))!;
    expect(third.status).toBe(RolloutStatus.PROGRESSING);
    const open = third.waves.flatMap((w) => w.nodes).find((n) => n.workOrderId !== "")!;
    await s.updateResource("agent_update", "fleet", (cur) => {
      const next = clone(ResourceSchema, cur);
      next.deletion = create(DeletionSchema, { deletedAt: timestampFromDate(NOW) });
      return next;
    });
    await pass();
    expect((await rollouts.get(third.id))!.status).toBe(RolloutStatus.SUPERSEDED);
    expect((await s.getWorkOrder(open.workOrderId))?.status).toBe(WorkOrderStatus.CANCELLED);
  });
});
