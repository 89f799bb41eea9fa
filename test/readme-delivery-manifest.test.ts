// The README's delivery manifest ("Releases through environments") is what a reader copies into
// `skipper apply -f`: it parses as the CLI parses manifests, every document passes its kind's
// field rules, and it is written in an order whose references resolve (artifacts before the
// services naming them, the delivery before its environments, upstream environments first).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseManifestDocuments } from "../common/manifest-documents.js";
import { checkSpecFields, referencesOf } from "../controller/resources/kinds.js";

const README = readFileSync(join(import.meta.dirname, "..", "README.md"), "utf8");

function deliveryBlock(): string {
  const section = README.slice(README.indexOf("## Releases through environments"));
  const m = /```yaml\n([\s\S]*?)```/.exec(section);
  if (!m) throw new Error("no yaml block in the README's section Releases through environments");
  return m[1]!;
}

function processBlock(): string {
  const section = README.slice(README.indexOf("### Process archives"));
  const m = /```yaml\n([\s\S]*?)```/.exec(section);
  if (!m) throw new Error("no yaml block in the README's section Process archives");
  return m[1]!;
}

describe("the README's delivery manifest", () => {
  it("of a process archive: an artifact and a tenant whose process names it, each passing its field rules", () => {
    const docs = parseManifestDocuments([{ source: "README.md", text: processBlock() }]);
    expect(docs.map((d) => `${d.resource.resourceType}/${d.resource.id}`).sort()).toEqual(["artifact/edge-agent", "tenant/edge"]);
    for (const d of docs) checkSpecFields(d.resource.desiredState!, d.resource.id);
    // The tenant is written first (the artifact names it), and names nothing it must wait for.
    expect(docs.map((d) => d.resource.resourceType)).toEqual(["tenant", "artifact"]);
    expect(referencesOf(docs[0]!.resource)).toEqual([]);
  });

  it("parses, passes every kind's field rules, and names only what comes before it (or tenants)", () => {
    const docs = parseManifestDocuments([{ source: "README.md", text: deliveryBlock() }]);
    expect(docs.map((d) => `${d.resource.resourceType}/${d.resource.id}`).sort()).toEqual(
      ["artifact/web", "service/shop-prod-web", "delivery/shop", "environment/staging", "environment/production"].sort(),
    );
    const written = new Set<string>();
    for (const d of docs) {
      checkSpecFields(d.resource.desiredState!, d.resource.id);
      for (const ref of referencesOf(d.resource)) {
        if (ref.type === "tenant") continue;
        // staging's upstream "test" is the reader's own environment, outside the example.
        if (ref.type === "environment" && ref.id === "test") continue;
        expect(written, `${d.resource.id} names ${ref.type}/${ref.id}`).toContain(`${ref.type}/${ref.id}`);
      }
      written.add(`${d.resource.resourceType}/${d.resource.id}`);
    }
  });
});
