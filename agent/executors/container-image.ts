// The container executor's image steps: have the image by the digest the spec pins, pulling only
// when the engine does not have it by that digest already, and refuse one whose digest differs
// before any container is touched (DIGEST_MISMATCH, never retried: the same bytes come back).
//
// A digest matches an image when it is the image's id or one of its repo digests of the
// reference's own repository (repo@sha256:…, as `docker pull` records it). Without a digest in the
// spec the tag is pulled (a tag present on the host may have moved) and the digest it resolves to
// is the one pinned.
import { parseImageReference } from "../../common/image-reference.js";
import { inspectImage, pullImage, type ImageFacts } from "../engine/container-engine.js";

/** The image a container will run, as verified. */
export interface VerifiedImage {
  /** The engine's image id: what the container is created from, so it runs exactly these bytes. */
  id: string;
  /** The digest it was verified by (the spec's), or the one it resolved to. */
  digest: string;
  pulled: boolean;
}

export type ImageOutcome =
  | { ok: true; image: VerifiedImage }
  | { ok: false; code: "DIGEST_MISMATCH" | "IMAGE_PULL_FAILED" | "IMAGE_NOT_FOUND"; message: string; retriable: boolean };

/** Docker's short form of a repository: docker.io/library/x and library/x are x. */
export function shortRepository(name: string): string {
  return name.replace(/^(docker\.io|index\.docker\.io|registry-1\.docker\.io)\//, "").replace(/^library\//, "");
}

/** The repository part of a reference (registry and path), in Docker's short form. */
export function repositoryOf(image: string): string {
  const r = parseImageReference(image);
  if (!r.ok) return image;
  return shortRepository(r.reference.domain ? `${r.reference.domain}/${r.reference.path}` : r.reference.path);
}

/** Whether `image` is known by `digest`: its id, or a repo digest of `repository`. */
export function matchesDigest(image: ImageFacts, repository: string, digest: string): boolean {
  if (image.id === digest) return true;
  return image.repoDigests.some((d) => {
    const at = d.lastIndexOf("@");
    return d.slice(at + 1) === digest && shortRepository(d.slice(0, at)) === repository;
  });
}

/** The digest to pin an image resolved from a tag by: its repo digest of `repository`, else its id. */
export function digestOf(image: ImageFacts, repository: string): string {
  const own = image.repoDigests.find((d) => shortRepository(d.slice(0, d.lastIndexOf("@"))) === repository);
  return own ? own.slice(own.lastIndexOf("@") + 1) : image.id;
}

/**
 * Has `image` on the engine as `want` pins it (`want` empty: as its tag resolves now), pulling
 * only when needed. Throws EngineError when the engine does not answer.
 */
export async function verifyImage(image: string, want: string, signal: AbortSignal): Promise<ImageOutcome> {
  const repository = repositoryOf(image);
  if (want !== "") {
    const local = (await inspectImage(`${repository}@${want}`)) ?? (await inspectImage(want));
    if (local && matchesDigest(local, repository, want)) return { ok: true, image: { id: local.id, digest: want, pulled: false } };
  }
  const pull = await pullImage(image, signal);
  const pulled = pull.exitCode === 0;
  const found = await inspectImage(image);
  if (!found) {
    const why = lastLine(pull.stderr) || `exit ${pull.exitCode}`;
    const missing = /manifest unknown|not found|does not exist|repository .* not found/i.test(why);
    return {
      ok: false,
      code: missing ? "IMAGE_NOT_FOUND" : "IMAGE_PULL_FAILED",
      message: `could not pull ${image}: ${why}`,
      retriable: !missing,
    };
  }
  if (want === "") return { ok: true, image: { id: found.id, digest: digestOf(found, repository), pulled } };
  if (matchesDigest(found, repository, want)) return { ok: true, image: { id: found.id, digest: want, pulled } };
  const has = `${digestOf(found, repository)} (image ${found.id})`;
  if (!pulled)
    // The engine's copy of the tag is another image, but the registry was not asked: it may serve the pinned one.
    return {
      ok: false,
      code: "IMAGE_PULL_FAILED",
      message: `could not pull ${image} (${lastLine(pull.stderr)}), and the engine has it as ${has}, not the pinned ${want}; nothing was changed`,
      retriable: true,
    };
  return {
    ok: false,
    code: "DIGEST_MISMATCH",
    message: `${image}: pinned ${want}, the registry has ${has}; nothing was changed`,
    retriable: false,
  };
}

function lastLine(s: string): string {
  return s.trim().split("\n").pop() ?? "";
}
