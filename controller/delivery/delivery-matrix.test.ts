// The delivery matrix as GetDeliveryStatus computes it: environments upstream first, releases
// newest first, each cell's state and reason from the stored statuses alone.
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import {
  ConstraintKind,
  ConstraintPhase,
  EnvironmentSpecSchema,
  EnvironmentStatusSchema,
  type Release,
  ReleaseOutcome,
} from "../../gen/skipper/v1/delivery_pb.js";
import { CellState } from "../../gen/skipper/v1/delivery_service_pb.js";
import { deliveryMatrix, type MatrixEnvironment } from "./delivery-matrix.js";

const rel = (n: number): Release =>
  ({ id: `rel-${String(n).repeat(20)}`, versions: [{ artifactId: "web", version: `1.${n}.0` }] }) as Release;
const at = (s: number) => timestampFromMs(1_800_000_000_000 + s * 1000);
const env = (id: string, dependsOn: string[], status: object): MatrixEnvironment => ({
  id,
  spec: create(EnvironmentSpecSchema, { deliveryId: "shop", dependsOn: dependsOn.map((environmentId) => ({ environmentId })) }),
  status: create(EnvironmentStatusSchema, status),
});

describe("deliveryMatrix", () => {
  it("orders environments upstream first and releases newest first; each cell says where the release stands", () => {
    const [r1, r2, r3] = [rel(1), rel(2), rel(3)];
    const m = deliveryMatrix(
      "shop",
      [
        env("prod", ["staging"], {
          current: r1,
          history: [{ release: r1, outcome: ReleaseOutcome.VERIFIED, promotedAt: at(1) }],
          candidates: [
            {
              release: r3,
              firstSeen: at(3),
              constraints: [{ kind: ConstraintKind.APPROVAL, phase: ConstraintPhase.PENDING, reason: "waits for approval" }],
            },
          ],
          message: "waits for approval",
        }),
        env("test", [], {
          current: r3,
          history: [
            { release: r3, outcome: ReleaseOutcome.VERIFIED, promotedAt: at(3) },
            { release: r2, outcome: ReleaseOutcome.VERIFIED, promotedAt: at(2) },
            { release: r1, outcome: ReleaseOutcome.VERIFIED, promotedAt: at(1) },
          ],
        }),
        env("staging", ["test"], {
          current: r3,
          pin: { release: r3, pinned: { actor: "admin", reason: "hold" } },
          history: [
            { release: r3, outcome: ReleaseOutcome.VERIFIED, promotedAt: at(3) },
            { release: r1, outcome: ReleaseOutcome.FAILED, reason: "smoke failed", promotedAt: at(1) },
          ],
        }),
      ],
      new Set(["web.1.2.0"]),
    );
    expect(m.environmentIds).toEqual(["test", "staging", "prod"]);
    expect(m.environmentMessages).toEqual(["not evaluated yet", "not evaluated yet", "waits for approval"]);
    const states = m.rows.map((r) => [r.release!.versions[0]!.version, ...r.cells.map((c) => CellState[c.state])]);
    expect(states).toEqual([
      ["1.3.0", "CURRENT", "PINNED", "WAITING"],
      ["1.2.0", "BAD", "BAD", "BAD"],
      ["1.1.0", "RAN_BEFORE", "FAILED", "CURRENT"],
    ]);
    expect(m.rows[0]!.cells[2]!.reason).toBe("waits for approval");
    expect(m.rows[2]!.cells[1]!.reason).toBe("smoke failed");
  });

  it("a release that never ran in an environment where a newer one did is SKIPPED, not NOT_YET", () => {
    const [r1, r2] = [rel(1), rel(2)];
    const m = deliveryMatrix(
      "shop",
      [
        env("test", [], {
          current: r2,
          history: [
            { release: r2, promotedAt: at(2) },
            { release: r1, promotedAt: at(1) },
          ],
        }),
        env("prod", ["test"], { current: r2, history: [{ release: r2, promotedAt: at(2) }] }),
        env("dr", ["prod"], {}),
      ],
      new Set(),
    );
    expect(m.rows.map((r) => r.cells.map((c) => CellState[c.state]))).toEqual([
      ["CURRENT", "CURRENT", "NOT_YET"],
      ["RAN_BEFORE", "SKIPPED", "NOT_YET"],
    ]);
  });
});
