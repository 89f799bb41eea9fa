// The pure pieces around a rollout's steps: maintenance windows, stops, commands, the start
// decision and plans. Each case seeds a record and asserts what comes out.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { TenantSpecSchema } from "../../gen/skipper/v1/resource_pb.js";
import {
  FreezeSpecSchema,
  MaintenanceWindowSchema,
  RolloutActorSchema,
  RolloutNodeState as S,
  RolloutSchema,
  RolloutStatus,
} from "../../gen/skipper/v1/rollout_pb.js";
import { isOpen, nextOpening, windowOpen } from "../resources/maintenance-window.js";
import { runCommand } from "./rollout-commands.js";
import { holdOf } from "./rollout-holds.js";
import { buildPlan, planHash } from "./rollout-plan.js";
import { covers, decideRollout } from "./rollout-start.js";
import { rolloutStep } from "./rollout-step.js";
import { stopsFor } from "./rollout-stops.js";

const at = (iso: string) => Date.parse(iso);
const win = (w: Partial<{ days: string[]; start: string; end: string; timeZone: string }>) =>
  create(MaintenanceWindowSchema, { start: "00:00", end: "00:00", ...w });

describe("maintenance windows", () => {
  it("open on their days between start and end, in their time zone", () => {
    const w = win({ days: ["tue"], start: "02:00", end: "03:00", timeZone: "Europe/Berlin" });
    expect(isOpen(w, at("2026-11-24T01:30:00Z"))).toBe(true); // Tue 02:30 in Berlin
    expect(isOpen(w, at("2026-11-24T02:00:00Z"))).toBe(false); // 03:00: closed
    expect(isOpen(w, at("2026-11-25T01:30:00Z"))).toBe(false); // Wednesday
  });

  it("a window that ends before it starts closes the next day; equal ends mean the whole day", () => {
    const night = win({ days: ["fri"], start: "22:00", end: "02:00" });
    expect(isOpen(night, at("2026-11-27T23:00:00Z"))).toBe(true); // Fri 23:00
    expect(isOpen(night, at("2026-11-28T01:59:00Z"))).toBe(true); // Sat 01:59, opened Friday
    expect(isOpen(night, at("2026-11-28T23:00:00Z"))).toBe(false); // Sat 23:00
    expect(isOpen(win({ days: ["sun"] }), at("2026-11-29T12:00:00Z"))).toBe(true);
  });

  it("the next opening is found across days and a clock change", () => {
    const w = win({ days: ["sun"], start: "02:30", end: "04:00", timeZone: "Europe/Berlin" });
    // Saturday before the end of summer time (2026-10-25): Sunday 02:30 CEST is 00:30 UTC.
    expect(new Date(nextOpening([w], at("2026-10-24T12:00:00Z"))!).toISOString()).toBe("2026-10-25T00:30:00.000Z");
    // A week later, winter time: 01:30 UTC.
    expect(new Date(nextOpening([w], at("2026-10-26T12:00:00Z"))!).toISOString()).toBe("2026-11-01T01:30:00.000Z");
    expect(windowOpen([], at("2026-10-26T12:00:00Z"))).toBe(true);
  });
});

describe("stops", () => {
  const nodes = new Map([
    ["a", { ring: "canary" }],
    ["b", { ring: "main" }],
  ]);
  const freeze = (spec: Record<string, unknown>, endsAt: number) =>
    ({ id: "f", spec: create(FreezeSpecSchema, { endsAt: timestampFromMs(endsAt), ...spec }) }) as const;
  const now = at("2026-11-24T10:00:00Z");

  it("a pin or a closed window stops nodes; a freeze of the tenant stops waves; a node freeze stops its nodes; ended freezes nothing", () => {
    const pinned = stopsFor({ tenantId: "t", spec: create(TenantSpecSchema, { pin: { reason: "r" } }), freezes: [], nodes, now });
    expect(pinned.nodes).toContain("pinned (r)");
    const closed = stopsFor({
      tenantId: "t",
      spec: create(TenantSpecSchema, { maintenanceWindows: [win({ start: "02:00", end: "03:00" })] }),
      freezes: [],
      nodes,
      now,
    });
    expect(closed.nodes).toContain("outside the tenant's maintenance windows");
    expect(closed.until).toBe(at("2026-11-25T02:00:00Z"));
    const frozen = stopsFor({
      tenantId: "t",
      freezes: [freeze({ tenantId: "t" }, now + 1000), freeze({ nodeSelector: { ring: "canary" } }, now + 500), freeze({}, now - 1)],
      nodes,
      now,
    });
    expect(frozen.waves).toContain("frozen by freeze f");
    expect([...frozen.frozenNodes.keys()]).toEqual(["a"]);
    expect(frozen.until).toBe(now + 500);
    expect(stopsFor({ tenantId: "other", freezes: [freeze({ tenantId: "t" }, now + 1000)], nodes, now }).waves).toBeUndefined();
  });

  it("the step starts no wave while the tenant is frozen, and skips frozen nodes inside one", () => {
    const r = create(RolloutSchema, {
      id: "r",
      status: RolloutStatus.PROGRESSING,
      waves: [
        {
          name: "all",
          nodes: [
            { nodeId: "a", state: S.WAITING },
            { nodeId: "b", state: S.WAITING },
          ],
        },
      ],
    });
    const waves = rolloutStep(r, new Map(), now, { waves: "frozen", frozenNodes: new Map() });
    expect(waves.actions).toEqual([]);
    expect(waves.blocker).toEqual({ kind: "stopped", reason: "frozen" });
    const some = rolloutStep(r, new Map(), now, { frozenNodes: new Map([["a", "a is frozen"]]) });
    expect(some.actions.filter((x) => x.type === "node-started")).toEqual([{ type: "node-started", nodeId: "b", wave: 0 }]);
    expect(some.blocker).toEqual({ kind: "stopped", reason: "a is frozen" });
    expect(holdOf(r, "a", { frozenNodes: new Map([["a", "a is frozen"]]) })).toContain("waits: a is frozen");
  });
});

describe("commands", () => {
  const actor = create(RolloutActorSchema, { actor: "admin", reason: "why" });
  const r = (status: RolloutStatus) =>
    create(RolloutSchema, { id: "r", status, waves: [{ name: "w", requirePromote: true, nodes: [] }], plan: { planHash: "h" } });

  it("each command fits some statuses, is a no-op when it already holds, and is CONFLICT otherwise", () => {
    expect(runCommand(r(RolloutStatus.PROGRESSING), { kind: "pause" }, actor).rollout.status).toBe(RolloutStatus.PAUSED);
    expect(runCommand(r(RolloutStatus.PAUSED), { kind: "pause" }, actor).event).toBeUndefined();
    expect(() => runCommand(r(RolloutStatus.SUCCEEDED), { kind: "resume" }, actor)).toThrow(/succeeded: cannot resume/);
    expect(runCommand(r(RolloutStatus.PAUSED), { kind: "abort" }, actor).rollout.status).toBe(RolloutStatus.ROLLING_BACK);
    expect(runCommand(r(RolloutStatus.ROLLED_BACK), { kind: "abort" }, actor).event).toBeUndefined();
    const promoted = runCommand(r(RolloutStatus.PROGRESSING), { kind: "promote", wave: "" }, actor).rollout;
    expect(promoted.waves[0]!.promoted?.reason).toBe("why");
    expect(() => runCommand(promoted, { kind: "promote", wave: "" }, actor)).toThrow(/no wave/);
  });

  it("approval needs the rollout's plan hash and a fleet that still matches it", () => {
    const pending = r(RolloutStatus.PENDING_APPROVAL);
    expect(() => runCommand(pending, { kind: "approve", planHash: "x", current: "h" }, actor)).toThrow(/not the plan/);
    expect(() => runCommand(pending, { kind: "approve", planHash: "h", current: "y" }, actor)).toThrow(/fleet changed/);
    const ok = runCommand(pending, { kind: "approve", planHash: "h", current: "h" }, actor);
    expect(ok.rollout.status).toBe(RolloutStatus.PROGRESSING);
    expect(runCommand(ok.rollout, { kind: "approve", planHash: "h", current: "h" }, actor).event).toBeUndefined();
  });
});

describe("starting rollouts", () => {
  const started = create(RolloutActorSchema, { actor: "controller" });
  const fleet = [
    { nodeId: "a", labels: {}, desiredHash: "v2", appliedHash: "v1" },
    { nodeId: "b", labels: {}, desiredHash: "v2", appliedHash: "v2" },
    { nodeId: "c", labels: {}, desiredHash: "v2", appliedHash: "" },
  ];
  const base = { tenantId: "t", tenantIncarnation: "1", fleet, started, now: 0 };

  it("covers only the nodes behind; new nodes and nodes already there are not held", () => {
    const d = decideRollout(base);
    expect(d.start!.waves.flatMap((w) => w.nodes.map((n) => n.nodeId))).toEqual(["a"]);
    expect(d.start!.fromSpecHash).toBe("v1");
    expect(decideRollout(base).start!.id).toBe(d.start!.id); // a retried start finds the same id
    expect(covers(d.start!, new Map(fleet.map((f) => [f.nodeId, f])))).toBe(true);
    const again = decideRollout({ ...base, latest: d.start });
    expect(again).toEqual({ supersede: false, current: d.start });
    const changed = decideRollout({ ...base, latest: d.start, fleet: [{ ...fleet[0]!, desiredHash: "v3" }] });
    expect(changed.supersede).toBe(true);
    expect(changed.start!.id).not.toBe(d.start!.id);
    expect(decideRollout({ ...base, fleet: [fleet[1]!, fleet[2]!] }).start).toBeUndefined();
  });
});

describe("plans", () => {
  it("diff each node's compose file with secrets blanked; the hash covers ids and hashes only", () => {
    const from = { composeFile: "services:\n  web:\n    image: a:1\n    environment:\n      DB_PASSWORD: hunter2\n", env: { A: "1" } };
    const to = { composeFile: "services:\n  web:\n    image: a:2\n    environment:\n      DB_PASSWORD: swordfish\n", env: { B: "2" } };
    const plan = buildPlan("t", [{ nodeId: "n", wave: "w", fromSpecHash: "h1", toSpecHash: "h2", from, to }]);
    const diff = plan.nodes[0]!.composeDiff;
    expect(diff).toContain("-    image: a:1");
    expect(diff).toContain("+    image: a:2");
    expect(diff).not.toMatch(/hunter2|swordfish/);
    expect(plan.nodes[0]!.envChanged).toEqual(["A", "B"]);
    expect(plan.planHash).toBe(planHash("t", [{ nodeId: "n", fromSpecHash: "h1", toSpecHash: "h2" }]));
    expect(plan.planHash).not.toBe(planHash("t", [{ nodeId: "n", fromSpecHash: "h0", toSpecHash: "h2" }]));
  });
});
