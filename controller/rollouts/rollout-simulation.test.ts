// A whole rollout, simulated: plan waves for a random fleet and policy, then step the rollout
// second by second, applying its actions to the record the way the wiring will, with nodes that
// converge (or fail) some seconds after they are started. Properties: it ends SUCCEEDED, every
// node is started exactly once, waves go in order, max_parallel is never exceeded.
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { RolloutActorSchema, RolloutNodeState as S, RolloutSchema, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { type NodeObservation, rolloutStep } from "./rollout-step.js";
import { planWaves } from "./wave-plan.js";
import { applyActions } from "./rollout-actions.js";

const SEC = 1000;
const TERMINAL = new Set([S.DONE, S.FAILED, S.SKIPPED_OFFLINE]);

const arbitraryWave = fc.record({
  nodeSelector: fc.record({ ring: fc.constantFrom("canary", "main") }, { requiredKeys: [] }),
  size: fc.oneof(
    fc.constant({ case: undefined }),
    fc.record({ case: fc.constant("count" as const), value: fc.integer({ min: 1, max: 5 }) }),
    fc.record({ case: fc.constant("percent" as const), value: fc.integer({ min: 1, max: 100 }) }),
  ),
  requirePromote: fc.boolean(),
});
const arbitraryNode = fc.record({
  ring: fc.constantFrom("canary", "main"),
  delay: fc.integer({ min: 1, max: 8 }),
  fails: fc.boolean(),
});

describe("a simulated rollout", () => {
  it("ends SUCCEEDED with every node started once, waves in order, never above max_parallel", () => {
    fc.assert(
      fc.property(
        fc.array(arbitraryWave, { maxLength: 4 }),
        fc.array(arbitraryNode, { minLength: 1, maxLength: 25 }),
        fc.integer({ min: 0, max: 4 }),
        fc.constantFrom(0, 3 * SEC),
        (waves, fleet, maxParallel, bakeMs) => {
          const policy = { waves, maxParallel, minHealthyTime: bakeMs ? durationFromMs(bakeMs) : undefined };
          const nodes = fleet.map((n, i) => ({ id: `n${String(i).padStart(2, "0")}`, labels: { ring: n.ring }, ...n }));
          const plan = planWaves(create(RolloutSchema, { policy }).policy, nodes);
          const r = create(RolloutSchema, {
            status: RolloutStatus.PROGRESSING,
            policy,
            waves: plan.map((w) => ({ ...w, nodes: w.nodeIds.map((nodeId) => ({ nodeId, state: S.WAITING })) })),
          });
          const starts = new Map<string, number>();
          let now = 0;
          for (let i = 0; i < 1000 && r.status === RolloutStatus.PROGRESSING; i++, now += SEC) {
            const observed = new Map<string, NodeObservation>();
            for (const n of nodes) {
              const t = starts.get(n.id);
              const ready = t !== undefined && now - t >= n.delay * SEC;
              observed.set(n.id, { converged: ready && !n.fails, failure: ready && n.fails ? "ORDER_FAILED" : undefined });
            }
            const step = rolloutStep(r, observed, now);
            expect(rolloutStep(r, observed, now)).toEqual(step);
            if (step.blocker?.kind === "promote")
              r.waves[step.blocker.wave]!.promoted = create(RolloutActorSchema, { actor: "admin", at: timestampFromMs(now) });
            for (const a of step.actions) {
              if (a.type !== "node-started") continue;
              expect(starts.has(a.nodeId)).toBe(false);
              starts.set(a.nodeId, now);
            }
            applyActions(r, step.actions, now);
            // Every wave before one where a node started is complete, this step's changes included.
            for (const a of step.actions) {
              if (a.type !== "node-started") continue;
              for (const w of r.waves.slice(0, a.wave)) expect(w.nodes.every((x) => TERMINAL.has(x.state))).toBe(true);
            }
            const busy = r.waves.flatMap((w) => w.nodes).filter((x) => x.state === S.DEPLOYING || x.state === S.BAKING).length;
            if (maxParallel > 0) expect(busy).toBeLessThanOrEqual(maxParallel);
          }
          expect(r.status).toBe(RolloutStatus.SUCCEEDED);
          expect([...starts.keys()].sort()).toEqual(nodes.map((n) => n.id));
          for (const n of nodes)
            expect(r.waves.flatMap((w) => w.nodes).find((x) => x.nodeId === n.id)!.state).toBe(n.fails ? S.FAILED : S.DONE);
        },
      ),
    );
  });
});
