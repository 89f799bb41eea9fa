// Which of a repository's tags a version watch records, newest first (pure).
//
//   semver_range  tags that parse as a version (a leading "v" allowed: "v1.3.0" is 1.3.0, and the
//                 version keeps the tag's spelling) and satisfy the range; pre-releases only with
//                 include_prerelease ("^1.0.0" skips 1.2.0-rc.1 otherwise). Newest = semver order.
//   tag_pattern   tags the regular expression matches WHOLE ("1\.\d+" does not take "1.2-x");
//                 include_prerelease does not apply. Semver tags first (newest first), then the
//                 others in the registry's listing order (a tag list says nothing of age).
//   no filter     every tag that parses as a version (pre-releases only with include_prerelease),
//                 newest first, then every other tag in listing order. A moving tag ("latest") is
//                 recorded once, with the digest it had then: to follow releases, set a filter.
//
// Only tags that can be versions are considered (controller/resources/delivery-rules.ts VERSION:
// at most 87 characters, no ".."): a longer tag is skipped, never truncated. Equal versions
// ("1.3.0" and "v1.3.0") keep their listing order.
import semver from "semver";
import type { VersionWatch } from "../../gen/skipper/v1/delivery_pb.js";
import { VERSION } from "../resources/delivery-rules.js";

/** How many matching tags a first watch records when the watch does not say. */
export const DEFAULT_INITIAL_VERSIONS = 10;

/** The semver version a tag spells ("1.2.0", "v1.2.0"), or undefined. */
export function semverOfTag(tag: string): string | undefined {
  const bare = tag.startsWith("v") ? tag.slice(1) : tag;
  // semver.valid itself forgives a leading "v" or "=": one "v" only, then a digit.
  return /^\d/.test(bare) ? (semver.valid(bare) ?? undefined) : undefined;
}

/** True when a tag can be a version's name. */
export function tagCanBeVersion(tag: string): boolean {
  return VERSION.test(tag) && !tag.includes("..");
}

/** The tags `watch` takes from `tags` (a registry's listing), newest first. */
export function matchingTags(tags: readonly string[], watch: VersionWatch | undefined): string[] {
  const includePrerelease = watch?.includePrerelease ?? false;
  const filter = watch?.filter ?? { case: undefined };
  const candidates = [...new Set(tags)].filter(tagCanBeVersion);
  const versioned: { tag: string; version: string; index: number }[] = [];
  const others: string[] = [];
  const pattern = filter.case === "tagPattern" ? wholeTag(filter.value) : undefined;
  for (const [index, tag] of candidates.entries()) {
    const version = semverOfTag(tag);
    if (filter.case === "semverRange") {
      if (version && semver.satisfies(version, filter.value, { includePrerelease })) versioned.push({ tag, version, index });
    } else if (pattern) {
      if (!pattern.test(tag)) continue;
      if (version) versioned.push({ tag, version, index });
      else others.push(tag);
    } else if (!version) others.push(tag);
    else if (includePrerelease || semver.prerelease(version) === null) versioned.push({ tag, version, index });
  }
  versioned.sort((a, b) => semver.rcompare(a.version, b.version) || a.index - b.index);
  return [...versioned.map((v) => v.tag), ...others];
}

/** How many tags a first watch records (initial_versions, default 10). */
export function initialVersionCount(watch: VersionWatch | undefined): number {
  return watch?.initialVersions || DEFAULT_INITIAL_VERSIONS;
}

// A pattern anchored at both ends; a pattern that does not compile (the spec's rules refuse it)
// matches nothing rather than everything.
function wholeTag(pattern: string): RegExp {
  try {
    return new RegExp(`^(?:${pattern})$`);
  } catch {
    return /(?!)/;
  }
}
