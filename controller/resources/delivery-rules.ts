// Field rules of the delivery kinds (artifact, delivery, environment, git_source), checked before
// anything is written; controller/resources/kinds.ts files them by kind. Shape only: whether the
// resources they name exist (and whether environments form a cycle) is checked with the store.
import { durationMs } from "@bufbuild/protobuf/wkt";
import type { Duration } from "@bufbuild/protobuf/wkt";
import semver from "semver";
import type {
  ArtifactSpec,
  DeliverySpec,
  EnvironmentSpec,
  GitSourceSpec,
  ProcessArchiveSource,
  VersionWatch,
} from "../../gen/skipper/v1/delivery_pb.js";
import { MODULE_NAME, urlProblem } from "../../common/action-rules.js";
import { VERSION_PLACEHOLDER } from "../domain/process-archive.js";
import { parseImageReference } from "../../common/image-reference.js";
import { invalid } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { parseLabelSelector } from "../domain/label-selector.js";
import { checkWindows } from "./rollout-rules.js";
import { checkCommandSpec, checkProbe } from "./safety-rules.js";

/** An artifact id: 1-40 of [a-z0-9-], so that "<artifact>.<version>" splits at its first '.'. */
export const ARTIFACT_ID = /^[a-z0-9][a-z0-9-]{0,39}$/;
/** A version as a registry tag spells it, short enough that "<artifact>.<version>" is an id. */
export const VERSION = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,86}$/;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;
const MAX_PATTERN = 200;
const NESTED_QUANTIFIER = /\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)\s*[+*{]/;
const MAX_LIST = 64;
const MIN_INTERVAL_MS = 1000;
/** A Git source's interval: each sync fetches from its server, so not more often than this. */
const MIN_GIT_INTERVAL_MS = 10_000;
const MAX_INTERVAL_MS = 24 * 3600 * 1000;
const MAX_BAKE_MS = 30 * 24 * 3600 * 1000;
const MAX_PASSES = 100;

/** An artifact: its id, one image repository without tag or digest, and a watch that parses. */
export function checkArtifactSpec(a: ArtifactSpec, id: string): void {
  const at = "desired_state.artifact";
  if (!ARTIFACT_ID.test(id)) fail("resource.id", "of an artifact must be 1-40 characters of [a-z0-9-], starting with a letter or digit");
  checkId(a.tenantId, `${at}.tenant_id`);
  if (a.source.case === "processArchive") {
    checkProcessArchive(a.source.value, `${at}.process_archive`);
    if (a.watch) fail(`${at}.watch`, "is for image repositories: a process archive's versions are posted (CreateArtifactVersion)");
    if (a.keepVersions > 10_000) fail(`${at}.keep_versions`, "must be at most 10000 (0 means 200)");
    return;
  }
  if (a.source.case !== "image") fail(`${at}.image`, "must be set (or process_archive): where versions come from");
  const repo = a.source.value.repository;
  const parsed = parseImageReference(repo);
  if (!parsed.ok) fail(`${at}.image.repository`, `${JSON.stringify(repo.slice(0, 256))} ${parsed.problem}`);
  if (parsed.reference.tag !== "" || parsed.reference.digest !== "")
    fail(`${at}.image.repository`, "must name a repository only: versions are its tags (no ':tag' and no '@digest')");
  if (a.source.value.registrySecretId !== "") checkId(a.source.value.registrySecretId, `${at}.image.registry_secret_id`);
  if (a.watch) checkWatch(a.watch, `${at}.watch`);
  if (a.keepVersions > 10_000) fail(`${at}.keep_versions`, "must be at most 10000 (0 means 200)");
}

/** A process archive's module and URL template ("{version}" in an http(s) URL or an absolute path). */
function checkProcessArchive(p: ProcessArchiveSource, at: string): void {
  if (!MODULE_NAME.test(p.module)) fail(`${at}.module`, `must be 1-63 characters of [a-z0-9-] (${MODULE_NAME.source})`);
  const t = p.urlTemplate;
  if (!t.includes(VERSION_PLACEHOLDER)) fail(`${at}.url_template`, `must contain ${VERSION_PLACEHOLDER}, which each version replaces`);
  if (t.length > 1024) fail(`${at}.url_template`, "must be at most 1024 characters");
  const sample = t.replaceAll(VERSION_PLACEHOLDER, "1.0.0");
  const problem = sample.startsWith("/")
    ? sample.split("/").includes("..") || sample.includes("\0")
      ? "must not contain '..'"
      : undefined
    : urlProblem(sample);
  if (problem) fail(`${at}.url_template`, `${problem} (an http(s) URL or an absolute path on the nodes)`);
}

function checkWatch(w: VersionWatch, at: string): void {
  interval(w.interval, `${at}.interval`);
  if (w.filter.case === "semverRange" && semver.validRange(w.filter.value) === null)
    fail(`${at}.semver_range`, `${JSON.stringify(w.filter.value.slice(0, 100))} is not a semver range (e.g. "^1.0.0")`);
  if (w.filter.case === "tagPattern") {
    if (w.filter.value.length > MAX_PATTERN) fail(`${at}.tag_pattern`, `must be at most ${MAX_PATTERN} characters`);
    // A quantified group that itself repeats ("(a+)+", "(\\d*)*") can take exponential time on a
    // crafted tag; Node has no regex timeout, so such a pattern is refused.
    if (NESTED_QUANTIFIER.test(w.filter.value))
      fail(`${at}.tag_pattern`, "must not repeat a group that repeats itself (such as (a+)+): it can take exponential time");
    try {
      new RegExp(w.filter.value);
    } catch (e) {
      fail(`${at}.tag_pattern`, `is not a regular expression: ${(e as Error).message}`);
    }
  }
  if (w.initialVersions > 1000) fail(`${at}.initial_versions`, "must be at most 1000 (0 means 10)");
}

/** A delivery: release groups named once, each of two or more artifacts, an artifact in one group. */
export function checkDeliverySpec(d: DeliverySpec): void {
  const at = "desired_state.delivery";
  if (d.releases.length > MAX_LIST) fail(`${at}.releases`, `may hold at most ${MAX_LIST} groups`);
  const names = new Set<string>();
  const grouped = new Map<string, string>();
  d.releases.forEach((g, i) => {
    const here = `${at}.releases[${i}]`;
    if (!NAME.test(g.name)) fail(`${here}.name`, "must be 1-63 characters of [A-Za-z0-9._-], starting with a letter or digit");
    if (names.has(g.name)) fail(`${here}.name`, `repeats the name of an earlier group ("${g.name}")`);
    names.add(g.name);
    if (g.artifactIds.length < 2) fail(`${here}.artifact_ids`, "must name at least two artifacts (one alone moves by itself)");
    g.artifactIds.forEach((a, j) => {
      checkId(a, `${here}.artifact_ids[${j}]`);
      const other = grouped.get(a);
      if (other !== undefined) fail(`${here}.artifact_ids[${j}]`, `names ${a}, already in group "${other}"`);
      grouped.set(a, g.name);
    });
  });
}

/** An environment: its delivery, tenants (listed or selected), artifacts, dependencies and checks. */
export function checkEnvironmentSpec(e: EnvironmentSpec, id: string): void {
  const at = "desired_state.environment";
  checkId(e.deliveryId, `${at}.delivery_id`);
  list(e.tenantIds, `${at}.tenant_ids`);
  if (e.tenantSelector !== "") parseLabelSelector(e.tenantSelector, `${at}.tenant_selector`);
  if (e.tenantIds.length === 0 && e.tenantSelector === "")
    fail(`${at}.tenant_ids`, "or tenant_selector must say which tenants follow the environment");
  list(e.artifactIds, `${at}.artifact_ids`);
  if (e.artifactIds.length === 0) fail(`${at}.artifact_ids`, "must name at least one artifact to promote");
  const upstream = new Set<string>();
  e.dependsOn.forEach((d, i) => {
    const here = `${at}.depends_on[${i}]`;
    checkId(d.environmentId, `${here}.environment_id`);
    if (d.environmentId === id) fail(`${here}.environment_id`, "names the environment itself");
    if (upstream.has(d.environmentId)) fail(`${here}.environment_id`, `repeats ${d.environmentId}`);
    upstream.add(d.environmentId);
    const bake = d.bakeTime ? durationMs(d.bakeTime) : 0;
    if (bake < 0 || bake > MAX_BAKE_MS) fail(`${here}.bake_time`, "must be 0 to 30 days");
  });
  checkWindows(e.allowedTimes, `${at}.allowed_times`);
  if (e.verifications.length > 16) fail(`${at}.verifications`, "may hold at most 16 checks");
  const names = new Set<string>();
  e.verifications.forEach((v, i) => {
    const here = `${at}.verifications[${i}]`;
    if (!NAME.test(v.name)) fail(`${here}.name`, "must be 1-63 characters of [A-Za-z0-9._-], starting with a letter or digit");
    if (names.has(v.name)) fail(`${here}.name`, `repeats the name of an earlier check ("${v.name}")`);
    names.add(v.name);
    if (v.kind.case === "probe") checkProbe(v.kind.value, `${here}.probe`);
    else if (v.kind.case === "command") checkCommandSpec(v.kind.value, `${here}.command`);
    else fail(here, "needs a probe or a command");
    if (v.requiredPasses > MAX_PASSES) fail(`${here}.required_passes`, `must be at most ${MAX_PASSES} (0 means 1)`);
    if (v.maxFailures > MAX_PASSES) fail(`${here}.max_failures`, `must be at most ${MAX_PASSES} (0 means 1)`);
    interval(v.interval, `${here}.interval`);
    if (v.tenantId !== "") {
      checkId(v.tenantId, `${here}.tenant_id`);
      if (e.tenantSelector === "" && !e.tenantIds.includes(v.tenantId))
        fail(`${here}.tenant_id`, `names ${v.tenantId}, which is not one of the environment's tenant_ids`);
    }
  });
}

const GIT_URL = /^(?:https:\/\/|ssh:\/\/|file:\/\/\/|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:)/;
const BRANCH = /^(?!-)(?!.*\.\.)(?!.*\/\/)(?!.*@\{)[A-Za-z0-9._/-]{1,200}(?<![./])$/;

/** A Git source: a URL of an allowed scheme, a branch name, a relative directory, an interval. */
export function checkGitSourceSpec(g: GitSourceSpec): void {
  const at = "desired_state.git_source";
  if (g.url.length > 2048 || !GIT_URL.test(g.url) || /[\s\0]/.test(g.url))
    fail(`${at}.url`, "must be an https://, ssh://, user@host:path or file:/// URL, without spaces");
  if (g.branch !== "" && (!BRANCH.test(g.branch) || g.branch.endsWith(".lock")))
    fail(`${at}.branch`, "must be a branch name (letters, digits, '.', '_', '-', '/'), not starting with '-'");
  if (g.path !== "" && (g.path.startsWith("/") || g.path.split("/").some((p) => p === ".." || p === "") || /[\0\\]/.test(g.path)))
    fail(`${at}.path`, "must be a relative directory of the repository, without '..' or empty parts");
  interval(g.interval, `${at}.interval`, MIN_GIT_INTERVAL_MS);
  if (g.webhookSecret && (g.webhookSecret.secretId !== "" || g.webhookSecret.key !== "")) {
    checkId(g.webhookSecret.secretId, `${at}.webhook_secret.secret_id`);
    if (!/^[A-Za-z0-9_.-]{1,63}$/.test(g.webhookSecret.key)) fail(`${at}.webhook_secret.key`, "must name a value of the secret");
  }
}

function list(ids: readonly string[], at: string): void {
  if (ids.length > MAX_LIST) fail(at, `may hold at most ${MAX_LIST} ids`);
  const seen = new Set<string>();
  ids.forEach((id, i) => {
    checkId(id, `${at}[${i}]`);
    if (seen.has(id)) fail(`${at}[${i}]`, `repeats ${id}`);
    seen.add(id);
  });
}

function interval(d: Duration | undefined, at: string, minMs = MIN_INTERVAL_MS): void {
  if (!d) return;
  const ms = durationMs(d);
  if (ms < minMs || ms > MAX_INTERVAL_MS) fail(at, `must be ${minMs / 1000}s to 24h (unset: the default)`);
}

function fail(field: string, problem: string): never {
  throw invalid(`${field} ${problem}`, { field });
}
