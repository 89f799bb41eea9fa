// Wave plans (rollouts/wave-plan.ts): which nodes each wave takes, for fixed fleets and, as a
// property, for random fleets and policies.
import { type MessageInitShape, create } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { RolloutPolicySchema, type RolloutWave } from "../../gen/skipper/v1/rollout_pb.js";
import { matchesSelector } from "../domain/label-selector.js";
import { type PlanNode, planWaves, shareOf } from "./wave-plan.js";

const policy = (waves: Partial<RolloutWave>[], rest: MessageInitShape<typeof RolloutPolicySchema> = {}) =>
  create(RolloutPolicySchema, { ...rest, waves: waves as never });
const fleet = (n: number, labels: (i: number) => Record<string, string> = () => ({})): PlanNode[] =>
  Array.from({ length: n }, (_, i) => ({ id: `n${String(i).padStart(3, "0")}`, labels: labels(i) }));
const ids = (from: number, to: number) =>
  fleet(to)
    .slice(from)
    .map((n) => n.id);

describe("planWaves", () => {
  it("canary by label, then 10 %, then the rest", () => {
    const nodes = fleet(30, (i): Record<string, string> => (i === 7 || i === 21 ? { ring: "canary" } : {}));
    const waves = planWaves(
      policy([{ name: "canary", nodeSelector: { ring: "canary" } }, { size: { case: "percent", value: 10 } }]),
      nodes,
    );
    expect(waves.map((w) => w.name)).toEqual(["canary", "wave-2", "rest"]);
    expect(waves[0]!.nodeIds).toEqual(["n007", "n021"]);
    // 10 % of the 28 remaining, rounded up: 3, the first three by id.
    expect(waves[1]!.nodeIds).toEqual(["n000", "n001", "n002"]);
    expect(waves[2]!.nodeIds).toHaveLength(25);
    expect(waves[2]!.nodeIds).not.toContain("n007");
  });

  it("rounds a percentage up and takes at least one node", () => {
    expect(shareOf({ case: "percent", value: 10 }, 28)).toBe(3);
    expect(shareOf({ case: "percent", value: 10 }, 30)).toBe(3);
    expect(shareOf({ case: "percent", value: 1 }, 5)).toBe(1);
    expect(shareOf({ case: "percent", value: 0 }, 5)).toBe(1);
    expect(shareOf({ case: "percent", value: 50 }, 3)).toBe(2);
    expect(shareOf({ case: "percent", value: 250 }, 4)).toBe(4);
    expect(shareOf({ case: "count", value: 9 }, 4)).toBe(4);
    expect(shareOf({ case: "count", value: 0 }, 4)).toBe(1);
    expect(shareOf({ case: undefined }, 4)).toBe(4);
    expect(shareOf({ case: "count", value: 3 }, 0)).toBe(0);
  });

  it("a selector with a count takes that many of the matching nodes", () => {
    const nodes = fleet(6, (i) => ({ zone: i % 2 === 0 ? "a" : "b" }));
    const waves = planWaves(
      policy([{ nodeSelector: { zone: "b" }, size: { case: "count", value: 2 } }, { size: { case: "count", value: 1 } }]),
      nodes,
    );
    expect(waves.map((w) => w.nodeIds)).toEqual([["n001", "n003"], ["n000"], ["n002", "n004", "n005"]]);
  });

  it("no policy, or no waves, is one wave of every node (today's behaviour)", () => {
    const nodes = fleet(4).reverse();
    const all = [{ name: "all", nodeIds: ids(0, 4), requirePromote: false }];
    expect(planWaves(undefined, nodes)).toEqual(all);
    expect(planWaves(create(RolloutPolicySchema), nodes)).toEqual(all);
    expect(planWaves(undefined, [])).toEqual([]);
  });

  it("leaves out waves that take nothing, and the rest when nothing is left", () => {
    const waves = planWaves(policy([{ nodeSelector: { ring: "canary" }, requirePromote: true }, { name: "everyone" }]), fleet(3));
    expect(waves).toEqual([{ name: "everyone", nodeIds: ids(0, 3), requirePromote: false }]);
  });

  it("keeps each wave's promote gate", () => {
    const waves = planWaves(policy([{ size: { case: "count", value: 1 } }, { requirePromote: true }]), fleet(3));
    expect(waves.map((w) => w.requirePromote)).toEqual([false, true]);
  });

  it("is the same whatever order the nodes come in", () => {
    const nodes = fleet(20, (i) => ({ ring: i % 3 === 0 ? "canary" : "main" }));
    const p = policy([{ nodeSelector: { ring: "canary" }, size: { case: "percent", value: 50 } }, { size: { case: "count", value: 4 } }]);
    expect(planWaves(p, [...nodes].reverse())).toEqual(planWaves(p, nodes));
  });

  it("puts every node in exactly one wave, each taking only what its selector matches (property)", () => {
    const label = fc.record({ ring: fc.constantFrom("a", "b", "c"), zone: fc.constantFrom("x", "y") }, { requiredKeys: [] });
    const wave = fc.record({
      nodeSelector: label,
      size: fc.oneof(
        fc.constant({ case: undefined }),
        fc.record({ case: fc.constant("count" as const), value: fc.integer({ min: 0, max: 10 }) }),
        fc.record({ case: fc.constant("percent" as const), value: fc.integer({ min: 0, max: 120 }) }),
      ),
      requirePromote: fc.boolean(),
    });
    const nodes = fc.uniqueArray(fc.record({ id: fc.stringMatching(/^n[0-9a-z]{1,4}$/), labels: label }), {
      selector: (n) => n.id,
      maxLength: 40,
    });
    fc.assert(
      fc.property(fc.array(wave, { maxLength: 5 }), nodes, (waves, fleetNodes) => {
        const p = policy(waves as Partial<RolloutWave>[]);
        const plan = planWaves(p, fleetNodes);
        const placed = plan.flatMap((w) => w.nodeIds);
        expect([...placed].sort()).toEqual(fleetNodes.map((n) => n.id).sort());
        expect(new Set(placed).size).toBe(placed.length);
        expect(plan.every((w) => w.nodeIds.length > 0)).toBe(true);
        const labels = new Map(fleetNodes.map((n) => [n.id, n.labels]));
        const named = new Map(waves.map((w, i) => [`wave-${i + 1}`, w]));
        for (const w of plan) {
          const source = named.get(w.name);
          if (source) expect(w.nodeIds.every((id) => matchesSelector(labels.get(id)!, source.nodeSelector))).toBe(true);
        }
        expect(planWaves(p, [...fleetNodes].reverse())).toEqual(plan);
      }),
    );
  });
});
