import { describe, expect, it } from "vitest";
import { canonicalResource } from "./seed-documents.js";

describe("seed documents' desired state", () => {
  it("a flat tenant spec with a field named like a kind (rollout) is flat; a wrapped one stays wrapped", () => {
    const flat = canonicalResource(
      { resource_type: "tenant", id: "t", desired_state: { rollout: { require_approval: true } } },
      undefined,
    ) as { desired_state: unknown };
    expect(flat.desired_state).toEqual({ tenant: { rollout: { require_approval: true } } });
    const wrapped = canonicalResource(
      { resource_type: "tenant", id: "t", desired_state: { tenant: { display_name: "T" } } },
      undefined,
    ) as {
      desired_state: unknown;
    };
    expect(wrapped.desired_state).toEqual({ tenant: { display_name: "T" } });
    // Another kind under a tenant stays as written, for the kind check to refuse by name.
    const other = canonicalResource({ resource_type: "tenant", id: "t", desired_state: { service: { image: "x" } } }, undefined) as {
      desired_state: unknown;
    };
    expect(other.desired_state).toEqual({ service: { image: "x" } });
  });
});
