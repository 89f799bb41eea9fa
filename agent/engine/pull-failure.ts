// A compose run that failed because an image could not be pulled, read from Compose's output (v1
// prints "Pulling web (repo:tag)..." before the daemon's error; v2 names the image in the error).
// The result names the image, so a user reads "image registry.example/app:1.2 (service web) could
// not be pulled" rather than the registry's DNS error alone, and says whether trying again can
// help: an image the registry says does not exist (or is not ours to pull) will not appear by
// itself; an unreachable registry may come back.
import { FailureReason } from "../../gen/skipper/v1/failure_cause_pb.js";

export interface PullFailure {
  /** IMAGE_NOT_FOUND (the registry answered: no such image, or access denied) or IMAGE_PULL_FAILED. */
  code: "IMAGE_NOT_FOUND" | "IMAGE_PULL_FAILED";
  image: string;
  service: string;
  reason: string;
}

const NOT_FOUND =
  /manifest unknown|manifest for \S+ not found|not found: manifest|pull access denied|repository does not exist|requested access to the resource is denied|no such image/i;
const PULLING = /^Pulling (\S+) \((\S+)\)\.\.\.$/;
// Where the daemon's errors name the image.
const NAMED = [/pull access denied for ([^\s,]+)/i, /failed to resolve reference "([^"]+)"/i, /manifest for (\S+) not found/i];
const PULL_WORDS = /pull|manifest|registry|repository|resolve reference|\/v2\//i;

/** The pull failure in `stderr` of a compose run over `images` (service -> image), if it was one. */
export function pullFailure(stderr: string, images: ReadonlyMap<string, string>): PullFailure | undefined {
  const lines = stderr
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "");
  if (!lines.some((l) => PULL_WORDS.test(l))) return undefined;
  let service = "";
  let image = "";
  for (const l of lines) {
    const m = PULLING.exec(l);
    if (m) [service, image] = [m[1]!, m[2]!];
  }
  const reason = lines.filter((l) => !PULLING.test(l)).at(-1) ?? "";
  if (image === "") {
    // v2: find an image of the project named in the error.
    for (const [svc, img] of images) {
      if (img !== "" && stderr.includes(img)) [service, image] = [svc, img];
    }
    for (const re of NAMED) image ||= re.exec(stderr)?.[1] ?? "";
  }
  if (image === "" && !NOT_FOUND.test(stderr)) return undefined;
  return { code: NOT_FOUND.test(stderr) ? "IMAGE_NOT_FOUND" : "IMAGE_PULL_FAILED", image: image || "an image", service, reason };
}

/**
 * The one-line message for a pull failure: the image, its registry and what the registry said.
 * Credentials are mentioned only when the registry asked for them (`reason` UNAUTHORIZED): whether
 * the project had one for that registry, the first thing to check with a private one. An unknown
 * host, a missing image or a rate limit is not a login problem and is not called one.
 */
export function pullMessage(f: PullFailure, loggedIn: readonly string[] = [], reason?: FailureReason): string {
  const who = f.service ? ` (service ${f.service})` : "";
  const registry = f.image === "an image" ? "" : registryOf(f.image);
  const where = registry ? ` from registry ${registry}` : "";
  const login =
    registry && reason === FailureReason.UNAUTHORIZED
      ? loggedIn.includes(registry)
        ? ` (logged in with the tenant's credential for ${registry}, which the registry refused)`
        : " (the registry asked for credentials and there is no credential for it: a registry secret of the tenant provides one)"
      : "";
  const what = f.image === "an image" ? "an image" : `image ${f.image}`;
  return `${what}${who} could not be pulled${where}${login}: ${f.reason}`;
}

/** The registry an image reference names: its first component when that is a host, else docker.io. */
export function registryOf(image: string): string {
  const slash = image.indexOf("/");
  if (slash < 0) return "docker.io";
  const first = image.slice(0, slash);
  return first.includes(".") || first.includes(":") || first === "localhost" ? first : "docker.io";
}
