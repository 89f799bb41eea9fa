// Builders for the promotion planner's fixtures: versions, releases, records, tenants, and one
// environment's desired and observed world.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  DeliverySpecSchema,
  EnvironmentSpecSchema,
  type EnvironmentStatus,
  EnvironmentStatusSchema,
  type Release,
  type ReleaseOutcome,
  type ReleaseRecord,
  ReleaseRecordSchema,
} from "../../gen/skipper/v1/delivery_pb.js";
import { TenantReleaseSchema } from "../../gen/skipper/v1/resource_pb.js";
import { type RolloutActor, RolloutActorSchema } from "../../gen/skipper/v1/rollout_pb.js";
import { sha256 } from "../../controller/base/canonical-json.js";
import type { EnvDesired, EnvObserved, Freeze, OrderView, TenantView, VersionView } from "../../controller/delivery/plan-types.js";
import { makeRelease } from "../../controller/delivery/release-id.js";
import { newestFirst } from "../../controller/delivery/version-order.js";

export const T0 = Date.parse("2026-11-24T10:00:00Z");
export const MIN = 60_000;

/** A recorded version; its digest derives from artifact and version. */
export function ver(artifactId: string, version: string, createdAtMs: number, extra: Partial<VersionView> = {}): VersionView {
  const digest = `sha256:${sha256(`${artifactId}:${version}`)}`;
  return {
    id: `${artifactId}.${version}`,
    artifactId,
    version,
    digest,
    reference: `registry.test/${artifactId}@${digest}`,
    createdAtMs,
    metadata: {},
    ...extra,
  };
}

/** The release of these versions. */
export function rel(...vs: VersionView[]): Release {
  return makeRelease(vs.map((v) => ({ artifactId: v.artifactId, version: v.version, digest: v.digest, reference: v.reference })) as never);
}

export function actor(name: string, at: number, reason = ""): RolloutActor {
  return create(RolloutActorSchema, { actor: name, at: timestampFromMs(at), reason });
}

export function record(
  release: Release,
  outcome: ReleaseOutcome,
  at: { runningSince?: number; endedAt?: number; reason?: string } = {},
): ReleaseRecord {
  return create(ReleaseRecordSchema, {
    release,
    outcome,
    reason: at.reason ?? "",
    runningSince: at.runningSince === undefined ? undefined : timestampFromMs(at.runningSince),
    endedAt: at.endedAt === undefined ? undefined : timestampFromMs(at.endedAt),
  });
}

/** A tenant whose desired state carries `releaseId`, converged since `since` when given. */
export function tenant(id: string, releaseId?: string, since?: number, rollout?: TenantView["rollout"]): TenantView {
  const release =
    releaseId === undefined
      ? undefined
      : create(TenantReleaseSchema, { releaseId, convergedSince: since === undefined ? undefined : timestampFromMs(since) });
  return { id, release, rollout };
}

export function status(init: MessageInitShape<typeof EnvironmentStatusSchema> = {}): EnvironmentStatus {
  return create(EnvironmentStatusSchema, init);
}

export interface WorldInit {
  id?: string;
  spec?: MessageInitShape<typeof EnvironmentSpecSchema>;
  delivery?: MessageInitShape<typeof DeliverySpecSchema>;
  versions?: VersionView[];
  status?: EnvironmentStatus;
  upstream?: Record<string, EnvironmentStatus>;
  tenants?: TenantView[];
  freezes?: Freeze[];
  orders?: OrderView[];
  nodes?: Record<string, string[]>;
}

/** One environment's world; artifacts default to those of the versions given. */
export function world(w: WorldInit): { d: EnvDesired; o: EnvObserved } {
  const versions = new Map<string, VersionView[]>();
  for (const v of w.versions ?? []) versions.set(v.artifactId, [...(versions.get(v.artifactId) ?? []), v]);
  for (const [a, list] of versions) versions.set(a, newestFirst(list));
  const spec = create(EnvironmentSpecSchema, { artifactIds: [...versions.keys()].sort(), ...w.spec });
  return {
    d: { env: { id: w.id ?? "test", spec }, delivery: create(DeliverySpecSchema, w.delivery ?? {}), artifacts: new Map() },
    o: {
      status: w.status ?? status(),
      versions,
      upstream: new Map(Object.entries(w.upstream ?? {})),
      tenants: w.tenants ?? [],
      freezes: w.freezes ?? [],
      verificationOrders: new Map((w.orders ?? []).map((x) => [x.id, x])),
      nodesRunning: new Map(Object.entries(w.nodes ?? {})),
    },
  };
}
