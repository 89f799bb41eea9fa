// Manifests: files, directories and stdin, YAML and JSON, one or many documents; mapped to the
// canonical form as the REST routes map them; refused with their source named before anything
// is sent.
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseManifests, readSources } from "./manifests.js";

const parse = (text: string, source = "m.yaml") => parseManifests([{ source, text }]);

describe("manifests", () => {
  it("orders documents so tenants and secrets come before the services that name them", () => {
    const ms = parse(`
resource_type: service
id: web
desired_state: {tenant_id: shop, image: "nginx:1"}
---
resource_type: secret
id: db
desired_state: {secret: {tenant_id: shop, values: {password: x}}}
---
resource_type: tenant
id: shop
desired_state: {display_name: Shop}
`);
    expect(ms.map((m) => `${m.type}/${m.id}`)).toEqual(["tenant/shop", "secret/db", "service/web"]);
    expect(ms.map((m) => m.source)).toEqual(["m.yaml#3", "m.yaml#2", "m.yaml#1"]);
  });

  it("wraps a flat desired state under its kind and turns free-form metadata into annotations, as the REST routes do", () => {
    const [m] = parse(
      JSON.stringify({
        resource_type: "tenant",
        id: "shop",
        desired_state: { display_name: "Shop", compose: { tenant_id: "shop", env: { A: "1" } } },
        metadata: { labels: { env: "dev" }, owner: "ops" },
      }),
      "t.json",
    );
    expect(m!.resource.desiredState?.kind.case).toBe("tenant");
    expect(m!.resource.desiredState?.kind.value).toMatchObject({ displayName: "Shop", compose: { env: { A: "1" } } });
    expect(m!.resource.metadata?.labels).toEqual({ env: "dev" });
    expect(m!.resource.metadata?.annotations).toEqual({ owner: "ops" });
    expect(m!.labelsGiven && m!.annotationsGiven).toBe(true);
  });

  it("ignores what the controller sets, so `get -o yaml` output applies again", () => {
    const [m] = parse(`
id: web
resource_type: service
schema_version: v1
desired_state: {service: {tenant_id: shop, image: "nginx:1"}}
current_state: {service: {node_id: host-1}}
metadata: {resource_version: "12", request_id: abc}
convergence: {status: CONVERGENCE_STATUS_CONVERGED}
created_at: 2026-01-01T00:00:00Z
`);
    expect(m!.resource.currentState).toBeUndefined();
    expect(m!.resource.metadata?.resourceVersion).toBe("");
    expect(m!.labelsGiven).toBe(false);
  });

  it("a JSON array holds several documents; empty YAML documents are skipped", () => {
    const arr = JSON.stringify([
      { resource_type: "tenant", id: "a", desired_state: {} },
      { resource_type: "tenant", id: "b", desired_state: {} },
    ]);
    expect(parse(arr, "list.json").map((m) => m.id)).toEqual(["a", "b"]);
    expect(parse("---\n---\nresource_type: tenant\nid: c\ndesired_state: {}\n---\n").map((m) => m.id)).toEqual(["c"]);
  });

  it("refuses a document with its source and what is wrong", () => {
    expect(() => parse("resource_type: tenant\ndesired_state: {}\n")).toThrow("m.yaml: id is missing");
    expect(() => parse("resource_type: pod\nid: x\ndesired_state: {}\n")).toThrow('m.yaml: unknown resource_type "pod"');
    expect(() => parse("resource_type: rollout\nid: x\ndesired_state: {}\n")).toThrow("written by the controller and cannot be applied");
    expect(() => parse("resource_type: service\nid: x\ndesired_state: {imag: a}\n")).toThrow(
      /m\.yaml: not a valid service: .*"imag" is unknown/,
    );
    expect(() => parse("resource_type: service\nid: x\n")).toThrow("service/x has no desired_state");
    // A misspelt key is named, as REST names it, rather than reported as a missing desired_state.
    expect(() => parse("resource_type: service\nid: x\ndesired_sate: {image: a}\n")).toThrow(
      'm.yaml: service/x: key "desired_sate" is unknown (did you mean desired_state?)',
    );
    expect(() => parse("resource_type: tenant\nid: x\ndesired_state: {}\nlabels: {a: b}\n")).toThrow('key "labels" is unknown');
    expect(() => parse("resource_type: tenant\nid: x\ndesired_state: {compose: {tenant_id: y}}\n")).toThrow(
      /names tenant "y", not this tenant .*field resource\.desired_state\.tenant\.compose\.tenant_id/,
    );
    expect(() => parse("a: [1\n")).toThrow(/m\.yaml is not valid YAML/);
    expect(() => parse("{", "x.json")).toThrow(/x\.json is not valid JSON/);
    const twice = "resource_type: tenant\nid: a\ndesired_state: {}\n";
    expect(() =>
      parseManifests([
        { source: "1.yaml", text: twice },
        { source: "2.yaml", text: twice },
      ]),
    ).toThrow("2.yaml: tenant/a is also in 1.yaml");
  });

  it("reads a directory's .yaml, .yml and .json files in name order, and stdin for -", async () => {
    const dir = await mkdtemp(join(tmpdir(), "skipper-manifests-"));
    await writeFile(join(dir, "b.yml"), "x");
    await writeFile(join(dir, "a.json"), "y");
    await writeFile(join(dir, "notes.txt"), "z");
    const sources = await readSources([dir, "-"], async () => "from stdin");
    expect(sources.map((s) => s.source)).toEqual([join(dir, "a.json"), join(dir, "b.yml"), "stdin"]);
    await expect(readSources([join(dir, "none.yaml")], async () => "")).rejects.toThrow(/cannot read .*none\.yaml: ENOENT/);
    await expect(readSources([], async () => "")).rejects.toThrow("no manifest given");
  });
});
