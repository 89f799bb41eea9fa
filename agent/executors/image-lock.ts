// The image lock, read without running anything: which image references a compose file makes a
// node run (interpolated the way Compose would), the repository a reference names, and the digest
// an image is known by for that reference. deploy-images.ts runs the lock step with these.
import { parse } from "yaml";

/** One image reference the project runs, and whether Compose may pull it (pull_policy). */
export interface ImageUse {
  reference: string;
  /** The services that run it. */
  services: string[];
  /**
   * "pull": a tag the node pulls unless the lock names a digest it has; "missing": pulled only
   * when absent (pull_policy missing / if_not_present); "never": left to Compose (never, build).
   */
  policy: "pull" | "missing" | "never";
}

/** An image as the engine describes it: its id and the repo digests it was pulled by. */
export interface LocalImage {
  id: string;
  repoDigests: string[];
}

/**
 * The image references the services `started` of `composeFile` run, with `vars` substituted
 * (${VAR}, ${VAR:-default}, ${VAR-default}, $VAR). References pinned by digest (`repo@sha256:…`)
 * are left out: their content is fixed, and the deploy checks them after `up`. A file this
 * parser cannot read gives none (Compose then judges it).
 */
export function imageUses(composeFile: string, started: readonly string[], vars: Readonly<Record<string, string>>): ImageUse[] {
  let doc: unknown;
  try {
    doc = parse(composeFile);
  } catch {
    return [];
  }
  const services = (doc as { services?: unknown } | null)?.services;
  if (typeof services !== "object" || services === null) return [];
  const byRef = new Map<string, ImageUse>();
  const wanted = new Set(started);
  for (const [name, raw] of Object.entries(services as Record<string, unknown>)) {
    if (!wanted.has(name) || typeof raw !== "object" || raw === null) continue;
    const svc = raw as { image?: unknown; pull_policy?: unknown };
    if (typeof svc.image !== "string") continue;
    const reference = interpolate(svc.image, vars).trim();
    if (reference === "" || reference.includes("@") || /\s|\$/.test(reference)) continue;
    const policy = policyOf(svc.pull_policy);
    const use = byRef.get(reference);
    if (use) {
      use.services.push(name);
      if (rank(policy) < rank(use.policy)) use.policy = policy;
    } else byRef.set(reference, { reference, services: [name], policy });
  }
  return [...byRef.values()].sort((a, b) => (a.reference < b.reference ? -1 : 1));
}

function policyOf(p: unknown): ImageUse["policy"] {
  if (p === "never" || p === "build") return "never";
  if (p === "missing" || p === "if_not_present") return "missing";
  return "pull";
}

// The most cautious of two services' policies for one reference wins.
function rank(p: ImageUse["policy"]): number {
  return p === "never" ? 0 : p === "missing" ? 1 : 2;
}

/** `text` with Compose's variable forms replaced from `vars` (unset: the default, else empty). */
export function interpolate(text: string, vars: Readonly<Record<string, string>>): string {
  return text.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (m, braced, op, def, bare) => {
    if (m === "$$") return "$";
    const value = vars[(braced ?? bare) as string];
    if (op === ":-") return value === undefined || value === "" ? (def as string) : value;
    if (op === "-") return value === undefined ? (def as string) : value;
    return value ?? "";
  });
}

/** The repository `reference` names: without its tag or digest ("reg:5000/web:1" -> "reg:5000/web"). */
export function repositoryOf(reference: string): string {
  const at = reference.indexOf("@");
  const ref = at < 0 ? reference : reference.slice(0, at);
  const slash = ref.lastIndexOf("/");
  const colon = ref.lastIndexOf(":");
  return colon > slash ? ref.slice(0, colon) : ref;
}

/** How the engine names a repository in repo digests (Docker Hub's library images go bare). */
function engineName(repository: string): string {
  return repository.replace(/^(?:docker\.io|index\.docker\.io)\/(?:library\/)?/, "");
}

/** The registry digest `image` was pulled by for `reference`'s repository, if it came from one. */
export function registryDigest(reference: string, image: LocalImage): string | undefined {
  const repo = engineName(repositoryOf(reference));
  for (const d of image.repoDigests) {
    const at = d.lastIndexOf("@");
    if (at > 0 && engineName(d.slice(0, at)) === repo) return d.slice(at + 1);
  }
  return undefined;
}

/** What `image` is known by for `reference` in a lock: its registry digest, else its image id. */
export function lockDigestOf(reference: string, image: LocalImage): string {
  return registryDigest(reference, image) ?? image.id;
}

/** True when `image` is the one `digest` locks `reference` to (by registry digest or image id). */
export function matchesLock(reference: string, image: LocalImage, digest: string): boolean {
  return image.id === digest || registryDigest(reference, image) === digest;
}

/** The lock an order carries for its own spec (another spec's lock says nothing of this one). */
export function orderLock(lock: { specHash: string; digests: Record<string, string> } | undefined, specHash: string) {
  return lock && lock.specHash !== "" && lock.specHash === specHash ? lock.digests : undefined;
}

/** One line per reference whose found digest is not the locked one: "web:1 locked sha256:a…, found sha256:b…". */
export function lockMismatches(locked: Readonly<Record<string, string>>, found: Readonly<Record<string, string>>): string[] {
  const out: string[] = [];
  for (const [ref, want] of Object.entries(locked)) {
    const got = found[ref];
    if (got !== undefined && got !== want) out.push(`image ${ref}: locked to ${want}, the registry now serves ${got}`);
  }
  return out;
}

/**
 * After `up`: one line per service whose container runs another image than the deploy locked its
 * reference to. Compose may pull again after the lock step (a pull_policy of always / daily /
 * every_…, or a tag moved meanwhile by something else on the host): what runs must still be locked.
 */
export function runningLockMismatches(
  running: readonly { service: string; reference: string; image: LocalImage }[],
  lock: Readonly<Record<string, string>>,
): string[] {
  const out: string[] = [];
  for (const s of running) {
    const want = lock[s.reference];
    if (want === undefined || matchesLock(s.reference, s.image, want)) continue;
    out.push(`${s.service}: ${s.reference} locked to ${want}, runs ${registryDigest(s.reference, s.image) ?? s.image.id}`);
  }
  return out;
}
