// What a tenant's artifacts resolve to: each artifact its services (or compose file) name becomes
// the version its environment's current release holds, pinned by digest ("repo@sha256:…"). Pure,
// one concern per step: which environment (tenant-environment.ts), which release (its current:
// a pin reaches current through the promotion plan), which image (the version's reference). An
// artifact that cannot resolve is pending with the reason: the tenant never deploys a guess.
//
// The same steps resolve the process archives a tenant's processes name (tenant-processes.ts
// makes specs of them): an artifact used as the other kind (an image run as a process, an
// archive as an image) is pending with the reason, never rendered.
import type { ReleaseVersion } from "../../../gen/skipper/v1/delivery_pb.js";
import { archiveSourceOf } from "../../domain/process-archive.js";
import { environmentsOfTenant, type EnvironmentView } from "./tenant-environment.js";

/** A tenant's artifacts resolved. */
export interface TenantImages {
  /** artifact id -> "<repository>@<digest>" (an image) or the archive's URL or path (a process archive). */
  images: Map<string, string>;
  /** artifact id -> the version its environment's release holds (set with `images`). */
  versions: Map<string, ReleaseVersion>;
  /** artifact id -> why it does not resolve (yet). */
  pending: Map<string, string>;
  /** The release the tenant's spec carries, when it names any artifact that resolved. */
  release?: { environmentId: string; releaseId: string };
}

/** The images of `artifacts` for tenant `tenantId` (labels: its metadata labels). */
export function tenantImages(
  tenantId: string,
  labels: Record<string, string>,
  artifacts: ReadonlySet<string>,
  envs: readonly EnvironmentView[],
  processArtifacts: ReadonlySet<string> = new Set(),
): TenantImages {
  const out: TenantImages = { images: new Map(), versions: new Map(), pending: new Map() };
  if (artifacts.size === 0) return out;
  const held = environmentsOfTenant(tenantId, labels, envs).filter((e) => [...artifacts].some((a) => e.spec.artifactIds.includes(a)));
  if (held.length !== 1) {
    const why =
      held.length === 0
        ? `no environment holds tenant ${tenantId} for it: list the tenant in an environment's tenant_ids (or match its tenant_selector)`
        : `tenant ${tenantId} is held by environments ${held.map((e) => e.id).join(" and ")}: a tenant follows one environment`;
    for (const a of artifacts) out.pending.set(a, `artifact ${a}: ${why}`);
    return out;
  }
  const env = held[0]!;
  const current = env.status.current;
  for (const a of [...artifacts].sort()) {
    if (!env.spec.artifactIds.includes(a))
      out.pending.set(a, `artifact ${a}: environment ${env.id} does not promote it (add it to its artifact_ids)`);
    else {
      const version = current?.versions.find((x) => x.artifactId === a && x.reference !== "");
      const kindProblem = version && wrongKind(a, version.reference, processArtifacts.has(a));
      if (kindProblem) out.pending.set(a, kindProblem);
      else if (version) {
        out.images.set(a, version.reference);
        out.versions.set(a, version);
      } else
        out.pending.set(
          a,
          `artifact ${a}: environment ${env.id} has promoted no release of it yet (${env.status.message || "not evaluated yet"})`,
        );
    }
  }
  if (current && out.images.size > 0) out.release = { environmentId: env.id, releaseId: current.id };
  return out;
}

// Why artifact `a` (whose release reference is `reference`) cannot be used as `asProcess` says.
function wrongKind(a: string, reference: string, asProcess: boolean): string | undefined {
  const archive = archiveSourceOf(reference) !== undefined;
  if (asProcess && !archive) return `artifact ${a} is a container image: a tenant process needs a process_archive artifact`;
  if (!asProcess && archive)
    return `artifact ${a} is a process archive: run it as a tenant process (processes[].artifact_id), not as an image`;
  return undefined;
}
