// A release's id: "rel-" and the first 20 hex digits of sha256 over the canonical JSON of its
// [artifact_id, digest] pairs sorted by artifact id. The same set of versions gives the same id on
// every controller and after restarts, whatever order the versions came in, so approvals and pins
// can name a release before it exists anywhere.
import { create, isMessage } from "@bufbuild/protobuf";
import { type Release, ReleaseSchema, type ReleaseVersion, ReleaseVersionSchema } from "../../gen/skipper/v1/delivery_pb.js";
import { sha256 } from "../base/canonical-json.js";

const byArtifact = (a: { artifactId: string }, b: { artifactId: string }) =>
  a.artifactId < b.artifactId ? -1 : a.artifactId > b.artifactId ? 1 : 0;

/** The canonical JSON of the sorted pairs (an array of string arrays: JSON.stringify gives the same text). */
export function releaseKey(versions: readonly { artifactId: string; digest: string }[]): string {
  return JSON.stringify([...versions].sort(byArtifact).map((v) => [v.artifactId, v.digest]));
}

/** The id of the release made of `versions` (order does not matter). */
export function releaseId(versions: readonly { artifactId: string; digest: string }[]): string {
  return `rel-${sha256(releaseKey(versions)).slice(0, 20)}`;
}

/** A release of `versions`, sorted by artifact id, with its id. */
export function makeRelease(versions: readonly ReleaseVersion[]): Release {
  const sorted = [...versions].sort(byArtifact).map((v) => (isMessage(v, ReleaseVersionSchema) ? v : create(ReleaseVersionSchema, v)));
  return create(ReleaseSchema, { id: releaseId(sorted), versions: sorted });
}

/** The 12 hex digits of a release id that name it in verification order ids. */
export function releaseShort(id: string): string {
  return id.startsWith("rel-") ? id.slice(4, 16) : id.slice(0, 12);
}
