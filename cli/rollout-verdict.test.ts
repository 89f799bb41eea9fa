// `rollout status`'s verdict: done, progressing (waiting helps) or blocked (someone must act),
// from the tenant's convergence and its latest rollout; and the lines a watcher prints.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ConvergenceStatus, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { RolloutNodeState, RolloutSchema, RolloutStatus } from "../gen/skipper/v1/rollout_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { rolloutVerdict, statusLines } from "./rollout-verdict.js";

const tenant = (status: ConvergenceStatus, message = "") =>
  create(ResourceSchema, { id: "shop", resourceType: "tenant", convergence: { status, message } });
const rollout = (init: MessageInitShape<typeof RolloutSchema>) => create(RolloutSchema, { id: "ro-1", tenantId: "shop", ...init });
const wave = (name: string, states: RolloutNodeState[], extra: object = {}) => ({
  name,
  nodes: states.map((state, i) => ({ nodeId: `${name}-${i}`, state })),
  ...extra,
});

describe("rollout status verdicts", () => {
  it("converged without a rollout under way is done; pending and in-flight work is progressing", () => {
    expect(rolloutVerdict(tenant(ConvergenceStatus.CONVERGED), undefined).state).toBe("done");
    expect(rolloutVerdict(tenant(ConvergenceStatus.CONVERGED), rollout({ status: RolloutStatus.SUCCEEDED })).state).toBe("done");
    for (const s of [
      ConvergenceStatus.UNSPECIFIED,
      ConvergenceStatus.PENDING,
      ConvergenceStatus.ORDER_IN_FLIGHT,
      ConvergenceStatus.RETRY_BACKOFF,
    ]) {
      expect(rolloutVerdict(tenant(s), undefined).state).toBe("progressing");
    }
  });

  it("what waiting will not fix is blocked, and says where to look", () => {
    const v = rolloutVerdict(tenant(ConvergenceStatus.NO_MATCHING_NODE, "no registered node matches"), undefined);
    expect(v).toEqual({
      state: "blocked",
      reason: "NO_MATCHING_NODE: no registered node matches",
      hint: "see why with `skipper explain tenant shop`",
    });
    for (const s of [
      ConvergenceStatus.ORDER_FAILED,
      ConvergenceStatus.ROLLED_BACK,
      ConvergenceStatus.NODE_OFFLINE,
      ConvergenceStatus.REFERENCE_MISSING,
    ]) {
      expect(rolloutVerdict(tenant(s), undefined).state).toBe("blocked");
    }
  });

  it("a rollout under way is progressing even where the tenant looks converged; paused is blocked", () => {
    const going = rollout({
      status: RolloutStatus.PROGRESSING,
      waves: [wave("canary", [RolloutNodeState.DONE]), wave("rest", [RolloutNodeState.DEPLOYING])],
    });
    expect(rolloutVerdict(tenant(ConvergenceStatus.CONVERGED), going)).toEqual({
      state: "progressing",
      reason: "rollout ro-1 progressing: canary 1/1,rest 0/1",
    });
    const paused = rollout({ status: RolloutStatus.PAUSED, paused: { actor: "controller", reason: "failure budget exhausted" } });
    expect(rolloutVerdict(tenant(ConvergenceStatus.ROLLOUT_WAITING), paused)).toMatchObject({
      state: "blocked",
      reason: "rollout ro-1 is paused (failure budget exhausted)",
      hint: expect.stringContaining("skipper rollout resume shop"),
    });
  });

  it("a wave waiting for its promote after the waves before it is blocked on the promote", () => {
    const r = rollout({
      status: RolloutStatus.PROGRESSING,
      waves: [
        wave("canary", [RolloutNodeState.DONE], { completedAt: { seconds: 1n } }),
        wave("half", [RolloutNodeState.WAITING], { requirePromote: true }),
      ],
    });
    expect(rolloutVerdict(tenant(ConvergenceStatus.ROLLOUT_WAITING), r)).toMatchObject({
      state: "blocked",
      reason: "wave half of rollout ro-1 waits for a promote",
      hint: "promote it with `skipper rollout promote shop`",
    });
    // While the canary still runs, the gate is not what holds it.
    const early = rollout({
      status: RolloutStatus.PROGRESSING,
      waves: [wave("canary", [RolloutNodeState.DEPLOYING]), wave("half", [RolloutNodeState.WAITING], { requirePromote: true })],
    });
    expect(rolloutVerdict(tenant(ConvergenceStatus.ROLLOUT_WAITING), early).state).toBe("progressing");
  });

  it("a rollout that ended rolled back leaves the tenant blocked", () => {
    const r = rollout({ status: RolloutStatus.ROLLED_BACK, message: "aborted: wrong build" });
    expect(rolloutVerdict(tenant(ConvergenceStatus.ROLLOUT_WAITING), r)).toEqual({
      state: "blocked",
      reason: "rollout ro-1 ended ROLLED_BACK (aborted: wrong build)",
    });
  });

  it("prints one line for the tenant, one for the rollout and one per wave, keyed so a watcher prints changes only", () => {
    const r = rollout({
      status: RolloutStatus.PROGRESSING,
      fromSpecHash: "aaaaaaaaaaaaaaaa",
      toSpecHash: "bbbbbbbbbbbbbbbb",
      waves: [wave("canary", [RolloutNodeState.DONE]), wave("rest", [RolloutNodeState.FAILED], { requirePromote: true })],
    });
    r.waves[1]!.nodes[0]!.reason = "HEALTH_GATE_FAILED";
    expect(statusLines(tenant(ConvergenceStatus.ROLLOUT_WAITING, "held by its wave"), r)).toEqual([
      { key: "tenant", text: "tenant shop: ROLLOUT_WAITING - held by its wave" },
      { key: "rollout", text: "rollout ro-1 PROGRESSING (spec aaaaaaaaaaaa -> bbbbbbbbbbbb)" },
      { key: "wave canary", text: "  wave canary  1/1 done  canary-0=DONE" },
      { key: "wave rest", text: "  wave rest    0/1 done (waits for a promote)  rest-0=FAILED (HEALTH_GATE_FAILED)" },
    ]);
  });

  it("a tenant with a deploy order still in flight (a forced Apply's) is progressing, whatever its convergence says yet", () => {
    const order = create(WorkOrderSchema, {
      id: "wo-1",
      type: WorkOrderType.DEPLOY_SERVICE,
      status: WorkOrderStatus.RUNNING,
      target: { tenantId: "shop", nodeId: "host-1" },
    });
    expect(rolloutVerdict(tenant(ConvergenceStatus.CONVERGED), undefined, [order])).toEqual({
      state: "progressing",
      reason: "order wo-1 deploy_service on host-1 RUNNING (the tenant says CONVERGED)",
    });
    for (const s of [ConvergenceStatus.ORDER_FAILED, ConvergenceStatus.ROLLED_BACK]) {
      expect(rolloutVerdict(tenant(s), undefined, [order]).state).toBe("progressing");
    }
    // What an order cannot clear stays blocked; an ad-hoc order changes nothing; none in flight: done.
    expect(rolloutVerdict(tenant(ConvergenceStatus.NODE_OFFLINE), undefined, [order]).state).toBe("blocked");
    const logs = create(WorkOrderSchema, { ...order, type: WorkOrderType.READ_LOGS });
    expect(rolloutVerdict(tenant(ConvergenceStatus.CONVERGED), undefined, [logs]).state).toBe("done");
    expect(rolloutVerdict(tenant(ConvergenceStatus.CONVERGED), undefined, []).state).toBe("done");
  });
});
