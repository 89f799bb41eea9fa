// One step of a rollout (rollouts/rollout-step.ts): seed a record and observations, run one step,
// assert the exact actions.
import { type MessageInitShape, create } from "@bufbuild/protobuf";
import { type Timestamp, durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  OverdueNodeAction,
  RolloutFailureAction,
  RolloutNodeState as S,
  type Rollout,
  RolloutSchema,
  RolloutStatus,
} from "../../gen/skipper/v1/rollout_pb.js";
import { type NodeObservation, type RolloutAction, allowedFailures, rolloutStep } from "./rollout-step.js";
import { planWaves } from "./wave-plan.js";

const NOW = 1_000_000;
const SEC = 1000;
type PolicyInit = MessageInitShape<typeof RolloutSchema>["policy"];
type NodeInit = { id: string; state?: S; startedAt?: number; healthySince?: number; finishedAt?: number };
type WaveInit = { nodes: (string | NodeInit)[]; requirePromote?: boolean; promoted?: boolean; started?: boolean; completed?: boolean };

/** A rollout record: waves of nodes (a bare id is WAITING), PROGRESSING unless told. */
function rollout(
  waves: WaveInit[],
  policy: PolicyInit = {},
  extra: { status?: RolloutStatus; resumed?: { actor: string; at: Timestamp } } = {},
): Rollout {
  const init: MessageInitShape<typeof RolloutSchema> = {
    id: "r1",
    tenantId: "t1",
    status: RolloutStatus.PROGRESSING,
    policy,
    ...extra,
    waves: waves.map((w, i) => ({
      name: `wave-${i + 1}`,
      requirePromote: w.requirePromote ?? false,
      promoted: w.promoted ? { actor: "admin", at: timestampFromMs(NOW - SEC) } : undefined,
      startedAt: w.started ? timestampFromMs(NOW - 60 * SEC) : undefined,
      completedAt: w.completed ? timestampFromMs(NOW - 30 * SEC) : undefined,
      nodes: w.nodes.map((n) => {
        const x = typeof n === "string" ? { id: n } : n;
        return {
          nodeId: x.id,
          state: x.state ?? S.WAITING,
          startedAt: x.startedAt === undefined ? undefined : timestampFromMs(x.startedAt),
          healthySince: x.healthySince === undefined ? undefined : timestampFromMs(x.healthySince),
          finishedAt: x.finishedAt === undefined ? undefined : timestampFromMs(x.finishedAt),
        };
      }),
    })),
  };
  return create(RolloutSchema, init);
}
const seen = (entries: Record<string, NodeObservation>) => new Map(Object.entries(entries));
const started = (nodeId: string, wave = 0): RolloutAction => ({ type: "node-started", nodeId, wave });
const deploying = (id: string, since = NOW - 10 * SEC): NodeInit => ({ id, state: S.DEPLOYING, startedAt: since });
const done = (id: string): NodeInit => ({ id, state: S.DONE, startedAt: NOW - 60 * SEC, finishedAt: NOW - 40 * SEC });
const failed = (id: string, at = NOW - 40 * SEC): NodeInit => ({ id, state: S.FAILED, startedAt: NOW - 60 * SEC, finishedAt: at });

describe("rolloutStep: starting nodes", () => {
  it("no policy: one wave, every node started at once (today's behaviour)", () => {
    const plan = planWaves(
      undefined,
      ["a", "b", "c"].map((id) => ({ id, labels: {} })),
    );
    const r = rollout(
      plan.map((w) => ({ nodes: w.nodeIds })),
      undefined,
    );
    expect(rolloutStep(r, seen({}), NOW)).toEqual({
      actions: [{ type: "wave-started", wave: 0 }, started("a"), started("b"), started("c")],
      blocker: { kind: "nodes", wave: 0 },
      recheckAt: undefined,
    });
  });

  it("starts no more than max_parallel nodes, counting those deploying or baking", () => {
    const r = rollout(
      [{ nodes: [deploying("a"), { id: "b", state: S.BAKING, startedAt: NOW - SEC, healthySince: NOW }, "c", "d", "e"], started: true }],
      { maxParallel: 3, minHealthyTime: durationFromMs(30 * SEC) },
    );
    const step = rolloutStep(r, seen({ b: { converged: true } }), NOW);
    expect(step.actions).toEqual([started("c")]);
    expect(step.blocker).toEqual({ kind: "max-parallel", wave: 0 });
  });

  it("never has more than max_parallel nodes under way, whatever the fleet (property)", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.array(fc.constantFrom(S.WAITING, S.DEPLOYING, S.DONE, S.FAILED), { maxLength: 12 }),
        (max, states) => {
          const nodes = states.map((state, i) => ({ id: `n${i}`, state, startedAt: NOW - SEC, finishedAt: NOW - SEC }));
          const before = states.filter((s) => s === S.DEPLOYING).length;
          const step = rolloutStep(rollout([{ nodes, started: true }], { maxParallel: max }), seen({}), NOW);
          const starts = step.actions.filter((a) => a.type === "node-started").length;
          expect(before + starts).toBeLessThanOrEqual(Math.max(max, before));
          if (before < max) expect(starts).toBe(Math.min(max - before, states.filter((s) => s === S.WAITING).length));
        },
      ),
    );
  });

  it("starts the next wave only when every node of the one before is done, failed or skipped", () => {
    const waves = (first: NodeInit[]) => rollout([{ nodes: first, started: true }, { nodes: ["c", "d"] }]);
    expect(rolloutStep(waves([done("a"), deploying("b")]), seen({}), NOW).actions).toEqual([]);
    expect(rolloutStep(waves([done("a"), { id: "b", state: S.SKIPPED_OFFLINE }]), seen({}), NOW).actions).toEqual([
      { type: "wave-completed", wave: 0 },
      { type: "wave-started", wave: 1 },
      started("c", 1),
      started("d", 1),
    ]);
  });

  it("a wave with a promote gate waits for the promote, then starts", () => {
    const gated = (promoted: boolean) =>
      rollout([
        { nodes: [done("a")], started: true, completed: true },
        { nodes: ["b"], requirePromote: true, promoted },
      ]);
    expect(rolloutStep(gated(false), seen({}), NOW)).toEqual({ actions: [], blocker: { kind: "promote", wave: 1 }, recheckAt: undefined });
    expect(rolloutStep(gated(true), seen({}), NOW).actions).toEqual([{ type: "wave-started", wave: 1 }, started("b", 1)]);
  });

  it("a paused rollout starts nothing but still follows the nodes under way", () => {
    const r = rollout([{ nodes: [deploying("a"), "b"], started: true }, { nodes: ["c"] }], {}, { status: RolloutStatus.PAUSED });
    expect(rolloutStep(r, seen({ a: { converged: true } }), NOW)).toEqual({
      actions: [{ type: "node-done", nodeId: "a" }],
      blocker: { kind: "paused" },
      recheckAt: undefined,
    });
  });

  it("an ended or pending-approval rollout does nothing", () => {
    for (const status of [RolloutStatus.PENDING_APPROVAL, RolloutStatus.SUCCEEDED, RolloutStatus.ROLLED_BACK, RolloutStatus.SUPERSEDED]) {
      expect(rolloutStep(rollout([{ nodes: ["a"] }], {}, { status }), seen({}), NOW)).toEqual({ actions: [] });
    }
  });

  it("succeeds when every wave is complete, and says so once", () => {
    const r = rollout([
      { nodes: [done("a")], started: true, completed: true },
      { nodes: [deploying("b")], started: true },
    ]);
    expect(rolloutStep(r, seen({ b: { converged: true } }), NOW).actions).toEqual([
      { type: "node-done", nodeId: "b" },
      { type: "wave-completed", wave: 1 },
      { type: "succeeded" },
    ]);
  });
});

describe("rolloutStep: bake time and deadline", () => {
  const bake = { minHealthyTime: durationFromMs(30 * SEC) };

  it("a converged node bakes for min_healthy_time before it is done", () => {
    const r = (node: NodeInit) => rollout([{ nodes: [node], started: true }], bake);
    const ok = seen({ a: { converged: true } });
    expect(rolloutStep(r(deploying("a")), ok, NOW)).toMatchObject({
      actions: [{ type: "node-baking", nodeId: "a" }],
      recheckAt: NOW + 30 * SEC,
    });
    const baking = (since: number): NodeInit => ({ id: "a", state: S.BAKING, startedAt: NOW - 60 * SEC, healthySince: since });
    expect(rolloutStep(r(baking(NOW - 29 * SEC)), ok, NOW)).toMatchObject({ actions: [], recheckAt: NOW + SEC });
    expect(rolloutStep(r(baking(NOW - 30 * SEC)), ok, NOW).actions[0]).toEqual({ type: "node-done", nodeId: "a" });
  });

  it("a baking node that stops being converged and healthy deploys (and bakes) again", () => {
    const r = rollout(
      [{ nodes: [{ id: "a", state: S.BAKING, startedAt: NOW - 60 * SEC, healthySince: NOW - 20 * SEC }], started: true }],
      bake,
    );
    expect(rolloutStep(r, seen({ a: { converged: false } }), NOW).actions).toEqual([{ type: "node-bake-broken", nodeId: "a" }]);
  });

  it("a node failing is failed with its reason", () => {
    const r = rollout([{ nodes: [deploying("a"), "b"], started: true }], { maxParallel: 1 });
    expect(rolloutStep(r, seen({ a: { converged: false, failure: "HEALTH_GATE_FAILED" } }), NOW).actions).toEqual([
      { type: "node-failed", nodeId: "a", reason: "HEALTH_GATE_FAILED" },
      started("b"),
    ]);
  });

  it("a node past progress_deadline counts as failed, against the budget", () => {
    const policy = { progressDeadline: durationFromMs(60 * SEC), failureBudget: { limit: { case: "count" as const, value: 0 } } };
    const r = rollout([{ nodes: [deploying("a", NOW - 60 * SEC), "b"], started: true }], policy);
    expect(rolloutStep(r, seen({ a: { converged: false, offline: true } }), NOW)).toEqual({
      actions: [
        { type: "node-failed", nodeId: "a", reason: "not done within progress_deadline (node offline)" },
        { type: "budget-exhausted", failed: 1, allowed: 0, outcome: "pause" },
      ],
      blocker: { kind: "budget" },
      recheckAt: undefined,
    });
  });

  it("a node past progress_deadline is skipped when the policy says so, and its wave goes on", () => {
    const policy = {
      progressDeadline: durationFromMs(60 * SEC),
      onOverdue: OverdueNodeAction.SKIP,
      failureBudget: { limit: { case: "count" as const, value: 0 } },
    };
    const r = rollout([{ nodes: [deploying("a", NOW - 61 * SEC)], started: true }, { nodes: ["b"] }], policy);
    expect(rolloutStep(r, seen({}), NOW).actions).toEqual([
      { type: "node-skipped", nodeId: "a", reason: "not done within progress_deadline" },
      { type: "wave-completed", wave: 0 },
      { type: "wave-started", wave: 1 },
      started("b", 1),
    ]);
  });

  it("asks to be looked at again when the earliest deadline passes", () => {
    const r = rollout([{ nodes: [deploying("a", NOW - 50 * SEC), "b"], started: true }], { progressDeadline: durationFromMs(60 * SEC) });
    expect(rolloutStep(r, seen({}), NOW)).toMatchObject({ actions: [started("b")], recheckAt: NOW + 10 * SEC });
  });
});

describe("rolloutStep: failure budget", () => {
  it("within the budget the rollout goes on", () => {
    const r = rollout([{ nodes: [failed("a"), "b"], started: true }], { failureBudget: { limit: { case: "count", value: 1 } } });
    expect(rolloutStep(r, seen({}), NOW).actions).toEqual([started("b")]);
  });

  it("exhausted, it pauses (the default) or rolls back, as on_failure says, and starts nothing", () => {
    const budget = { limit: { case: "percent" as const, value: 25 } };
    const nodes = [failed("a"), deploying("b"), "c", "d"];
    const pause = rolloutStep(
      rollout([{ nodes, started: true }], { failureBudget: budget }),
      seen({ b: { converged: false, failure: "x" } }),
      NOW,
    );
    expect(pause.actions).toEqual([
      { type: "node-failed", nodeId: "b", reason: "x" },
      { type: "budget-exhausted", failed: 2, allowed: 1, outcome: "pause" },
    ]);
    const rollback = rolloutStep(
      rollout([{ nodes, started: true }], { failureBudget: budget, onFailure: RolloutFailureAction.ROLLBACK }),
      seen({ b: { converged: false, failure: "x" } }),
      NOW,
    );
    expect(rollback.actions.at(-1)).toEqual({ type: "budget-exhausted", failed: 2, allowed: 1, outcome: "rollback" });
  });

  it("a resume accepts the failures before it: only later ones count", () => {
    const policy = { failureBudget: { limit: { case: "count" as const, value: 0 } } };
    const resumed = { resumed: { actor: "admin", at: timestampFromMs(NOW - 10 * SEC) } };
    const r = rollout([{ nodes: [failed("a", NOW - 20 * SEC), "b"], started: true }], policy, resumed);
    expect(rolloutStep(r, seen({}), NOW).actions).toEqual([started("b")]);
  });

  it("no budget: failures never stop the rollout", () => {
    const r = rollout([{ nodes: [failed("a"), failed("b")], started: true }, { nodes: ["c"] }]);
    expect(rolloutStep(r, seen({}), NOW).actions).toEqual([
      { type: "wave-completed", wave: 0 },
      { type: "wave-started", wave: 1 },
      started("c", 1),
    ]);
    expect(allowedFailures(undefined, 10)).toBe(Number.POSITIVE_INFINITY);
    expect(
      allowedFailures(create(RolloutSchema, { policy: { failureBudget: { limit: { case: "percent", value: 15 } } } }).policy, 10),
    ).toBe(1);
  });
});

describe("rolloutStep: idempotence", () => {
  it("the same record, observations and time give the same actions", () => {
    const r = rollout(
      [
        { nodes: [done("a")], started: true },
        { nodes: [deploying("b"), "c", "d"], started: true },
        { nodes: ["e"], requirePromote: true },
      ],
      { maxParallel: 2, minHealthyTime: durationFromMs(5 * SEC), progressDeadline: durationFromMs(60 * SEC) },
    );
    const obs = seen({ b: { converged: true } });
    const first = rolloutStep(r, obs, NOW);
    expect(first.actions).toEqual([{ type: "node-baking", nodeId: "b" }, { type: "wave-completed", wave: 0 }, started("c", 1)]);
    expect(rolloutStep(r, obs, NOW)).toEqual(first);
    expect(r).toEqual(
      rollout(
        [
          { nodes: [done("a")], started: true },
          { nodes: [deploying("b"), "c", "d"], started: true },
          { nodes: ["e"], requirePromote: true },
        ],
        { maxParallel: 2, minHealthyTime: durationFromMs(5 * SEC), progressDeadline: durationFromMs(60 * SEC) },
      ),
    );
  });
});
