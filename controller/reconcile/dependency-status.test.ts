// dependencyStates alone: a resource limit shared by tenants keeps the other tenants' entries as
// they are stored when written, and lists this tenant's services only once they are converged.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ConvergenceStatus, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { dependencyStates } from "./dependency-status.js";

const limits = (applied: string[]): Resource =>
  create(ResourceSchema, {
    id: "small",
    resourceType: "resource_limits",
    desiredState: { kind: { case: "resourceLimits", value: { cpus: 0.5 } } },
    currentState: { kind: { case: "resourceLimits", value: { appliedToServiceIds: applied } } },
  });
const service = (id: string): Resource =>
  create(ResourceSchema, {
    id,
    resourceType: "service",
    desiredState: { kind: { case: "service", value: { tenantId: "t1", image: "x", resourceLimitsId: "small" } } },
  });
const appliedTo = (r: ReturnType<typeof dependencyStates>[number], cur: Resource) => {
  const k = r.statusOf(cur).kind;
  return k.case === "resourceLimits" ? k.value.appliedToServiceIds : undefined;
};

describe("dependencyStates", () => {
  it("merges a shared limit with what other tenants' passes stored, and lists only converged services", () => {
    const [state] = dependencyStates({
      tenantId: "t1",
      services: [service("t1-web"), service("t1-db")],
      placed: new Map([
        ["t1-web", { nodeIds: ["n1"] }],
        ["t1-db", { nodeIds: ["n2"] }],
      ]),
      verdicts: new Map([
        ["n1", { status: ConvergenceStatus.CONVERGED, message: "" }],
        ["n2", { status: ConvergenceStatus.ORDER_IN_FLIGHT, message: "" }],
      ]),
      networks: new Map(),
      volumes: new Map(),
      limits: new Map([["small", limits(["other-tenant-svc", "t1-db"])]]),
    });
    expect(state!.applied).toBe(false);
    expect(appliedTo(state!, limits(["other-tenant-svc", "t1-db"]))).toEqual(["other-tenant-svc", "t1-web"]);
    // Another tenant's pass wrote meanwhile: its entry is kept, as stored now.
    expect(appliedTo(state!, limits(["late-svc", "t1-db"]))).toEqual(["late-svc", "t1-web"]);
  });
});
