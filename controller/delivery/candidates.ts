// Step 3 of the plan: the releases that may enter, newest first, at most 5.
// - With upstreams: only releases the first upstream verified (its VERIFIED history records,
//   over this environment's artifacts), newer than current; what an upstream did not verify is
//   never a candidate (kargo#7032). They move as the upstream verified them.
// - Without: releases formed from the versions newer than current. An environment's release is the
//   union of its groups (the delivery's `releases`) and its ungrouped artifacts; a candidate changes
//   one of them at a time, a group whole: VERSION match takes a version string every artifact of
//   the group has, COMMIT the same metadata.commit; an incomplete group is no candidate. With
//   nothing promoted yet, the one candidate is the newest of each.
// A version marked bad is never a candidate again (NOT_BAD still guards a pin).
import { create } from "@bufbuild/protobuf";
import {
  type EnvironmentStatus,
  type Release,
  ReleaseMatch,
  ReleaseOutcome,
  type ReleaseVersion,
  ReleaseVersionSchema,
} from "../../gen/skipper/v1/delivery_pb.js";
import type { EnvDesired, EnvObserved, VersionView } from "./plan-types.js";
import { makeRelease } from "./release-id.js";
import { MAX_CANDIDATES } from "./status-records.js";

interface Unit {
  artifacts: string[];
  match: ReleaseMatch;
}
interface Option {
  versions: VersionView[];
  createdAtMs: number;
}

const rv = (v: VersionView): ReleaseVersion =>
  create(ReleaseVersionSchema, { artifactId: v.artifactId, version: v.version, digest: v.digest, reference: v.reference });

/** The environment's groups (over its artifacts) and each ungrouped artifact alone. */
function unitsOf(d: EnvDesired): Unit[] {
  const mine = d.env.spec.artifactIds;
  const units: Unit[] = [];
  const grouped = new Set<string>();
  for (const g of d.delivery.releases) {
    const artifacts = g.artifactIds.filter((a) => mine.includes(a));
    for (const a of artifacts) grouped.add(a);
    if (artifacts.length > 0) units.push({ artifacts, match: g.match });
  }
  for (const a of mine) if (!grouped.has(a)) units.push({ artifacts: [a], match: ReleaseMatch.VERSION });
  return units;
}

/** A unit's complete version sets newer than `current`'s, newest first (at most 5). */
function optionsOf(u: Unit, o: EnvObserved, current: Release | undefined): Option[] {
  const [lead, ...rest] = u.artifacts;
  const leads = o.versions.get(lead!) ?? [];
  const cur = current?.versions.find((v) => v.artifactId === lead);
  const options: Option[] = [];
  for (const v of leads) {
    if (cur && v.digest === cur.digest) break;
    if (v.markedBad) continue;
    const set = [v];
    for (const a of rest) {
      const list = o.versions.get(a) ?? [];
      const m =
        u.match === ReleaseMatch.COMMIT
          ? v.metadata.commit && list.find((x) => !x.markedBad && x.metadata.commit === v.metadata.commit)
          : list.find((x) => !x.markedBad && x.version === v.version);
      if (!m) break;
      set.push(m);
    }
    if (set.length < u.artifacts.length) continue;
    options.push({ versions: set, createdAtMs: Math.max(...set.map((x) => x.createdAtMs)) });
    if (options.length >= MAX_CANDIDATES) break;
  }
  return options;
}

function fromVersions(d: EnvDesired, o: EnvObserved, current: Release | undefined): Release[] {
  const units = unitsOf(d);
  if (!current) {
    const newest = units.flatMap((u) => optionsOf(u, o, undefined)[0]?.versions ?? []);
    return newest.length > 0 ? [makeRelease(newest.map(rv))] : [];
  }
  const base = current.versions.filter((v) => d.env.spec.artifactIds.includes(v.artifactId));
  // Each unit's newest option first (version order), units by creation; then each unit's next.
  // Ordered before any release is made, so only the 5 kept are hashed.
  const all: { unit: Unit; opt: Option; rank: number }[] = [];
  for (const unit of units) optionsOf(unit, o, current).forEach((opt, rank) => all.push({ unit, opt, rank }));
  all.sort((a, b) => a.rank - b.rank || b.opt.createdAtMs - a.opt.createdAtMs || (a.opt.versions[0]!.id < b.opt.versions[0]!.id ? -1 : 1));
  return all.slice(0, MAX_CANDIDATES).map(({ unit, opt }) => {
    const kept = base.filter((v) => !unit.artifacts.includes(v.artifactId));
    return makeRelease([...kept, ...opt.versions.map(rv)]);
  });
}

/** The position of a version in its artifact's newest-first list (Infinity: not listed). */
function rank(o: EnvObserved, v: ReleaseVersion): number {
  const i = o.versions.get(v.artifactId)?.findIndex((x) => x.digest === v.digest) ?? -1;
  return i < 0 ? Number.POSITIVE_INFINITY : i;
}

/** True when a version of `r` is marked bad: it is never a candidate again. */
function hasBad(o: EnvObserved, r: Release): boolean {
  return r.versions.some((v) => o.versions.get(v.artifactId)?.find((x) => x.digest === v.digest)?.markedBad !== undefined);
}

/** True when no version of `r` is older than current's version of the same artifact. */
function notOlder(o: EnvObserved, r: Release, current: Release | undefined): boolean {
  for (const v of r.versions) {
    const c = current?.versions.find((x) => x.artifactId === v.artifactId);
    if (c && c.digest !== v.digest && rank(o, v) > rank(o, c)) return false;
  }
  return true;
}

function fromUpstream(d: EnvDesired, o: EnvObserved, current: Release | undefined): Release[] {
  const u = o.upstream.get(d.env.spec.dependsOn[0]!.environmentId);
  const mine = d.env.spec.artifactIds;
  const out: Release[] = [];
  for (const h of u?.history ?? []) {
    // Cheap tests first: most records upstream are older than what runs here.
    if (h.outcome !== ReleaseOutcome.VERIFIED || !h.release || h.release.id === current?.id) continue;
    if (!notOlder(o, h.release, current)) continue;
    const versions = h.release.versions.filter((v) => mine.includes(v.artifactId));
    if (versions.length === 0) continue;
    const r = versions.length === h.release.versions.length ? h.release : makeRelease(versions);
    if (r.id === current?.id || out.some((x) => x.id === r.id) || hasBad(o, r)) continue;
    out.push(r);
    if (out.length >= MAX_CANDIDATES) break;
  }
  return out;
}

/** Step 3: the candidates for the environment as its status is now, newest first. */
export function formCandidates(d: EnvDesired, o: EnvObserved, st: EnvironmentStatus): Release[] {
  return d.env.spec.dependsOn.length > 0 ? fromUpstream(d, o, st.current) : fromVersions(d, o, st.current);
}
