// The shared manifest parser's errors: each names its source, the field to blame and the problem
// apart, so the CLI prints its message and the Git sync records "file#n: field: problem".
import { describe, expect, it } from "vitest";
import { isManifestError, isManifestFile, type ManifestError, manifestErrorLine, parseManifestDocuments } from "./manifest-documents.js";

const errorOf = (text: string, source = "apps/m.yaml"): ManifestError => {
  try {
    parseManifestDocuments([{ source, text }]);
  } catch (e) {
    if (isManifestError(e)) return e;
    throw e;
  }
  throw new Error("parsed");
};

describe("manifest documents", () => {
  it("a bad document's error names its source (with #n among several), its field and the problem", () => {
    const e = errorOf("resource_type: tenant\nid: a\ndesired_state: {}\n---\nresource_type: tenant\nid: b\ndesired_sate: {}\n");
    expect([e.source, e.field, e.problem]).toEqual([
      "apps/m.yaml#2",
      "desired_sate",
      'tenant/b: key "desired_sate" is unknown (did you mean desired_state?)',
    ]);
    expect(manifestErrorLine(e)).toBe('apps/m.yaml#2: desired_sate: tenant/b: key "desired_sate" is unknown (did you mean desired_state?)');
    const seed = errorOf("resource_type: tenant\nid: x\ndesired_state: {compose: {tenant_id: y}}\n");
    expect(seed.field).toBe("resource.desired_state.tenant.compose.tenant_id");
    expect(seed.message).toMatch(/^apps\/m\.yaml: .*\(field resource\.desired_state\.tenant\.compose\.tenant_id\)$/);
    expect(manifestErrorLine(errorOf("resource_type: deployment\nid: x\ndesired_state: {}\n"))).toBe(
      "apps/m.yaml: resource_type: a deployment is written by the controller and cannot be applied",
    );
    const yaml = errorOf("a: [1\n");
    expect([yaml.field, manifestErrorLine(yaml)]).toEqual([undefined, expect.stringMatching(/^apps\/m\.yaml: not valid YAML: /)]);
  });

  it("manifest files are .yaml, .yml and .json, in any case", () => {
    expect(["a.yaml", "b.YML", "c.json", "d.txt", ".yaml", "yaml"].map(isManifestFile)).toEqual([true, true, true, false, false, false]);
  });
});
