// What an apply would do to one resource, from the manifest and what is stored: create, update
// with the fields that differ (hidden values named, not shown), or unchanged.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MetadataSchema, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { renderPlan, stepFor } from "./apply.js";
import { parseManifests } from "./manifests.js";
import { renderChanges } from "./desired-diff.js";

const manifest = (doc: object) => parseManifests([{ source: "m.json", text: JSON.stringify(doc) }])[0]!;
const stored = (init: MessageInitShape<typeof ResourceSchema>) => {
  const r = create(ResourceSchema, init);
  r.metadata = { ...(r.metadata ?? create(MetadataSchema)), resourceVersion: "7" };
  return r;
};

const TENANT = {
  resource_type: "tenant",
  id: "shop",
  desired_state: {
    display_name: "Shop",
    compose: { compose_file: "services:\n  web:\n    image: nginx:1\n", env: { GREETING: "hi", DB_PASSWORD: "s3cret" } },
  },
  metadata: { labels: { env: "dev" } },
};

describe("an apply's plan", () => {
  it("creates what is not stored, and leaves what is stored as the manifest says", () => {
    const m = manifest(TENANT);
    expect(stepFor(m, undefined).action).toBe("create");
    const same = stored({
      id: "shop",
      resourceType: "tenant",
      desiredState: m.resource.desiredState,
      metadata: { labels: { env: "dev" } },
    });
    expect(stepFor(m, same)).toMatchObject({ action: "unchanged", changes: [] });
  });

  it("names each changed field; a secret-shaped value is named, never shown; a compose file gets a line diff", () => {
    const m = manifest(TENANT);
    const before = manifest({
      ...TENANT,
      desired_state: {
        display_name: "Old",
        compose: { compose_file: "services:\n  web:\n    image: nginx:0\n", env: { GREETING: "hi", DB_PASSWORD: "old", GONE: "x" } },
      },
    });
    const s = stepFor(
      m,
      stored({ id: "shop", resourceType: "tenant", desiredState: before.resource.desiredState, metadata: { labels: { env: "prod" } } }),
    );
    expect(s.action).toBe("update");
    const lines = renderChanges(s.changes);
    expect(lines).toEqual([
      "    ~ desired_state.tenant.compose.compose_file:",
      "        @@ -2,2 +2,2 @@",
      "           web:",
      "        -    image: nginx:0",
      "        +    image: nginx:1",
      "    ~ desired_state.tenant.compose.env.DB_PASSWORD: (a hidden value changed)",
      '    - desired_state.tenant.compose.env.GONE: "x"',
      '    ~ desired_state.tenant.display_name: "Old" -> "Shop"',
      '    ~ labels.env: "prod" -> "dev"',
    ]);
    expect(lines.join("\n")).not.toMatch(/s3cret|old"/);
  });

  it("labels the manifest does not give are left as stored", () => {
    const { metadata: _, ...bare } = TENANT;
    const m = manifest(bare);
    const s = stepFor(
      m,
      stored({ id: "shop", resourceType: "tenant", desiredState: m.resource.desiredState, metadata: { labels: { other: "x" } } }),
    );
    expect(s.action).toBe("unchanged");
  });

  it("a secret's values are write-only: new names are additions, known ones are sent for the controller to compare", () => {
    const m = manifest({
      resource_type: "secret",
      id: "db",
      desired_state: { secret: { tenant_id: "shop", values: { password: "p", user: "u" } } },
    });
    const held = (names: string[]) =>
      stored({
        id: "db",
        resourceType: "secret",
        desiredState: {
          kind: { case: "secret", value: { tenantId: "shop", entries: names.map((name) => ({ name, version: 1n, fingerprint: "f" })) } },
        },
      });
    const partly = stepFor(m, held(["password"]));
    expect(partly.action).toBe("update");
    expect(renderChanges(partly.changes)).toEqual(['    + desired_state.secret.values.user: "(hidden)"']);
    const all = stepFor(m, held(["password", "user"]));
    expect(all.action).toBe("send-values");
    expect(renderPlan([all])).toEqual(["secret/db: send values (write-only: the controller keeps those it already holds)"]);
  });
});
