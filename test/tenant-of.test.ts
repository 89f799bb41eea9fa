// Whose each kind of resource is (common/resource-kinds.ts), over every kind of the contract:
// a kind whose spec names a tenant belongs to it; the others are the fleet's. A new kind is
// covered without anyone writing a case for it.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ResourceSchema, ResourceSpecSchema } from "../gen/skipper/v1/resource_pb.js";
import { tenantOf } from "../common/resource-kinds.js";

const kinds = ResourceSpecSchema.oneofs.find((o) => o.name === "kind")!.fields;

describe("tenantOf", () => {
  it.each(kinds.map((f) => [f.name, f] as const))("%s: its spec's tenant_id, or nobody's when the spec names none", (_name, field) => {
    const spec = field.message!;
    const namesTenant = spec.fields.some((f) => f.name === "tenant_id");
    const value = create(spec, namesTenant ? ({ tenantId: "t1" } as never) : {});
    const r = create(ResourceSchema, {
      id: "x1",
      resourceType: field.name,
      desiredState: { kind: { case: field.localName, value } as never },
    });
    const expected = field.name === "tenant" ? "x1" : namesTenant ? "t1" : undefined;
    expect(tenantOf(r)).toBe(expected);
  });
});
