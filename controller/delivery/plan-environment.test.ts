// planEnvironment as fixtures: seed a world, run one pass, assert the exact actions and what the
// status says. Entries: pins, upstreams, mark-bad, one in flight, approvals, vetoes, calendars,
// groups; and a pass over a pass's own output changes nothing.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  ConstraintKind as K,
  ConstraintPhase as P,
  DecisionKind,
  EnvironmentPinSchema,
  PromotionPhase,
  PromotionSchema,
  type Release,
  ReleaseDecisionSchema,
  ReleaseMatch,
  ReleaseOutcome as O,
} from "../../gen/skipper/v1/delivery_pb.js";
import { actor, MIN, record, rel, status, T0, tenant, ver, type WorldInit, world } from "../../test/helpers/delivery-world.js";
import { planEnvironment } from "./plan-environment.js";
import type { EnvPlan } from "./plan-types.js";

const web1 = ver("web", "1.0.0", T0 - 90 * MIN);
const web2 = ver("web", "1.1.0", T0 - 60 * MIN);
const web3 = ver("web", "1.2.0", T0 - 30 * MIN);
const R1 = rel(web1);
const R2 = rel(web2);
const R3 = rel(web3);
const ops = actor("api_key:ops", T0 - 5 * MIN, "hold prod on 1.0.0");

/** The actions' types, events by their type. */
const kinds = (p: EnvPlan) => p.actions.map((a) => (a.type === "event" ? `event:${a.event.type}` : a.type));
const promoted = (p: EnvPlan) => p.actions.flatMap((a) => (a.type === "promote" ? [a.release.id] : []));
const constraint = (p: EnvPlan, r: Release, k: K) =>
  p.status.candidates.find((c) => c.release?.id === r.id)?.constraints.find((s) => s.kind === k);
/** One pass; the tenant "shop" by default, running nothing converged yet. */
const plan = (w: WorldInit, now = T0) => {
  const { d, o } = world({ tenants: [tenant("shop")], ...w });
  return planEnvironment(d, o, now);
};
/** A verified current: `r` current and its VERIFIED record first in the history. */
const verified = (r: Release, ...older: Release[]) =>
  status({ current: r, history: [r, ...older].map((x) => record(x, O.VERIFIED, { runningSince: T0 - 200 * MIN })) });

describe("entry without upstream", () => {
  it("an environment with nothing promoted takes the newest release at once", () => {
    const p = plan({ versions: [web1, web2], tenants: [tenant("shop-test")] });
    expect(kinds(p)).toEqual(["promote", "event:delivery_promoted"]);
    expect(promoted(p)).toEqual([R2.id]);
    expect(p.status.current?.id).toBe(R2.id);
    expect(p.status.inFlight?.phase).toBe(PromotionPhase.DEPLOYING);
    expect(p.status.message).toBe(`${R2.id} deploying: waits for shop-test to run it converged (0 of 1 tenants do)`);
  });

  it("a newer version is promoted once the current one is verified", () => {
    const p = plan({ versions: [web1, web2, web3], status: verified(R2, R1) });
    expect(promoted(p)).toEqual([R3.id]);
    expect(p.status.inFlight?.from?.id).toBe(R2.id);
  });

  it("the newest version by semver goes first, even when an older line's fix was posted later", () => {
    const fix = ver("web", "1.0.1", T0 - 10 * MIN);
    const p = plan({ versions: [web1, web2, fix], status: verified(R1) });
    expect(promoted(p)).toEqual([R2.id]);
  });

  it("nothing newer: up to date, and no action", () => {
    const p = plan({ versions: [web1, web2], status: verified(R2) });
    expect(p.actions).toEqual([]);
    expect(p.status.message).toBe("up to date");
  });
});

describe("pins", () => {
  it("a pinned environment promotes nothing; its candidates wait for the pin", () => {
    const pin = create(EnvironmentPinSchema, { release: R1, pinned: ops });
    const p = plan({ versions: [web1, web2], status: status({ ...verified(R1), pin }) });
    expect(p.actions.filter((a) => a.type !== "event")).toEqual([]);
    expect(constraint(p, R2, K.PIN)?.phase).toBe(P.PENDING);
    expect(p.status.message).toBe(
      `${R2.id}: pinned to ${R1.id} by api_key:ops at 2026-11-24T09:55:00.000Z (hold prod on 1.0.0): unpin to promote`,
    );
  });

  it("a pin to another release promotes it at once, by the operator, replacing the one in flight", () => {
    const pin = create(EnvironmentPinSchema, { release: R1, pinned: ops });
    const inFlight = create(PromotionSchema, { release: R2, phase: PromotionPhase.DEPLOYING, started: actor("controller", T0 - MIN) });
    const p = plan({ versions: [web1, web2], status: status({ current: R2, inFlight, pin, history: [record(R1, O.VERIFIED)] }) });
    expect(kinds(p)).toEqual(["promote", "event:delivery_promoted", "event:delivery_candidate_waiting"]);
    expect(p.actions[0]).toMatchObject({ type: "promote", release: { id: R1.id }, by: { actor: "api_key:ops" } });
    expect(p.status.history[0]).toMatchObject({ release: { id: R2.id }, outcome: O.REPLACED });
  });
});

describe("upstream", () => {
  const spec = { dependsOn: [{ environmentId: "staging", bakeTime: { seconds: 1800n, nanos: 0 } }] };
  const w = (up: ReturnType<typeof status>, own = verified(R1)) => ({
    id: "prod",
    spec,
    versions: [web1, web2, web3],
    status: own,
    upstream: { staging: up },
  });

  it("a release that failed upstream is no candidate", () => {
    const p = plan(w(status({ current: R2, history: [record(R2, O.FAILED), record(R1, O.VERIFIED)] })));
    expect(p.actions).toEqual([]);
    expect(p.status.candidates).toEqual([]);
    expect(p.status.message).toBe("up to date");
  });

  it("a release upstream still verifies is no candidate (kargo#7032)", () => {
    const inFlight = create(PromotionSchema, { release: R3, phase: PromotionPhase.VERIFYING });
    const p = plan(w(status({ current: R3, inFlight, history: [record(R1, O.VERIFIED)] })));
    expect(p.status.candidates).toEqual([]);
    expect(p.actions).toEqual([]);
  });

  it("a release verified upstream waits for the bake, and the plan wakes when it ends", () => {
    const p = plan(w(status({ current: R2, history: [record(R2, O.VERIFIED, { runningSince: T0 - 10 * MIN })] })));
    expect(promoted(p)).toEqual([]);
    expect(constraint(p, R2, K.UPSTREAM)).toMatchObject({
      phase: P.PENDING,
      reason: "bake 30m in staging: ends at 2026-11-24T10:20:00.000Z",
    });
    expect(p.wakeAt).toBe(T0 + 20 * MIN);
    expect(kinds(p)).toEqual(["event:delivery_candidate_waiting"]);
  });

  it("baked: promoted", () => {
    const p = plan(w(status({ current: R2, history: [record(R2, O.VERIFIED, { runningSince: T0 - 31 * MIN })] })));
    expect(promoted(p)).toEqual([R2.id]);
  });

  it("a failed re-verification upstream blocks downstream at once (kargo#5144)", () => {
    const before = plan(w(status({ current: R2, history: [record(R2, O.VERIFIED, { runningSince: T0 - 10 * MIN })] })));
    const up = status({
      current: R2,
      history: [record(R2, O.FAILED, { endedAt: T0, reason: "smoke" }), record(R2, O.VERIFIED, { runningSince: T0 - 10 * MIN })],
    });
    const p = plan(w(up, before.status), T0 + 30 * MIN);
    expect(kinds(p)).toEqual(["event:delivery_candidate_waiting", "event:delivery_constraint_failed"]);
    expect(constraint(p, R2, K.UPSTREAM)).toMatchObject({
      phase: P.FAILED,
      reason: "failed in staging at 2026-11-24T10:00:00.000Z (smoke)",
    });
  });
});

describe("mark-bad", () => {
  const bad = (v: typeof web2) => ({ ...v, markedBad: actor("api_key:ops", T0 - MIN, "crash loop") });

  it("a bad current is demoted to the newest verified good release", () => {
    const p = plan({ versions: [web1, bad(web2)], status: verified(R2, R1) });
    expect(kinds(p)).toEqual(["demote", "event:delivery_demoted"]);
    expect(p.actions[0]).toMatchObject({ type: "demote", to: { id: R1.id } });
    expect(p.status.current?.id).toBe(R1.id);
    expect(p.status.history[0]).toMatchObject({ release: { id: R2.id }, outcome: O.DEMOTED });
  });

  it("a held environment is demoted too; a pinned one stays and says so", () => {
    const held = plan({ versions: [web1, bad(web2)], status: status({ ...verified(R2, R1), hold: ops }) });
    expect(kinds(held)).toEqual(["demote", "event:delivery_demoted"]);
    const pin = create(EnvironmentPinSchema, { release: R2, pinned: ops });
    const pinned = plan({ versions: [web1, bad(web2)], status: status({ ...verified(R2, R1), pin }) });
    expect(pinned.actions).toEqual([]);
    expect(pinned.status.message).toMatch(/^runs web 1\.1\.0, marked bad by api_key:ops at .* \(crash loop\), while pinned to rel-/);
  });

  it("no earlier good release: it says to pin one", () => {
    const p = plan({ versions: [bad(web2)], status: verified(R2) });
    expect(p.actions).toEqual([]);
    expect(p.status.message).toMatch(/, and has no earlier good release: pin one$/);
  });
});

describe("constraints of entry", () => {
  it("one in flight: the newer release waits", () => {
    const inFlight = create(PromotionSchema, { release: R2, phase: PromotionPhase.DEPLOYING, started: actor("controller", T0 - MIN) });
    const p = plan({ versions: [web1, web2, web3], tenants: [tenant("shop")], status: status({ current: R2, inFlight }) });
    expect(promoted(p)).toEqual([]);
    expect(constraint(p, R3, K.ONE_IN_FLIGHT)).toMatchObject({ phase: P.PENDING, reason: `${R2.id} is in flight (deploying)` });
  });

  it("approval pending, then the release passes once approved; a rejection fails it", () => {
    const w = { versions: [web1, web2], spec: { requireApproval: true }, status: verified(R1) };
    const waiting = plan(w);
    expect(promoted(waiting)).toEqual([]);
    expect(waiting.status.message).toBe(`${R2.id}: waits for approval of ${R2.id}`);
    const decide = (kind: DecisionKind) => create(ReleaseDecisionSchema, { releaseId: R2.id, kind, by: ops });
    const approved = plan({ ...w, status: status({ ...waiting.status, decisions: [decide(DecisionKind.APPROVED)] }) });
    expect(promoted(approved)).toEqual([R2.id]);
    const rejected = plan({ ...w, status: status({ ...waiting.status, decisions: [decide(DecisionKind.REJECTED)] }) });
    expect(promoted(rejected)).toEqual([]);
    expect(constraint(rejected, R2, K.APPROVAL)?.phase).toBe(P.FAILED);
  });

  it("a veto of one version fails a release containing it, and an older one goes ahead", () => {
    const veto = create(ReleaseDecisionSchema, { versionId: "web.1.2.0", kind: DecisionKind.VETOED, by: ops });
    const p = plan({ versions: [web1, web2, web3], status: status({ ...verified(R1), decisions: [veto] }) });
    expect(constraint(p, R3, K.NOT_VETOED)?.phase).toBe(P.FAILED);
    expect(promoted(p)).toEqual([R2.id]);
  });

  it("outside the allowed times: pending with the next opening, and the plan wakes then", () => {
    const spec = { allowedTimes: [{ days: ["wed"], start: "09:00", end: "17:00" }] };
    const p = plan({ versions: [web1, web2], spec, status: verified(R1) });
    expect(promoted(p)).toEqual([]);
    expect(constraint(p, R2, K.ALLOWED_TIMES)?.reason).toBe("outside the allowed times; the next opens at 2026-11-25T09:00:00.000Z");
    expect(p.wakeAt).toBe(Date.parse("2026-11-25T09:00:00Z"));
  });
});

describe("groups", () => {
  const worker1 = ver("worker", "1.0.0", T0 - 90 * MIN);
  const worker2 = ver("worker", "1.1.0", T0 - 20 * MIN);
  const db1 = ver("db", "5.0.0", T0 - 90 * MIN);
  const db2 = ver("db", "5.1.0", T0 - 10 * MIN);
  const delivery = { releases: [{ name: "app", artifactIds: ["web", "worker"], match: ReleaseMatch.VERSION }] };

  it("an incomplete group is no candidate; an ungrouped artifact moves alone", () => {
    const p = plan({ versions: [web1, web2, worker1, db1, db2], delivery, status: verified(rel(web1, worker1, db1)) });
    expect(promoted(p)).toEqual([rel(web1, worker1, db2).id]);
    expect(p.status.candidates).toEqual([]);
  });

  it("a COMMIT group pairs the versions that name the same commit", () => {
    const commit = { releases: [{ name: "app", artifactIds: ["web", "worker"], match: ReleaseMatch.COMMIT }] };
    const w1 = ver("web", "1.0.0", T0 - 90 * MIN, { metadata: { commit: "aaa" } });
    const k1 = ver("worker", "7", T0 - 90 * MIN, { metadata: { commit: "aaa" } });
    const w2 = ver("web", "1.1.0", T0 - 30 * MIN, { metadata: { commit: "bbb" } });
    const k2 = ver("worker", "8", T0 - 20 * MIN, { metadata: { commit: "bbb" } });
    const k3 = ver("worker", "9", T0 - 10 * MIN, { metadata: { commit: "ccc" } });
    const p = plan({ versions: [w1, w2, k1, k2, k3], delivery: commit, status: verified(rel(w1, k1)) });
    expect(promoted(p)).toEqual([rel(w2, k2).id]);
  });

  it("a complete group moves whole", () => {
    const p = plan({ versions: [web1, web2, worker1, worker2, db1], delivery, status: verified(rel(web1, worker1, db1)) });
    expect(promoted(p)).toEqual([rel(web2, worker2, db1).id]);
  });
});
