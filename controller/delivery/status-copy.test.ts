// The plan's working copy shares what it does not change, and the comparison sees every field.
import { clone, create, equals } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  CandidateSchema,
  EnvironmentStatusSchema,
  PromotionSchema,
  ReleaseOutcome as O,
  VerificationStateSchema,
} from "../../gen/skipper/v1/delivery_pb.js";
import { actor, MIN, record, rel, status, T0, tenant, ver, world } from "../../test/helpers/delivery-world.js";
import { planEnvironment } from "./plan-environment.js";
import { sameStatus, workingCopy } from "./status-copy.js";

const web1 = ver("web", "1.0.0", T0 - 90 * MIN);
const web2 = ver("web", "1.1.0", T0 - 60 * MIN);
const R1 = rel(web1);
const R2 = rel(web2);
const stored = () =>
  status({
    current: R2,
    inFlight: create(PromotionSchema, {
      release: R2,
      started: actor("controller", T0 - 9 * MIN),
      verifications: [create(VerificationStateSchema, { name: "smoke" })],
    }),
    history: [record(R1, O.VERIFIED, { runningSince: T0 - 99 * MIN })],
    message: "m",
  });

describe("working copy", () => {
  it("a plan changing its copy leaves the stored status as it was", () => {
    const s = stored();
    const before = clone(EnvironmentStatusSchema, s);
    const { d, o } = world({
      versions: [web1, { ...web2, markedBad: actor("admin", T0, "x") }],
      spec: { verifications: [{ name: "smoke" }] },
      tenants: [tenant("shop", R2.id, T0 - MIN)],
      nodes: { shop: ["n1"] },
      status: s,
    });
    const p = planEnvironment(d, o, T0);
    expect(p.actions.map((a) => a.type)).toContain("demote");
    expect(equals(EnvironmentStatusSchema, s, before)).toBe(true);
  });

  it("the comparison tells every changed field, and agrees with a deep comparison", () => {
    const s = stored();
    expect(sameStatus(workingCopy(s), s)).toBe(true);
    const changes: ((c: ReturnType<typeof stored>) => void)[] = [
      (c) => (c.current = R1),
      (c) => (c.inFlight!.message = "x"),
      (c) => (c.inFlight!.verifications[0]!.passes = 1),
      (c) => c.candidates.push(create(CandidateSchema, { release: R1 })),
      (c) => c.history.unshift(record(R2, O.FAILED)),
      (c) => (c.pin = { $typeName: "skipper.v1.EnvironmentPin", release: R1, pinned: actor("a", T0) }),
      (c) => (c.hold = actor("a", T0)),
      (c) => c.decisions.push({ $typeName: "skipper.v1.ReleaseDecision", releaseId: R1.id, versionId: "", kind: 1, by: actor("a", T0) }),
      (c) => (c.message = "n"),
      (c) => (c.evaluatedAt = timestampFromMs(T0)),
      (c) => (c.nextEvaluationAt = timestampFromMs(T0)),
    ];
    for (const change of changes) {
      const c = workingCopy(s);
      change(c);
      expect(sameStatus(c, s)).toBe(false);
      expect(equals(EnvironmentStatusSchema, c, s)).toBe(false);
    }
  });
});
