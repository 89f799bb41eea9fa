// explain as a tree: orders under their node, claims and results under their order, the verdict
// last, and the step in the way marked (in colour only when asked for).
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ConvergenceStatus } from "../gen/skipper/v1/resource_pb.js";
import { ExplainResourceResponseSchema, ExplainStepKind } from "../gen/skipper/v1/resource_service_pb.js";
import { explainTree } from "./explain-tree.js";

const failed = create(ExplainResourceResponseSchema, {
  resource: { id: "shop", resourceType: "tenant" },
  convergence: { status: ConvergenceStatus.ORDER_FAILED, workOrderId: "wo-2", nodeId: "host-1" },
  steps: [
    { kind: ExplainStepKind.DESIRED, summary: "desired state at revision 4" },
    { kind: ExplainStepKind.WORK_ORDER, summary: "deploy_service order for node host-1", nodeId: "host-1", workOrderId: "wo-2" },
    { kind: ExplainStepKind.CLAIM, summary: "claimed by node host-1", nodeId: "host-1", workOrderId: "wo-2" },
    { kind: ExplainStepKind.RESULT, summary: "COMPOSE_INVALID: bad file", nodeId: "host-1", workOrderId: "wo-2", code: "COMPOSE_INVALID" },
    { kind: ExplainStepKind.OBSERVED, summary: "node host-1 runs spec abc", nodeId: "host-1", code: "ONLINE" },
    { kind: ExplainStepKind.VERDICT, summary: "ORDER_FAILED: the order failed", code: "ORDER_FAILED" },
  ],
});

describe("explain tree", () => {
  it("hangs orders under their node and marks the failed result and the verdict as blocking", () => {
    expect(explainTree(failed, { color: false })).toEqual([
      "tenant/shop  ORDER_FAILED",
      "├─ desired: desired state at revision 4",
      "├─ node host-1",
      "│  ├─ order: deploy_service order for node host-1 [wo-2]",
      "│  │  ├─ claim: claimed by node host-1",
      "│  │  └─ result: COMPOSE_INVALID: bad file  <- blocking",
      "│  └─ observed: node host-1 runs spec abc",
      "└─ verdict: ORDER_FAILED: the order failed  <- blocking",
    ]);
  });

  it("marks nothing when converged, and colours only when asked", () => {
    const ok = create(ExplainResourceResponseSchema, {
      resource: failed.resource,
      steps: failed.steps,
      convergence: { status: ConvergenceStatus.CONVERGED },
    });
    expect(explainTree(ok, { color: false }).join("\n")).not.toContain("blocking");
    const coloured = explainTree(failed, { color: true });
    expect(coloured.at(-1)).toBe("└─ \u001b[31mverdict: ORDER_FAILED: the order failed  <- blocking\u001b[39m");
  });
});
