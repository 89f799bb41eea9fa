// Where a repository's registry answers (pure): "127.0.0.1:5000/shop/web" -> http://127.0.0.1:5000
// and path "shop/web". Loopback hosts (127.0.0.0/8, [::1], localhost: Docker's default insecure
// set) are spoken to over http, every other host over https. Docker Hub, named "docker.io" (or not
// named at all), answers at registry-1.docker.io, its one-part names under "library/".
import { parseImageReference } from "../../common/image-reference.js";
import { RegistryError } from "./registry-error.js";

export interface RegistryEndpoint {
  /** The registry as the repository names it, for messages ("docker.io", "127.0.0.1:5000"). */
  registry: string;
  /** The repository as given, for messages. */
  repository: string;
  /** "http://127.0.0.1:5000" or "https://registry-1.docker.io": where requests go. */
  origin: string;
  /** The repository path in /v2/<path>/...: "shop/web", "library/nginx". */
  path: string;
}

const DOCKER_HUB = new Set(["", "docker.io", "index.docker.io", "registry-1.docker.io"]);

/** The endpoint of a repository (no tag, no digest), or an INVALID_REPOSITORY error. */
export function registryEndpoint(repository: string): RegistryEndpoint {
  const parsed = parseImageReference(repository);
  const invalid = (why: string) => new RegistryError("INVALID_REPOSITORY", { registry: "?", repository }, why);
  if (!parsed.ok) throw invalid(`the repository ${parsed.problem}`);
  const { domain, path, tag, digest } = parsed.reference;
  if (tag || digest) throw invalid("a repository to watch names no tag and no digest");
  if (DOCKER_HUB.has(domain)) {
    return {
      registry: "docker.io",
      repository,
      origin: "https://registry-1.docker.io",
      path: path.includes("/") ? path : `library/${path}`,
    };
  }
  const scheme = isLoopbackHost(hostOf(domain)) ? "http" : "https";
  return { registry: domain, repository, origin: `${scheme}://${domain}`, path };
}

/** True for localhost, 127.0.0.0/8 and ::1 (a URL's hostname, brackets allowed). */
export function isLoopbackHost(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/^\[(.*)\]$/, "$1");
  if (h === "localhost" || h === "::1" || h === "0:0:0:0:0:0:0:1") return true;
  const v4 = /^127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(h);
  return !!v4 && v4.slice(1).every((octet) => Number(octet) <= 255);
}

// "host:port" or "[v6]:port" -> the host part.
function hostOf(domain: string): string {
  if (domain.startsWith("[")) return domain.slice(0, domain.indexOf("]") + 1);
  const colon = domain.indexOf(":");
  return colon < 0 ? domain : domain.slice(0, colon);
}
