// Each constraint evaluator as a table: input -> phase, reason, until. A last case runs every row
// of every table and checks that PENDING and FAILED always say why.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  ConstraintPhase as P,
  DecisionKind,
  EnvironmentPinSchema,
  PromotionPhase,
  PromotionSchema,
  type Release,
  ReleaseDecisionSchema,
  ReleaseOutcome as O,
  VerificationStateSchema,
} from "../../../gen/skipper/v1/delivery_pb.js";
import { FreezeSpecSchema } from "../../../gen/skipper/v1/rollout_pb.js";
import { actor, MIN, record, rel, status, T0, tenant, ver, type WorldInit, world } from "../../../test/helpers/delivery-world.js";
import { allowedTimes } from "./allowed-times.js";
import { approval } from "./approval.js";
import { type Evaluator, makeContext } from "./context.js";
import { freeze } from "./freeze.js";
import { hold } from "./hold.js";
import { notBad } from "./not-bad.js";
import { notFailedHere } from "./not-failed-here.js";
import { notVetoed } from "./not-vetoed.js";
import { oneInFlight } from "./one-in-flight.js";
import { pin } from "./pin.js";
import { upstream } from "./upstream.js";

const web1 = ver("web", "1.0.0", T0 - 60 * MIN);
const web2 = ver("web", "1.1.0", T0 - 30 * MIN);
const bad2 = { ...web2, markedBad: actor("api_key:ops", T0 - 5 * MIN, "crashes on start") };
const R1 = rel(web1);
const R2 = rel(web2);
const ops = actor("api_key:ops", T0 - 10 * MIN, "looks fine");
const decision = (kind: DecisionKind, x: { releaseId?: string; versionId?: string }) =>
  create(ReleaseDecisionSchema, { kind, by: ops, releaseId: x.releaseId ?? "", versionId: x.versionId ?? "" });
const inFlight = (r: Release, phase = PromotionPhase.VERIFYING) =>
  create(PromotionSchema, {
    release: r,
    phase,
    verifications: [create(VerificationStateSchema, { name: "smoke", passes: 1, runs: 1 })],
  });
const frz = (id: string, tenantId: string, endsAt: number, nodeSelector: Record<string, string> = {}) => ({
  id,
  spec: create(FreezeSpecSchema, { tenantId, endsAt: timestampFromMs(endsAt), reason: "holiday", nodeSelector }),
});
const staging = (...history: ReturnType<typeof record>[]) => ({ upstream: { staging: status({ history }) } });
const dep = (bakeMin: number) => upstream({ environmentId: "staging", bakeTime: { seconds: BigInt(bakeMin * 60), nanos: 0 } } as never);

interface Row {
  name: string;
  w?: WorldInit;
  c?: Release;
  now?: number;
  phase: P;
  reason?: string | RegExp;
  until?: number;
}

const TABLES: [string, Evaluator, Row[]][] = [
  [
    "NOT_BAD",
    notBad,
    [
      { name: "no version marked bad", w: { versions: [web1, web2] }, c: R2, phase: P.PASSED },
      {
        name: "a version marked bad",
        w: { versions: [web1, bad2] },
        c: R2,
        phase: P.FAILED,
        reason: /^web 1\.1\.0 was marked bad by api_key:ops at 2026-11-24T09:55:00\.000Z \(crashes on start\)$/,
      },
    ],
  ],
  [
    "NOT_VETOED",
    notVetoed,
    [
      {
        name: "a veto of another version",
        w: { status: status({ decisions: [decision(DecisionKind.VETOED, { versionId: "web.1.0.0" })] }) },
        phase: P.PASSED,
      },
      {
        name: "a veto of its version",
        w: { status: status({ decisions: [decision(DecisionKind.VETOED, { versionId: "web.1.1.0" })] }) },
        phase: P.FAILED,
        reason: /^web 1\.1\.0 vetoed here by api_key:ops at .*\(looks fine\)$/,
      },
    ],
  ],
  [
    "NOT_FAILED_HERE",
    notFailedHere,
    [
      { name: "verified here before", w: { status: status({ history: [record(R2, O.VERIFIED)] }) }, phase: P.PASSED },
      {
        name: "failed here",
        w: { status: status({ history: [record(R2, O.FAILED, { endedAt: T0 - MIN, reason: "smoke: 1 failure" })] }) },
        phase: P.FAILED,
        reason: "failed here at 2026-11-24T09:59:00.000Z (smoke: 1 failure)",
      },
    ],
  ],
  [
    "UPSTREAM",
    dep(30),
    [
      { name: "upstream has no status", w: {}, phase: P.PENDING, reason: "upstream staging has no status yet" },
      { name: "upstream has not run it", w: staging(record(R1, O.VERIFIED)), phase: P.PENDING, reason: "staging has not run it verified" },
      {
        name: "upstream verifies it now",
        w: { upstream: { staging: status({ current: R2, inFlight: inFlight(R2) }) } },
        phase: P.PENDING,
        reason: "staging runs it, verifying (smoke: 1 passed)",
      },
      {
        name: "upstream verified it, baking",
        w: staging(record(R2, O.VERIFIED, { runningSince: T0 - 18 * MIN })),
        phase: P.PENDING,
        reason: "bake 30m in staging: ends at 2026-11-24T10:12:00.000Z",
        until: T0 + 12 * MIN,
      },
      { name: "upstream verified it, baked", w: staging(record(R2, O.VERIFIED, { runningSince: T0 - 31 * MIN })), phase: P.PASSED },
      {
        name: "failed upstream on re-verification",
        w: staging(record(R2, O.FAILED, { endedAt: T0 - MIN, reason: "smoke" }), record(R2, O.VERIFIED, { runningSince: T0 - 90 * MIN })),
        phase: P.FAILED,
        reason: "failed in staging at 2026-11-24T09:59:00.000Z (smoke)",
      },
      {
        name: "verified upstream, then marked bad",
        w: { versions: [web1, bad2], ...staging(record(R2, O.VERIFIED, { runningSince: T0 - 90 * MIN })) },
        phase: P.FAILED,
        reason: /^web 1\.1\.0 was marked bad/,
      },
      {
        name: "a newer re-verification in flight upstream",
        w: {
          upstream: {
            staging: status({
              current: R2,
              inFlight: inFlight(R2, PromotionPhase.DEPLOYING),
              history: [record(R2, O.VERIFIED, { runningSince: T0 - 90 * MIN })],
            }),
          },
        },
        phase: P.PENDING,
        reason: "staging runs it, deploying",
      },
    ],
  ],
  [
    "APPROVAL",
    approval,
    [
      { name: "not required", phase: P.PASSED },
      { name: "required, none yet", w: { spec: { requireApproval: true } }, phase: P.PENDING, reason: `waits for approval of ${R2.id}` },
      {
        name: "approved for another release",
        w: { spec: { requireApproval: true }, status: status({ decisions: [decision(DecisionKind.APPROVED, { releaseId: R1.id })] }) },
        phase: P.PENDING,
        reason: `waits for approval of ${R2.id}`,
      },
      {
        name: "approved",
        w: { spec: { requireApproval: true }, status: status({ decisions: [decision(DecisionKind.APPROVED, { releaseId: R2.id })] }) },
        phase: P.PASSED,
      },
      {
        name: "rejected after an approval",
        w: {
          spec: { requireApproval: true },
          status: status({
            decisions: [decision(DecisionKind.REJECTED, { releaseId: R2.id }), decision(DecisionKind.APPROVED, { releaseId: R2.id })],
          }),
        },
        phase: P.FAILED,
        reason: /^rejected by api_key:ops at .* \(looks fine\)$/,
      },
    ],
  ],
  [
    "ALLOWED_TIMES",
    allowedTimes,
    [
      { name: "no allowed times", phase: P.PASSED },
      { name: "inside a window", w: { spec: { allowedTimes: [{ days: ["tue"], start: "09:00", end: "17:00" }] } }, phase: P.PASSED },
      {
        name: "outside: waits for the next opening",
        w: { spec: { allowedTimes: [{ days: ["wed"], start: "09:00", end: "17:00" }] } },
        phase: P.PENDING,
        reason: "outside the allowed times; the next opens at 2026-11-25T09:00:00.000Z",
        until: Date.parse("2026-11-25T09:00:00Z"),
      },
    ],
  ],
  [
    "FREEZE",
    freeze,
    [
      { name: "no freeze", phase: P.PASSED },
      { name: "a freeze of another tenant", w: { tenants: [tenant("shop")], freezes: [frz("f-1", "other", T0 + MIN)] }, phase: P.PASSED },
      {
        name: "a freeze by node selector",
        w: { tenants: [tenant("shop")], freezes: [frz("f-1", "", T0 + MIN, { ring: "a" })] },
        phase: P.PASSED,
      },
      { name: "an ended freeze", w: { tenants: [tenant("shop")], freezes: [frz("f-1", "shop", T0)] }, phase: P.PASSED },
      {
        name: "a freeze of its tenant",
        w: { tenants: [tenant("shop")], freezes: [frz("f-1", "shop", T0 + 60 * MIN)] },
        phase: P.PENDING,
        reason: "freeze f-1 of tenant shop until 2026-11-24T11:00:00.000Z (holiday)",
        until: T0 + 60 * MIN,
      },
      {
        name: "a freeze of every tenant",
        w: { freezes: [frz("f-2", "", T0 + MIN)] },
        phase: P.PENDING,
        reason: /^freeze f-2 of every tenant until/,
        until: T0 + MIN,
      },
    ],
  ],
  [
    "ONE_IN_FLIGHT",
    oneInFlight,
    [
      { name: "nothing in flight", phase: P.PASSED },
      { name: "itself in flight", w: { status: status({ inFlight: inFlight(R2) }) }, phase: P.PASSED },
      {
        name: "another in flight",
        w: { spec: { verifications: [{ name: "smoke", requiredPasses: 3 }] }, status: status({ inFlight: inFlight(R1) }) },
        phase: P.PENDING,
        reason: `${R1.id} is in flight (verifying: smoke 1/3)`,
      },
    ],
  ],
  [
    "PIN",
    pin,
    [
      { name: "not pinned", phase: P.PASSED },
      {
        name: "pinned",
        w: { status: status({ pin: create(EnvironmentPinSchema, { release: R1, pinned: ops }) }) },
        phase: P.PENDING,
        reason: `pinned to ${R1.id} by api_key:ops at 2026-11-24T09:50:00.000Z (looks fine): unpin to promote`,
      },
    ],
  ],
  [
    "HOLD",
    hold,
    [
      { name: "not held", phase: P.PASSED },
      {
        name: "held",
        w: { status: status({ hold: actor("admin", T0 - MIN, "rollout r-9 of shop aborted (bad)") }) },
        phase: P.PENDING,
        reason: "held since 2026-11-24T09:59:00.000Z by admin: rollout r-9 of shop aborted (bad): unpin to resume",
      },
    ],
  ],
];

function judge(e: Evaluator, row: Row) {
  const { d, o } = world({ versions: [web1, web2], ...row.w });
  return e(row.c ?? R2, makeContext(d, o, o.status, row.now ?? T0));
}

for (const [kind, e, rows] of TABLES) {
  describe(kind, () => {
    it.each(rows.map((r) => [r.name, r] as const))("%s", (_name, row) => {
      const s = judge(e, row);
      expect(P[s.phase]).toBe(P[row.phase]);
      if (typeof row.reason === "string") expect(s.reason).toBe(row.reason);
      else if (row.reason) expect(s.reason).toMatch(row.reason);
      expect(s.until ? Number(s.until.seconds) * 1000 : undefined).toBe(row.until);
    });
  });
}

describe("every evaluator", () => {
  it("says why whenever a candidate is pending or failed", () => {
    let blocked = 0;
    for (const [kind, e, rows] of TABLES) {
      for (const row of rows) {
        const s = judge(e, row);
        if (s.phase === P.PASSED) continue;
        blocked++;
        expect(s.reason.trim(), `${kind}: ${row.name}`).not.toBe("");
      }
    }
    expect(blocked).toBeGreaterThan(15);
  });
});
