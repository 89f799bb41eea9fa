// Release ids and the order of versions.
import { describe, expect, it } from "vitest";
import { T0, ver } from "../../test/helpers/delivery-world.js";
import { canonicalJson, sha256 } from "../base/canonical-json.js";
import { makeRelease, releaseId, releaseKey } from "./release-id.js";
import { newestFirst } from "./version-order.js";

describe("release ids", () => {
  const web = { artifactId: "web", version: "1.0.0", digest: `sha256:${"a".repeat(64)}`, reference: "r/web" };
  const db = { artifactId: "db", version: "2.0.0", digest: `sha256:${"b".repeat(64)}`, reference: "r/db" };

  it("do not depend on the order of the versions", () => {
    expect(releaseId([web, db])).toBe(releaseId([db, web]));
    expect(releaseId([web, db])).toMatch(/^rel-[0-9a-f]{20}$/);
  });

  it("change with a digest and ignore the version's spelling", () => {
    expect(releaseId([web])).not.toBe(releaseId([{ ...web, digest: `sha256:${"c".repeat(64)}` }]));
    expect(releaseId([web])).toBe(releaseId([{ ...web, version: "v1.0.0" }] as (typeof web)[]));
  });

  it("hash the canonical JSON of the sorted [artifact, digest] pairs", () => {
    const pairs = [
      [db.artifactId, db.digest],
      [web.artifactId, web.digest],
    ];
    expect(releaseKey([web, db])).toBe(canonicalJson(pairs));
    expect(releaseId([web, db])).toBe(`rel-${sha256(canonicalJson(pairs)).slice(0, 20)}`);
  });

  it("a release lists its versions by artifact id", () => {
    const r = makeRelease([web, db] as never);
    expect(r.versions.map((v) => v.artifactId)).toEqual(["db", "web"]);
    expect(r.id).toBe(releaseId([web, db]));
  });
});

describe("version order", () => {
  it("is semver descending, a leading v allowed, keeping the tag's spelling", () => {
    const vs = [ver("w", "1.2.0", T0), ver("w", "v1.10.0", T0 - 5), ver("w", "1.2.0-rc.1", T0 + 9), ver("w", "1.9.3", T0 + 1)];
    expect(newestFirst(vs).map((v) => v.version)).toEqual(["v1.10.0", "1.9.3", "1.2.0", "1.2.0-rc.1"]);
  });

  it("falls back to creation time, then id, when a tag is not a version", () => {
    const vs = [ver("w", "main-a", T0), ver("w", "main-c", T0 + 2), ver("w", "main-b", T0 + 2), ver("w", "1.0.0", T0 + 1)];
    expect(newestFirst(vs).map((v) => v.version)).toEqual(["main-b", "main-c", "1.0.0", "main-a"]);
  });
});
