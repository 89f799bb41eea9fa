import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { type VersionWatch, VersionWatchSchema } from "../../gen/skipper/v1/delivery_pb.js";
import { initialVersionCount, matchingTags, semverOfTag } from "./tag-filter.js";

const range = (value: string, includePrerelease = false): VersionWatch =>
  create(VersionWatchSchema, { filter: { case: "semverRange", value }, includePrerelease });
const pattern = (value: string, includePrerelease = false): VersionWatch =>
  create(VersionWatchSchema, { filter: { case: "tagPattern", value }, includePrerelease });
const none = (includePrerelease = false): VersionWatch => create(VersionWatchSchema, { includePrerelease });

// The five tags, in the order distribution lists them (lexical).
const FIVE = ["1.0.0", "1.1.0", "1.2.0-rc.1", "latest", "v1.3.0"];

describe("matchingTags", () => {
  const cases: [string, readonly string[], VersionWatch | undefined, string[]][] = [
    ["a caret range skips the pre-release, newest first, 'v' kept", FIVE, range("^1.0.0"), ["v1.3.0", "1.1.0", "1.0.0"]],
    ["with include_prerelease the rc counts", FIVE, range("^1.0.0", true), ["v1.3.0", "1.2.0-rc.1", "1.1.0", "1.0.0"]],
    ["a bounded range", FIVE, range(">=1.1 <1.3"), ["1.1.0"]],
    ["semver order, not lexical: 1.10.0 after 1.9.0", ["1.10.0", "1.2.0", "1.9.0"], range("*"), ["1.10.0", "1.9.0", "1.2.0"]],
    ["a range matching nothing", FIVE, range("^2"), []],
    ["an invalid range matches nothing", FIVE, range("not a range"), []],
    ["partial versions and 'V' are not versions", ["1.0", "V1.2.3", "1", "1.2.3"], range("*"), ["1.2.3"]],
    ["a pattern must match the whole tag", ["1.2", "1.2-debug", "x1.2", "1.20"], pattern("1\\.\\d"), ["1.2"]],
    [
      "a pattern: semver tags newest first, then others in listing order",
      ["main-b", "1.0.0", "main-a", "2.0.0"],
      pattern("main-.*|\\d.*"),
      ["2.0.0", "1.0.0", "main-b", "main-a"],
    ],
    ["a pattern takes pre-releases without include_prerelease", FIVE, pattern("1\\.2\\..*"), ["1.2.0-rc.1"]],
    ["an alternation is anchored as a whole", ["ab", "abc", "c"], pattern("ab|c"), ["ab", "c"]],
    ["an invalid pattern matches nothing", FIVE, pattern("(("), []],
    ["no filter: releases newest first, then the others", FIVE, none(), ["v1.3.0", "1.1.0", "1.0.0", "latest"]],
    ["no filter with include_prerelease", FIVE, none(true), ["v1.3.0", "1.2.0-rc.1", "1.1.0", "1.0.0", "latest"]],
    ["no watch at all is no filter", ["b", "1.0.0", "a"], undefined, ["1.0.0", "b", "a"]],
    ["equal versions keep listing order", ["v1.0.0", "1.0.0"], range("*"), ["v1.0.0", "1.0.0"]],
    ["a repeated tag counts once", ["1.0.0", "1.0.0"], range("*"), ["1.0.0"]],
    ["tags that cannot be versions are skipped", [`1.0.0-${"a".repeat(90)}`, "a..b", ".x", "ok"], none(), ["ok"]],
    ["no tags", [], range("*"), []],
  ];
  it.each(cases)("%s", (_name, tags, watch, want) => {
    expect(matchingTags(tags, watch)).toEqual(want);
  });
});

describe("semverOfTag", () => {
  it.each([
    ["1.2.3", "1.2.3"],
    ["v1.2.3", "1.2.3"],
    ["v1.2.3-rc.1", "1.2.3-rc.1"],
    ["vv1.2.3", undefined],
    ["1.2", undefined],
    ["latest", undefined],
  ])("%s -> %s", (tag, want) => {
    expect(semverOfTag(tag)).toBe(want);
  });
});

describe("initialVersionCount", () => {
  it("is 10 unless the watch says", () => {
    expect(initialVersionCount(undefined)).toBe(10);
    expect(initialVersionCount(none())).toBe(10);
    expect(initialVersionCount(create(VersionWatchSchema, { initialVersions: 3 }))).toBe(3);
  });
});
