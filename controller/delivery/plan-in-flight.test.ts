// planEnvironment's step 1 as fixtures: a promotion in flight moves from DEPLOYING to VERIFYING
// when its tenants run it converged, its verifications run one order at a time and count each
// result once, and it ends VERIFIED, or FAILED with HOLD or ROLLBACK. Last: a pass over a pass's
// own output changes nothing.
import { create, equals } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  ConstraintPhase,
  EnvironmentStatusSchema,
  PromotionPhase,
  PromotionSchema,
  type Release,
  ReleaseOutcome as O,
  VerificationFailureAction,
} from "../../gen/skipper/v1/delivery_pb.js";
import { RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { WorkOrderStatus as W } from "../../gen/skipper/v1/work_order_pb.js";
import { actor, MIN, record, rel, status, T0, tenant, ver, type WorldInit, world } from "../../test/helpers/delivery-world.js";
import { planEnvironment } from "./plan-environment.js";
import type { EnvPlan, OrderView } from "./plan-types.js";
import { verificationOrderId } from "./verification-runs.js";

const web1 = ver("web", "1.0.0", T0 - 90 * MIN);
const web2 = ver("web", "1.1.0", T0 - 60 * MIN);
const R1 = rel(web1);
const R2 = rel(web2);
const kinds = (p: EnvPlan) => p.actions.map((a) => (a.type === "event" ? `event:${a.event.type}` : a.type));
const smoke = { name: "smoke", requiredPasses: 2, maxFailures: 1, interval: { seconds: 60n, nanos: 0 }, tenantId: "shop" };
const orderId = (n: number) => verificationOrderId("test", R2.id, "smoke", n);
const order = (n: number, st: W, createdAtMs: number, finishedAtMs?: number): OrderView => ({
  id: orderId(n),
  status: st,
  resultCode: st === W.SUCCESS ? "OK" : st === W.FAILED ? "HTTP_503" : "",
  message: st === W.FAILED ? "service unavailable" : "",
  createdAtMs,
  finishedAtMs,
});
const deploying = (r: Release = R2) =>
  status({
    current: r,
    inFlight: create(PromotionSchema, {
      release: r,
      phase: PromotionPhase.DEPLOYING,
      started: actor("controller", T0 - 20 * MIN),
      from: R1,
    }),
    history: [record(R1, O.VERIFIED, { runningSince: T0 - 200 * MIN })],
  });
/** Release 1.1.0 in flight; tenant shop runs it converged since T0 - 10m on node n1. */
const base = (w: WorldInit = {}): WorldInit => ({
  versions: [web1, web2],
  spec: { verifications: [smoke] },
  tenants: [tenant("shop", R2.id, T0 - 10 * MIN)],
  nodes: { shop: ["n1"] },
  status: deploying(),
  ...w,
});
const plan = (w: WorldInit, now = T0) => {
  const { d, o } = world(w);
  return planEnvironment(d, o, now);
};

describe("deploying", () => {
  it("waits while a tenant does not run it converged", () => {
    const p = plan(base({ tenants: [tenant("shop", R2.id, T0 - 10 * MIN), tenant("shop-eu", R1.id, T0 - 99 * MIN)] }));
    expect(p.actions).toEqual([]);
    expect(p.status.inFlight?.phase).toBe(PromotionPhase.DEPLOYING);
    expect(p.status.message).toBe(`${R2.id} deploying: waits for shop-eu to run it converged (1 of 2 tenants do)`);
  });

  it("verifies once every tenant runs it converged, from the latest of their convergence, on the verification's tenant's node", () => {
    const p = plan(base({ tenants: [tenant("shop", R2.id, T0 - 10 * MIN), tenant("shop-eu", R2.id, T0 - 4 * MIN)] }));
    expect(p.actions).toEqual([{ type: "run-verification", name: "smoke", tenantId: "shop", nodeId: "n1", orderId: orderId(1) }]);
    expect(orderId(1)).toBe(`vrf-test-${R2.id.slice(4, 16)}-smoke-1`);
    expect(timestampMs(p.status.inFlight!.runningSince!)).toBe(T0 - 4 * MIN);
    expect(p.status.inFlight?.phase).toBe(PromotionPhase.VERIFYING);
  });

  it("a tenant's rollout failing ends it FAILED; one aborted by an operator also holds the environment by that operator", () => {
    const failedRollout = { id: "r-8", status: RolloutStatus.FAILED, message: "2 nodes failed" };
    const f = plan(base({ tenants: [tenant("shop", R2.id, undefined, failedRollout)] }));
    expect(kinds(f)).toEqual(["end-promotion", "event:delivery_release_failed"]);
    expect(f.status.history[0]).toMatchObject({
      release: { id: R2.id },
      outcome: O.FAILED,
      reason: "rollout r-8 of shop failed: 2 nodes failed",
    });
    const aborted = { ...failedRollout, status: RolloutStatus.ROLLED_BACK, aborted: actor("api_key:ops", T0 - MIN, "bad latency") };
    const a = plan(base({ tenants: [tenant("shop", R2.id, undefined, aborted)] }));
    expect(kinds(a)).toEqual(["end-promotion", "event:delivery_release_failed", "hold", "event:delivery_environment_held"]);
    expect(a.status.hold).toMatchObject({ actor: "api_key:ops", reason: "rollout r-8 of shop aborted (bad latency)" });
    // A rollout created before the promotion started (T0 - 20m) is not the promotion's.
    const old = plan(base({ tenants: [tenant("shop", R2.id, undefined, { ...failedRollout, createdAtMs: T0 - 21 * MIN })] }));
    expect(old.actions).toEqual([]);
  });

  it("a tenant without a rollout whose node gave up on the release ends it FAILED, so the next release is not blocked", () => {
    const gaveUp = { ...tenant("shop", R2.id), failed: "node n1: gave up after 5 failures: CHECKSUM_MISMATCH" };
    const f = plan(base({ tenants: [gaveUp] }));
    expect(kinds(f)).toEqual(["end-promotion", "event:delivery_release_failed"]);
    expect(f.status.inFlight).toBeUndefined();
    expect(f.status.history[0]).toMatchObject({
      release: { id: R2.id },
      outcome: O.FAILED,
      reason: "shop could not deploy it: node n1: gave up after 5 failures: CHECKSUM_MISMATCH",
    });
    // Under a rollout still progressing too (one without a failure budget never stops on failures).
    const rolling = { ...gaveUp, rollout: { id: "r-9", status: RolloutStatus.PROGRESSING, message: "" } };
    expect(kinds(plan(base({ tenants: [rolling] })))).toContain("end-promotion");
    // A failure of another release's spec (the tenant has not rendered this one yet) is not this one's.
    const other = plan(base({ tenants: [{ ...tenant("shop", R1.id), failed: "node n1: …" }] }));
    expect(kinds(other)).not.toContain("end-promotion");
  });
});

describe("verifying", () => {
  const verifying = plan(base()).status;

  it("a result counts once: a second pass over the same ended order adds nothing", () => {
    const w = base({ status: verifying, orders: [order(1, W.SUCCESS, T0 + 10_000, T0 + MIN)] });
    const p = plan(w, T0 + MIN);
    expect(p.actions).toEqual([]);
    expect(p.status.inFlight?.verifications[0]).toMatchObject({ passes: 1, runs: 1, workOrderId: orderId(1) });
    expect(p.wakeAt).toBe(T0 + 2 * MIN);
    const again = plan({ ...w, status: p.status }, T0 + 90_000);
    expect(again.actions).toEqual([]);
    expect(again.status.inFlight?.verifications[0]?.passes).toBe(1);
    const due = plan({ ...w, status: p.status }, T0 + 2 * MIN);
    expect(due.actions).toEqual([{ type: "run-verification", name: "smoke", tenantId: "shop", nodeId: "n1", orderId: orderId(2) }]);
  });

  it("the required passes verify the release", () => {
    const one = plan(base({ status: verifying, orders: [order(1, W.SUCCESS, T0, T0 + MIN)] }), T0 + MIN).status;
    const two = plan(base({ status: one, orders: [order(1, W.SUCCESS, T0, T0 + MIN)] }), T0 + 2 * MIN).status;
    const p = plan(base({ status: two, orders: [order(2, W.SUCCESS, T0 + 2 * MIN, T0 + 3 * MIN)] }), T0 + 3 * MIN);
    expect(kinds(p)).toEqual(["event:delivery_verification_passed", "end-promotion", "event:delivery_release_verified"]);
    expect(p.status.inFlight).toBeUndefined();
    expect(p.status.history[0]).toMatchObject({ release: { id: R2.id }, outcome: O.VERIFIED, reason: "1 verification passed" });
    expect(p.status.message).toBe("up to date");
  });

  it("an order queued before the tenants last converged is not counted", () => {
    const p = plan(base({ status: verifying, orders: [order(1, W.FAILED, T0 - 20 * MIN, T0)] }), T0);
    expect(p.status.inFlight?.verifications[0]).toMatchObject({ passes: 0, failures: 0, runs: 1 });
    expect(p.actions).toEqual([{ type: "run-verification", name: "smoke", tenantId: "shop", nodeId: "n1", orderId: orderId(2) }]);
  });

  it("max failures with HOLD: FAILED and held by the controller", () => {
    const p = plan(base({ status: verifying, orders: [order(1, W.FAILED, T0, T0 + MIN)] }), T0 + MIN);
    expect(kinds(p)).toEqual([
      "event:delivery_verification_failed",
      "end-promotion",
      "event:delivery_release_failed",
      "hold",
      "event:delivery_environment_held",
    ]);
    expect(p.status.hold?.actor).toBe("controller");
    expect(p.status.history[0]?.reason).toBe("verification smoke: 1 failure, last HTTP_503: service unavailable");
  });

  it("max failures with ROLLBACK: FAILED and back to the newest good release verified here", () => {
    const spec = { verifications: [smoke], onVerificationFailure: VerificationFailureAction.ROLLBACK };
    const p = plan(base({ spec, status: verifying, orders: [order(1, W.FAILED, T0, T0 + MIN)] }), T0 + MIN);
    expect(kinds(p)).toEqual([
      "event:delivery_verification_failed",
      "end-promotion",
      "event:delivery_release_failed",
      "demote",
      "event:delivery_demoted",
      // 1.1.0 is now a candidate that failed here: it does not come back by itself.
      "event:delivery_candidate_waiting",
      "event:delivery_constraint_failed",
    ]);
    expect(p.status.candidates[0]?.constraints.find((c) => c.phase === ConstraintPhase.FAILED)?.reason).toMatch(
      /^failed here at 2026-11-24T10:01:00.000Z \(verification smoke/,
    );
    expect(p.status.current?.id).toBe(R1.id);
    expect(p.status.inFlight?.release?.id).toBe(R1.id);
    expect(p.status.hold).toBeUndefined();
  });

  it("a tenant leaving convergence sends it back to DEPLOYING and clears running_since", () => {
    const p = plan(base({ status: verifying, tenants: [tenant("shop", R2.id)] }));
    expect(p.status.inFlight?.phase).toBe(PromotionPhase.DEPLOYING);
    expect(p.status.inFlight?.runningSince).toBeUndefined();
  });
});

describe("a pass over its own output", () => {
  const fixtures: [string, WorldInit, number][] = [
    ["first promotion", { versions: [web1, web2], tenants: [tenant("shop")] }, T0],
    ["deploying", base({ tenants: [tenant("shop", R1.id, T0 - 99 * MIN)] }), T0],
    ["verifying, order pending", base({ orders: [order(1, W.PENDING, T0)] }), T0],
    ["verified", base({ spec: {} }), T0],
    [
      "approval pending",
      { versions: [web1, web2], spec: { requireApproval: true }, status: status({ current: R1, history: [record(R1, O.VERIFIED)] }) },
      T0,
    ],
    [
      "bake pending",
      {
        id: "prod",
        versions: [web1, web2],
        spec: { dependsOn: [{ environmentId: "test", bakeTime: { seconds: 3600n, nanos: 0 } }] },
        upstream: { test: status({ current: R2, history: [record(R2, O.VERIFIED, { runningSince: T0 })] }) },
      },
      T0,
    ],
    [
      "bad current",
      {
        versions: [web1, { ...web2, markedBad: actor("admin", T0, "x") }],
        tenants: [tenant("shop", R2.id, T0)],
        status: status({ current: R2, history: [record(R2, O.VERIFIED), record(R1, O.VERIFIED)] }),
      },
      T0,
    ],
  ];

  it.each(fixtures)("%s: a second pass has no action and returns its status unchanged", (_name, w, now) => {
    const first = plan(w, now);
    const second = plan({ ...w, status: first.status }, now + 1000);
    expect(second.actions).toEqual([]);
    expect(equals(EnvironmentStatusSchema, second.status, first.status)).toBe(true);
    expect(first.status.message).not.toBe("");
    expect(timestampMs(second.status.evaluatedAt!)).toBe(now);
  });
});
