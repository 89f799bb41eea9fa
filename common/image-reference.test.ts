// The image reference grammar (image-reference.ts) against the cases Docker's own parser decides.
import { describe, expect, it } from "vitest";
import { imageReferenceProblem, parseImageReference } from "./image-reference.js";

const HEX64 = "0123456789abcdef".repeat(4);

describe("parseImageReference", () => {
  it("reads the parts of valid references", () => {
    const cases: [string, { domain: string; path: string; tag: string; digest: string }][] = [
      ["busybox", { domain: "", path: "busybox", tag: "", digest: "" }],
      ["busybox:1.36", { domain: "", path: "busybox", tag: "1.36", digest: "" }],
      ["localhost:5000/team/app:v1", { domain: "localhost:5000", path: "team/app", tag: "v1", digest: "" }],
      [`ghcr.io/a/b@sha256:${HEX64}`, { domain: "ghcr.io", path: "a/b", tag: "", digest: `sha256:${HEX64}` }],
      ["docker.io/library/nginx:latest", { domain: "docker.io", path: "library/nginx", tag: "latest", digest: "" }],
      [
        `registry.example.com:443/x/y:z@sha256:${HEX64}`,
        { domain: "registry.example.com:443", path: "x/y", tag: "z", digest: `sha256:${HEX64}` },
      ],
      ["library/nginx", { domain: "", path: "library/nginx", tag: "", digest: "" }],
      ["my_team/my__app-x--y.z:V1_beta.2-rc", { domain: "", path: "my_team/my__app-x--y.z", tag: "V1_beta.2-rc", digest: "" }],
      ["localhost/app", { domain: "localhost", path: "app", tag: "", digest: "" }],
      ["[::1]:5000/app:1", { domain: "[::1]:5000", path: "app", tag: "1", digest: "" }],
      // Docker reads an uppercase first part as a registry host.
      ["MyRegistry/app", { domain: "MyRegistry", path: "app", tag: "", digest: "" }],
      // A name alone with a port-like tag is a tag.
      ["localhost:5000", { domain: "", path: "localhost", tag: "5000", digest: "" }],
      [`app:${"t".repeat(128)}`, { domain: "", path: "app", tag: "t".repeat(128), digest: "" }],
    ];
    for (const [text, want] of cases) expect(parseImageReference(text), text).toEqual({ ok: true, reference: want });
  });

  it("refuses invalid references, saying what is wrong", () => {
    const cases: [string, RegExp][] = [
      ["", /is empty/],
      ["Busybox", /uppercase repository name/],
      ["docker.io/Library/nginx", /uppercase repository name/],
      ["Busybox::Stable!", /invalid tag/],
      ["::", /empty tag/],
      ["busybox:", /empty tag/],
      [":latest", /no repository name/],
      ["busy box", /whitespace/],
      [" busybox", /whitespace/],
      ["busybox:latest\n", /whitespace/],
      [`app:${"t".repeat(129)}`, /invalid tag/],
      ["app:.hidden", /invalid tag/],
      ["app:-x", /invalid tag/],
      ["app_/x", /invalid repository name component/],
      ["-app", /invalid repository name component/],
      ["a/b//c", /empty path component/],
      ["a.b/", /no repository path/],
      ["ex-.com/app", /invalid registry host/],
      ["host:port/app", /invalid registry port/],
      ["[zz]:5000/app", /invalid IPv6/],
      ["app@sha256:abc", /invalid digest/],
      ["app@sha256", /invalid digest/],
      [`app@sha256:${HEX64}00`, /66 hex digits, not 64/],
      [`app@sha256:${HEX64.toUpperCase()}`, /uppercase hex/],
      [`app@1sha:${HEX64}`, /invalid digest/],
      [HEX64, /image id/],
      [`${"a".repeat(256)}`, /longer than 255/],
    ];
    for (const [text, problem] of cases) {
      const r = parseImageReference(text);
      expect(r.ok, JSON.stringify(text)).toBe(false);
      expect(imageReferenceProblem(text), JSON.stringify(text)).toMatch(problem);
    }
  });

  it("accepts digests of other algorithms by the grammar alone", () => {
    expect(imageReferenceProblem(`app@sha512:${HEX64}${HEX64}`)).toBeUndefined();
    expect(imageReferenceProblem(`app@multihash+base58:${"A".repeat(40)}`)).toBeUndefined();
  });
});
