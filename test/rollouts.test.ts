// Progressive rollouts through the controller's API (in-memory transport, real file store), with
// the test playing five nodes' agents: it completes each node's orders when it chooses, so every
// step is observed, never timed. The clock is the test's too: bakes and deadlines pass when it
// moves the clock and asks for a pass.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus, ResourceSchema, type Resource, TenantSpecSchema, type TenantStatus } from "../gen/skipper/v1/resource_pb.js";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { ExplainStepKind, ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import {
  type MaintenanceWindowSchema,
  OverdueNodeAction,
  RolloutNodeState as S,
  type RolloutPinSchema,
  type RolloutPolicySchema,
  RolloutStatus,
} from "../gen/skipper/v1/rollout_pb.js";
import { RolloutService } from "../gen/skipper/v1/rollout_service_pb.js";
import type { DeploySafetySchema } from "../gen/skipper/v1/safety_pb.js";
import { DeploymentService } from "../gen/skipper/v1/deployment_service_pb.js";
import { type WorkOrder, type WorkOrderResultSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { rpcError } from "./helpers/errors.js";
import { type InMemoryController, startInMemory } from "./helpers/in-memory-controller.js";

const TENANT = "shop";
const NODES = ["n1", "n2", "n3", "n4", "n5"];
const RING: Record<string, string> = { n1: "canary" };

let c: InMemoryController;
let clock = Date.parse("2026-11-24T10:00:00Z");
const tokens = new Map<string, string>();

const api = () => c.admin(ResourceService);
const rollouts = () => c.admin(RolloutService);
const idle = () => c.ctl.reconciler.idle();

type PolicyInit = Parameters<typeof create<typeof RolloutPolicySchema>>[1];

interface Extra {
  maintenanceWindows?: MessageInitShape<typeof MaintenanceWindowSchema>[];
  pin?: MessageInitShape<typeof RolloutPinSchema>;
}

function tenant(version: string, policy?: PolicyInit, safety?: MessageInitShape<typeof DeploySafetySchema>, extra: Extra = {}): Resource {
  return create(ResourceSchema, {
    id: TENANT,
    resourceType: "tenant",
    desiredState: {
      kind: {
        case: "tenant",
        value: create(TenantSpecSchema, {
          maintenanceWindows: extra.maintenanceWindows,
          pin: extra.pin,
          deploymentPolicy: { nodeSelector: { fleet: "shop" } },
          compose: { composeFile: `services:\n  web:\n    image: shop:${version}\n` },
          rollout: policy,
          safety,
        }),
      },
    },
  });
}

async function release(
  version: string,
  policy?: PolicyInit,
  safety?: MessageInitShape<typeof DeploySafetySchema>,
  extra: Extra = {},
): Promise<void> {
  const t = tenant(version, policy, safety, extra);
  await api().updateResource({ resourceType: "tenant", id: TENANT, desiredState: t.desiredState });
  await idle();
}

/** The node's pending order, if any. */
async function pendingOn(nodeId: string): Promise<WorkOrder | undefined> {
  return (await c.asNode(NodeService, tokens.get(nodeId)!).getNextWorkOrder({ nodeId })).workOrder;
}

/** Nodes with an order waiting for them, sorted. */
async function nodesWithOrders(): Promise<string[]> {
  const out: string[] = [];
  for (const n of NODES) if (await pendingOn(n)) out.push(n);
  return out;
}

/** Plays the node's agent for its pending order: claims it and reports `result` (success by default). */
async function finish(nodeId: string, result?: (o: WorkOrder) => MessageInitShape<typeof WorkOrderResultSchema>): Promise<WorkOrder> {
  const o = await pendingOn(nodeId);
  if (!o) throw new Error(`node ${nodeId} has no pending order`);
  const orders = c.asNode(WorkOrderService, tokens.get(nodeId)!);
  const claimed = (await orders.claimWorkOrder({ id: o.id })).workOrder!;
  const ok = { success: true, code: o.type === WorkOrderType.ROLLBACK ? "ROLLBACK_OK" : "APPLY_OK", message: "ok" };
  await orders.reportWorkOrderResult({ id: o.id, result: { ...ok, ...result?.(o) }, fencingToken: claimed.claim!.fencingToken });
  await idle();
  return o;
}

async function latestRollout() {
  const list = (await rollouts().listRollouts({ tenantId: TENANT })).rollouts;
  return list[0]!;
}

async function tenantStatus(): Promise<{ resource: Resource; status: TenantStatus }> {
  const resource = (await api().getResource({ resourceType: "tenant", id: TENANT })).resource!;
  if (resource.currentState?.kind.case !== "tenant") throw new Error("no tenant status");
  return { resource, status: resource.currentState.kind.value };
}

const target = async (nodeId: string) => (await tenantStatus()).status.targets.find((t) => t.nodeId === nodeId)!;
const nodeState = (r: Awaited<ReturnType<typeof latestRollout>>, nodeId: string) =>
  r.waves.flatMap((w) => w.nodes).find((n) => n.nodeId === nodeId)?.state;
const rolloutEvents = async () =>
  (await c.events({ tenantId: TENANT })).filter((e) => e.type.startsWith("rollout_")).map((e) => e.type + (e.nodeId ? `:${e.nodeId}` : ""));

beforeEach(async () => {
  clock = Date.parse("2026-11-24T10:00:00Z");
  c = await startInMemory({ now: () => new Date(clock) });
  for (const nodeId of NODES) {
    const reg = await c.admin(NodeService).registerNode({ nodeId, labels: { fleet: "shop", ring: RING[nodeId] ?? "main" } });
    tokens.set(nodeId, reg.token);
    await c.asNode(NodeService, reg.token).heartbeat({ nodeId, agentVersion: "test", heartbeatIntervalMs: 60_000n });
  }
  // Version 1 everywhere: a first deploy is not held back (nothing runs yet to break).
  await api().createResource({ resourceType: "tenant", resource: tenant("v1") });
  await idle();
  expect(await nodesWithOrders()).toEqual(NODES);
  for (const n of NODES) await finish(n);
  expect((await rollouts().listRollouts({ tenantId: TENANT })).rollouts).toEqual([]);
});
afterEach(async () => {
  await c?.close();
});

describe("a rollout", () => {
  it("deploys wave by wave, max_parallel at a time, waits for a promote, and succeeds", async () => {
    const policy = {
      waves: [
        { name: "canary", nodeSelector: { ring: "canary" } },
        { name: "half", size: { case: "percent" as const, value: 50 }, requirePromote: true },
      ],
      maxParallel: 1,
    };
    await release("v2", policy);
    const started = await latestRollout();
    expect(started.status).toBe(RolloutStatus.PROGRESSING);
    expect(started.waves.map((w) => [w.name, w.nodes.map((n) => n.nodeId)])).toEqual([
      ["canary", ["n1"]],
      ["half", ["n2", "n3"]],
      ["rest", ["n4", "n5"]],
    ]);
    expect(started.fromSpecHash).not.toBe(started.toSpecHash);
    // Only the canary has its order; the others are held, and say why.
    expect(await nodesWithOrders()).toEqual(["n1"]);
    expect((await target("n4")).convergence?.status).toBe(ConvergenceStatus.ROLLOUT_WAITING);
    expect((await target("n4")).convergence?.message).toContain('waiting for wave "rest" (3 of 3)');

    await finish("n1");
    let r = await latestRollout();
    expect(nodeState(r, "n1")).toBe(S.DONE);
    expect(await nodesWithOrders()).toEqual([]);
    expect((await target("n2")).convergence?.message).toContain('waits for a promote of wave "half"');
    // ExplainResource names the rollout, its waves, and each waiting node's reason.
    const why = await api().explainResource({ resourceType: "tenant", id: TENANT });
    const steps = why.steps.filter((s) => s.kind === ExplainStepKind.ROLLOUT);
    expect(steps[0]!.summary).toContain("canary 1/1 done; half 0/2 done, waits for a promote; rest 0/2 done");
    expect(steps[0]!.code).toBe("PROGRESSING");
    expect(steps.find((s) => s.nodeId === "n2")!.summary).toContain("node n2 is waiting: rollout");
    expect(why.convergence?.status).toBe(ConvergenceStatus.ROLLOUT_WAITING);

    r = (await rollouts().promoteRollout({ id: r.id, reason: "canary looks fine" })).rollout!;
    expect(r.waves[1]!.promoted?.reason).toBe("canary looks fine");
    // A retried promote of the same wave changes nothing.
    expect((await rollouts().promoteRollout({ id: r.id, wave: "half" })).rollout!.waves[1]!.promoted?.reason).toBe("canary looks fine");
    await idle();
    const order: string[] = ["n1"];
    for (;;) {
      const busy = await nodesWithOrders();
      if (busy.length === 0) break;
      expect(busy.length).toBe(1); // max_parallel
      order.push(busy[0]!);
      await finish(busy[0]!);
    }
    expect(order).toEqual(NODES);
    r = await latestRollout();
    expect(r.status).toBe(RolloutStatus.SUCCEEDED);
    expect(r.waves.flatMap((w) => w.nodes).every((n) => n.state === S.DONE && n.workOrderId !== "")).toBe(true);
    expect((await tenantStatus()).resource.convergence?.status).toBe(ConvergenceStatus.CONVERGED);
    const events = await rolloutEvents();
    expect(events.filter((e) => !e.startsWith("rollout_node_"))).toEqual([
      "rollout_started",
      "rollout_wave_started",
      "rollout_wave_completed",
      "rollout_promoted",
      "rollout_wave_started",
      "rollout_wave_completed",
      "rollout_wave_started",
      "rollout_wave_completed",
      "rollout_succeeded",
    ]);
    expect(events.filter((e) => e.startsWith("rollout_node_started"))).toEqual(NODES.map((n) => `rollout_node_started:${n}`));
  });

  it("a canary that fails its health gate pauses the rollout with the rest of the fleet untouched; resume accepts it", async () => {
    await release("v2", {
      waves: [{ name: "canary", nodeSelector: { ring: "canary" } }],
      failureBudget: { limit: { case: "count", value: 0 } },
    });
    const before = await target("n2");
    // The node's health gate fails and its agent restores the previous spec.
    await finish("n1", (o) => ({
      success: false,
      code: "ROLLED_BACK",
      message: "health gate failed",
      details: { rollback: { failedSpecHash: o.desiredState!.specHash, restoredSpecHash: before.appliedHash } },
    }));
    const r = await latestRollout();
    expect(r.status).toBe(RolloutStatus.PAUSED);
    expect(r.message).toContain("failure budget exhausted: 1 node(s) failed, 0 allowed");
    expect(r.paused?.actor).toBe("controller");
    expect(nodeState(r, "n1")).toBe(S.FAILED);
    expect(await nodesWithOrders()).toEqual([]);
    for (const n of ["n2", "n3", "n4", "n5"]) {
      expect(nodeState(r, n)).toBe(S.WAITING);
      expect((await target(n)).appliedHash).toBe(before.appliedHash);
      expect((await target(n)).convergence?.message).toContain("is paused by controller (failure budget exhausted");
    }
    expect(await rolloutEvents()).toContain("rollout_budget_exhausted");
    // Pausing a paused rollout is a harmless retry; resuming accepts the failure and goes on.
    expect((await rollouts().pauseRollout({ id: r.id })).rollout!.status).toBe(RolloutStatus.PAUSED);
    await rollouts().resumeRollout({ id: r.id, reason: "known issue on n1" });
    await idle();
    expect(await nodesWithOrders()).toEqual(["n2", "n3", "n4", "n5"]);
  });

  it("abort returns every updated node to its previous spec with rollback orders; the rest keep it", async () => {
    await release("v2", {
      waves: [
        { name: "canary", nodeSelector: { ring: "canary" } },
        { name: "next", size: { case: "count", value: 1 }, requirePromote: true },
      ],
    });
    const previous = (await target("n1")).appliedHash;
    await finish("n1");
    const r = await latestRollout();
    expect((await target("n1")).appliedHash).toBe(r.toSpecHash);
    const aborted = (await rollouts().abortRollout({ id: r.id, reason: "bad release" })).rollout!;
    expect(aborted.status).toBe(RolloutStatus.ROLLING_BACK);
    expect(aborted.aborted?.reason).toBe("bad release");
    await idle();
    expect(await nodesWithOrders()).toEqual(["n1"]);
    const back = await finish("n1");
    expect(back.type).toBe(WorkOrderType.ROLLBACK);
    expect(back.desiredState?.specHash).toBe(previous);
    const done = await latestRollout();
    expect(done.status).toBe(RolloutStatus.ROLLED_BACK);
    expect(nodeState(done, "n1")).toBe(S.ROLLED_BACK);
    for (const n of NODES) expect((await target(n)).appliedHash).toBe(previous);
    expect((await target("n3")).convergence?.message).toContain("ended rolled_back before reaching this node");
    expect(await nodesWithOrders()).toEqual([]);
    // Resuming an ended rollout is refused and changes nothing.
    const err = await rpcError(rollouts().resumeRollout({ id: r.id }));
    expect(err.code).toBe("CONFLICT");
    expect(err.details.status).toBe("ROLLED_BACK");
    const events = await rolloutEvents();
    expect(events).toContain("rollout_aborted");
    expect(events).toContain("rollout_node_rolled_back:n1");
    expect(events.at(-1)).toBe("rollout_rolled_back");
    // A new release rolls out again, from the fleet as it is.
    await release("v3", { waves: [{ name: "canary", nodeSelector: { ring: "canary" } }] });
    const next = await latestRollout();
    expect(next.id).not.toBe(r.id);
    expect(next.fromSpecHash).toBe(previous);
    expect(await nodesWithOrders()).toEqual(["n1"]);
  });

  it("a node counts as done only after min_healthy_time; a silent node is skipped at its deadline and converges when it returns", async () => {
    const policy = {
      waves: [{ name: "first", size: { case: "count" as const, value: 2 } }],
      minHealthyTime: { seconds: 30n },
      progressDeadline: { seconds: 120n },
      onOverdue: OverdueNodeAction.SKIP,
    };
    await release("v2", policy);
    expect(await nodesWithOrders()).toEqual(["n1", "n2"]);
    await finish("n1");
    let r = await latestRollout();
    expect(nodeState(r, "n1")).toBe(S.BAKING);
    // n2's agent is silent. 30 s later n1 is done; the next wave still waits for n2.
    clock += 30_000;
    await c.ctl.reconciler.reconcileTenant(TENANT);
    r = await latestRollout();
    expect(nodeState(r, "n1")).toBe(S.DONE);
    expect(await nodesWithOrders()).toEqual(["n2"]);
    // Past n2's deadline it is skipped and the next wave starts.
    clock += 91_000;
    await c.ctl.reconciler.reconcileTenant(TENANT);
    await idle();
    r = await latestRollout();
    expect(nodeState(r, "n2")).toBe(S.SKIPPED_OFFLINE);
    expect(r.waves.flatMap((w) => w.nodes).find((n) => n.nodeId === "n2")!.reason).toContain("progress_deadline");
    expect(await nodesWithOrders()).toEqual(["n2", "n3", "n4", "n5"]);
    // n2's agent comes back and runs the rollout's spec.
    await finish("n2");
    expect((await target("n2")).appliedHash).toBe(r.toSpecHash);
    expect((await target("n2")).convergence?.status).toBe(ConvergenceStatus.CONVERGED);
  });

  it("a node the rollout holds on its spec still has that spec's drift repaired, and is not held back by the repair", async () => {
    await release("v2", {
      waves: [
        { name: "canary", nodeSelector: { ring: "canary" } },
        { name: "next", requirePromote: true },
      ],
    });
    const previous = (await target("n3")).appliedHash;
    // n3's agent reports its web service exited: drift from the spec it is held on.
    clock += 1_000;
    await c.asNode(NodeService, tokens.get("n3")!).heartbeat({
      nodeId: "n3",
      agentVersion: "test",
      heartbeatIntervalMs: 60_000n,
      projectsReported: true,
      projects: [{ projectName: TENANT, tenantId: TENANT, specHash: previous, services: [{ service: "web", state: "exited" }] }],
    });
    await idle();
    const repair = await pendingOn("n3");
    expect(repair?.type).toBe(WorkOrderType.ROLLBACK);
    expect(repair?.desiredState?.specHash).toBe(previous);
    expect(repair?.metadata?.annotations.reason).toBe("drift");
    await finish("n3");
    expect((await target("n3")).appliedHash).toBe(previous);
    expect((await target("n3")).convergence?.status).toBe(ConvergenceStatus.ROLLOUT_WAITING);
    // When its wave comes, it gets the new spec like the others.
    await finish("n1");
    await rollouts().promoteRollout({ id: (await latestRollout()).id });
    await idle();
    expect(await nodesWithOrders()).toEqual(["n2", "n3", "n4", "n5"]);
  });

  it("a change during a rollout supersedes it; the new one starts from the mixed fleet", async () => {
    const policy: Parameters<typeof create<typeof RolloutPolicySchema>>[1] = {
      waves: [{ size: { case: "count", value: 1 } }],
      maxParallel: 1,
    };
    await release("v2", policy);
    await finish("n1");
    const first = await latestRollout();
    await release("v3", policy);
    const list = (await rollouts().listRollouts({ tenantId: TENANT })).rollouts;
    expect(list.map((x) => x.status)).toEqual([RolloutStatus.PROGRESSING, RolloutStatus.SUPERSEDED]);
    expect(list[1]!.id).toBe(first.id);
    expect(list[1]!.supersededBy).toBe(list[0]!.id);
    // n1 runs v2, the others v1: every node is behind v3, and each keeps what it runs until its turn.
    const mixed = list[0]!.waves.flatMap((w) => w.nodes);
    expect(mixed.find((n) => n.nodeId === "n1")!.fromSpecHash).toBe(first.toSpecHash);
    expect(mixed.find((n) => n.nodeId === "n2")!.fromSpecHash).toBe(first.fromSpecHash);
    const byStatus = (await rollouts().listRollouts({ tenantId: TENANT, statuses: [RolloutStatus.SUPERSEDED] })).rollouts;
    expect(byStatus.map((x) => x.id)).toEqual([first.id]);
  });

  it("rollouts are records: written by the controller only", async () => {
    await release("v2", { waves: [{ size: { case: "count", value: 1 } }] });
    const r = await latestRollout();
    const stored = (await api().getResource({ resourceType: "rollout", id: r.id })).resource!;
    expect(stored.currentState?.kind.case === "rollout" && stored.currentState.kind.value.id).toBe(r.id);
    const err = await rpcError(api().deleteResource({ resourceType: "rollout", id: r.id }));
    expect(err.code).toBe("INVALID_REQUEST");
    expect((await rpcError(rollouts().getRollout({ id: "no-such" }))).code).toBe("RESOURCE_NOT_FOUND");
    expect((await rpcError(rollouts().getRollout({ id: "../x" }))).code).toBe("INVALID_REQUEST");
    const unknownWave = await rpcError(rollouts().promoteRollout({ id: r.id, wave: "nope" }));
    expect(unknownWave.code).toBe("INVALID_REQUEST");
  });
});

describe("quarantine", () => {
  it("a spec that failed quarantine_after times on a node returns it to its last good spec, without a health gate, and stops retrying until Apply", async () => {
    const previous = (await target("n1")).appliedHash;
    await release("v2", undefined, { quarantineAfter: 2 });
    const failing = (o: WorkOrder) =>
      o.type === WorkOrderType.ROLLBACK ? {} : { success: false, code: "COMPOSE_FAILED", message: "pull failed" };
    await finish("n1", failing);
    for (const n of ["n2", "n3", "n4", "n5"]) await finish(n);
    expect((await target("n1")).convergence?.status).toBe(ConvergenceStatus.RETRY_BACKOFF);
    // The retry is due after its backoff; it fails as well.
    clock += 3_000;
    await c.ctl.reconciler.reconcileTenant(TENANT);
    await finish("n1", failing);
    const back = await pendingOn("n1");
    expect(back?.type).toBe(WorkOrderType.ROLLBACK);
    expect(back?.desiredState?.specHash).toBe(previous);
    expect(back?.action?.kind.case === "rollback" && back.action.kind.value.quarantineReason).toContain("failed 2 time(s) on node n1");
    await finish("n1");
    const rec = await target("n1");
    expect(rec.appliedHash).toBe(previous);
    expect(rec.convergence?.status).toBe(ConvergenceStatus.ROLLED_BACK);
    expect(rec.convergence?.message).toContain("is quarantined (spec");
    // No more attempts, however long we wait.
    clock += 600_000;
    await c.ctl.reconciler.reconcileTenant(TENANT);
    expect(await pendingOn("n1")).toBeUndefined();
    // The rollout counts the node as failed; the others are done.
    const r = await latestRollout();
    expect(nodeState(r, "n1")).toBe(S.FAILED);
    expect(r.status).toBe(RolloutStatus.SUCCEEDED);
    // Apply releases it: the spec is tried again.
    await c.admin(DeploymentService).apply({ tenantId: TENANT, nodeId: "n1" });
    expect((await pendingOn("n1"))?.type).toBe(WorkOrderType.DEPLOY_SERVICE);
  });
});

describe("what holds a rollout back", () => {
  const held = async (nodeId: string) => (await target(nodeId)).convergence;

  it("outside the maintenance windows no node starts; when one opens, they do", async () => {
    const windows = [{ days: ["tue", "wed"], start: "02:00", end: "03:00", timeZone: "Europe/Berlin" }];
    await release("v2", undefined, undefined, { maintenanceWindows: windows });
    expect(await nodesWithOrders()).toEqual([]);
    // 10:00 UTC on Tuesday 2026-11-24: the next opening is Wednesday 02:00 in Berlin, 01:00 UTC.
    expect((await held("n3"))?.status).toBe(ConvergenceStatus.ROLLOUT_WAITING);
    expect((await held("n3"))?.message).toContain("outside the tenant's maintenance windows; the next opens at 2026-11-25T01:00:00.000Z");
    clock = Date.parse("2026-11-25T01:00:30Z");
    await c.ctl.reconciler.reconcileTenant(TENANT);
    expect(await nodesWithOrders()).toEqual(NODES);
  });

  it("a freeze of the tenant starts no wave until it ends; a freeze of nodes holds only them", async () => {
    const freeze = (id: string, spec: Record<string, unknown>) =>
      api().createResource({
        resourceType: "freeze",
        resource: create(ResourceSchema, {
          id,
          resourceType: "freeze",
          desiredState: { kind: { case: "freeze", value: { endsAt: timestampFromMs(clock + 3_600_000), ...spec } } },
        }),
      });
    const bad = await rpcError(
      api().createResource({
        resourceType: "freeze",
        resource: create(ResourceSchema, {
          id: "f0",
          resourceType: "freeze",
          desiredState: { kind: { case: "freeze", value: { reason: "x" } } },
        }),
      }),
    );
    expect(bad.details.field).toBe("desired_state.freeze.ends_at");
    await freeze("f-shop", { tenantId: TENANT, reason: "quarter close" });
    await freeze("f-canary", { nodeSelector: { ring: "canary" }, reason: "canary host maintenance" });
    await release("v2");
    expect(await nodesWithOrders()).toEqual([]);
    expect((await held("n2"))?.message).toContain("frozen by freeze f-shop until");
    expect((await held("n2"))?.message).toContain("(quarter close)");
    await api().deleteResource({ resourceType: "freeze", id: "f-shop" });
    await idle();
    // The wave starts without the frozen canary node.
    expect(await nodesWithOrders()).toEqual(["n2", "n3", "n4", "n5"]);
    expect((await held("n1"))?.message).toContain("frozen by freeze f-canary");
    for (const n of ["n2", "n3", "n4", "n5"]) await finish(n);
    expect((await latestRollout()).status).toBe(RolloutStatus.PROGRESSING);
    // The freeze ends by itself.
    clock += 3_600_001;
    await c.ctl.reconciler.reconcileTenant(TENANT);
    expect(await nodesWithOrders()).toEqual(["n1"]);
  });

  it("a pinned tenant keeps what runs while its desired state changes; unpinning rolls out the latest", async () => {
    await release("v2", undefined, undefined, { pin: { reason: "black friday" } });
    await release("v3", undefined, undefined, { pin: { reason: "black friday" } });
    expect(await nodesWithOrders()).toEqual([]);
    expect((await held("n1"))?.message).toContain("the tenant is pinned (black friday)");
    await release("v3");
    expect(await nodesWithOrders()).toEqual(NODES);
    const o = await pendingOn("n1");
    expect(o?.desiredState?.composeProject?.composeFile).toContain("shop:v3");
  });

  it("approval pins the plan: nothing deploys before it, a stale plan is refused, the right one releases it", async () => {
    const policy = { requireApproval: true };
    await release("v2", policy);
    const pending = await latestRollout();
    expect(pending.status).toBe(RolloutStatus.PENDING_APPROVAL);
    expect(await nodesWithOrders()).toEqual([]);
    expect((await held("n1"))?.message).toContain("waits for approval");
    const plan = pending.plan!;
    expect(plan.nodes.map((n) => n.nodeId)).toEqual(NODES);
    expect(plan.nodes[0]!.composeDiff).toContain("-    image: shop:v1");
    expect(plan.nodes[0]!.composeDiff).toContain("+    image: shop:v2");
    // The dry run shows the same plan.
    expect((await rollouts().planRollout({ tenantId: TENANT })).plan?.planHash).toBe(plan.planHash);
    const wrong = await rpcError(rollouts().approveRollout({ id: pending.id, planHash: "0".repeat(64) }));
    expect(wrong.code).toBe("CONFLICT");
    expect(wrong.details.plan_hash).toBe(plan.planHash);
    // The desired state changes: the plan approved above is stale, and the new one is shown.
    await release("v3", policy);
    const stale = await rpcError(rollouts().approveRollout({ id: pending.id, planHash: plan.planHash }));
    expect(stale.code).toBe("CONFLICT");
    expect(stale.details.status).toBe("SUPERSEDED");
    const next = await latestRollout();
    const fresh = (await rollouts().planRollout({ tenantId: TENANT })).plan!;
    expect(fresh.planHash).toBe(next.plan?.planHash);
    expect(fresh.planHash).not.toBe(plan.planHash);
    expect(await nodesWithOrders()).toEqual([]);
    const approved = (await rollouts().approveRollout({ id: next.id, planHash: fresh.planHash, reason: "reviewed" })).rollout!;
    expect(approved.status).toBe(RolloutStatus.PROGRESSING);
    expect(approved.approved?.reason).toBe("reviewed");
    await idle();
    expect(await nodesWithOrders()).toEqual(NODES);
    expect(await rolloutEvents()).toContain("rollout_approved");
  });
});

describe("the answer to an update", () => {
  it("says PENDING, not the verdict on the old desired state; the pass then gives the new one", async () => {
    expect((await tenantStatus()).resource.convergence?.status).toBe(ConvergenceStatus.CONVERGED);
    const t = tenant("v2");
    const res = await api().updateResource({ resourceType: "tenant", id: TENANT, desiredState: t.desiredState });
    expect(res.resource?.convergence?.status).toBe(ConvergenceStatus.PENDING);
    await idle();
    expect((await tenantStatus()).resource.convergence?.status).toBe(ConvergenceStatus.ORDER_IN_FLIGHT);
  });
});

describe("a cascading delete", () => {
  it("removes the project with one order, without first redeploying it without its services", async () => {
    await api().createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, {
        id: "cafe",
        resourceType: "tenant",
        desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { targetNodeId: "n1" } } } },
      }),
    });
    for (const id of ["cafe-web", "cafe-worker"]) {
      await api().createResource({
        resourceType: "service",
        resource: create(ResourceSchema, {
          id,
          resourceType: "service",
          desiredState: { kind: { case: "service", value: { tenantId: "cafe", image: "busybox:stable" } } },
        }),
      });
    }
    await idle();
    while (await pendingOn("n1")) await finish("n1");
    const before = new Set((await c.admin(WorkOrderService).listWorkOrders({ nodeId: "n1" })).workOrders.map((o) => o.id));
    const res = await api().deleteResource({ resourceType: "tenant", id: "cafe", cascade: true });
    expect(res.cascaded.sort()).toEqual(["service/cafe-web", "service/cafe-worker"]);
    await idle();
    const after = (await c.admin(WorkOrderService).listWorkOrders({ nodeId: "n1" })).workOrders.filter((o) => !before.has(o.id));
    expect(after.map((o) => WorkOrderType[o.type])).toEqual(["REMOVE_SERVICE"]);
  });
});
