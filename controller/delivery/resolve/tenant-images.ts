// What a tenant's artifacts resolve to: each artifact its services (or compose file) name becomes
// the version its environment's current release holds, pinned by digest ("repo@sha256:…"). Pure,
// one concern per step: which environment (tenant-environment.ts), which release (its current:
// a pin reaches current through the promotion plan), which image (the version's reference). An
// artifact that cannot resolve is pending with the reason: the tenant never deploys a guess.
import type { Release } from "../../../gen/skipper/v1/delivery_pb.js";
import { environmentsOfTenant, type EnvironmentView } from "./tenant-environment.js";

/** A tenant's artifacts resolved. */
export interface TenantImages {
  /** artifact id -> "<repository>@<digest>". */
  images: Map<string, string>;
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
): TenantImages {
  const out: TenantImages = { images: new Map(), pending: new Map() };
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
      const image = imageOf(current, a);
      if (image) out.images.set(a, image);
      else
        out.pending.set(
          a,
          `artifact ${a}: environment ${env.id} has promoted no release of it yet (${env.status.message || "not evaluated yet"})`,
        );
    }
  }
  if (current && out.images.size > 0) out.release = { environmentId: env.id, releaseId: current.id };
  return out;
}

/** The reference a release runs for artifact `artifactId`, if it holds one. */
export function imageOf(release: Release | undefined, artifactId: string): string | undefined {
  const v = release?.versions.find((x) => x.artifactId === artifactId);
  return v && v.reference !== "" ? v.reference : undefined;
}
