// Who owns a module: checkModulesUnclaimed against a store holding tenants and process resources.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { Page, ResourceFilter } from "../store/store.js";
import { checkModulesUnclaimed } from "./process-rules.js";

function processResource(id: string, module: string, selector: Record<string, string>): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: "process",
    desiredState: {
      kind: {
        case: "process",
        value: {
          spec: {
            module,
            version: "1.0",
            source: { kind: { case: "path", value: "/srv/a.tgz" } },
            sha256: "a".repeat(64),
            argv: ["bin/a"],
          },
          nodeSelector: selector,
        },
      },
    },
  });
}

// The part of a store the check reads: one page per resource type.
function storeOf(resources: Resource[]) {
  return {
    scanResources: async (f: ResourceFilter): Promise<Page<Resource>> => ({
      items: resources.filter((r) => r.resourceType === f.resourceType),
      nextPageToken: "",
    }),
  };
}

describe("module ownership", () => {
  const web = processResource("web", "web", { role: "edge" });

  it("a second process resource naming a module another one declares is refused, naming the owner", async () => {
    const err = await checkModulesUnclaimed(storeOf([web]), processResource("web-canary", "web", { tier: "canary" })).catch((e) => e);
    expect(err).toMatchObject({ code: "INVALID_REQUEST", details: { reason: "MODULE_CLAIMED_BY_PROCESS", module_owner: "process/web" } });
    expect(err.message).toMatch(/declared by process web/);
  });

  it("a process resource's own module (an update of it) and other modules are fine", async () => {
    await expect(checkModulesUnclaimed(storeOf([web]), processResource("web", "web", { role: "db" }))).resolves.toBeUndefined();
    await expect(checkModulesUnclaimed(storeOf([web]), processResource("api", "api", { role: "edge" }))).resolves.toBeUndefined();
  });
});
