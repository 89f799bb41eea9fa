// Promotion pass benchmark (npm run bench:promotion). In process; it prints figures.
//
// One pass of the promotion loop's planning over a synthetic world (design section 7): 100
// deliveries of 10 artifacts, each through 10 chained environments (env k depends on env k-1,
// bake 30 m), so 1,000 plans over 1,000 artifacts; 20 versions per artifact (sorted once per
// artifact and shared by its environments, as the world read does); 2 tenants per environment
// converged on its current release. Environment k runs release k-steps behind the newest, so each
// has a candidate: env 0 from versions (5 candidates: one artifact at a time), the others what
// their upstream verified. Even deliveries: the upstream's bake has 20 m left, or (env 0)
// approval is required, so half the candidates are pending; environment 5 of each delivery has a
// release in flight with a verification order running (a tenth). One pass = planEnvironment for
// every environment, each comparing its status with the stored one; the stored statuses are the
// previous pass's (the environments that promote are seeded again, so they promote every pass).
// CPU time (process.cpuUsage, user + system) around a pass; the median of 20 after 5 warm-ups,
// printed beside the target (< 100 ms a pass, about 100 µs a plan). Then, for information, the
// same world read from a file store each pass (promotion-pass-store.ts).
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  ConstraintPhase,
  DeliverySpecSchema,
  EnvironmentSpecSchema,
  type EnvironmentStatus,
  EnvironmentStatusSchema,
  PromotionPhase,
  PromotionSchema,
  type Release,
  ReleaseOutcome,
  ReleaseRecordSchema,
  VerificationStateSchema,
} from "../gen/skipper/v1/delivery_pb.js";
import { TenantReleaseSchema } from "../gen/skipper/v1/resource_pb.js";
import { RolloutActorSchema } from "../gen/skipper/v1/rollout_pb.js";
import { WorkOrderStatus } from "../gen/skipper/v1/work_order_pb.js";
import { sha256 } from "../controller/base/canonical-json.js";
import { planEnvironment } from "../controller/delivery/plan-environment.js";
import type { EnvDesired, EnvObserved, VersionView } from "../controller/delivery/plan-types.js";
import { makeRelease } from "../controller/delivery/release-id.js";
import { verificationOrderId } from "../controller/delivery/verification-runs.js";
import { newestFirst } from "../controller/delivery/version-order.js";
import { percentile } from "./measure.js";
import { printStoreFigure, storeFigure } from "./promotion-pass-store.js";

const DELIVERIES = 100;
const ARTIFACTS = 10;
const ENVS = 10;
const VERSIONS = 20;
const NOW = Date.parse("2026-11-24T10:00:00Z");
const MIN = 60_000;
/** The store figure's passes (each reads the whole world): fewer than the in-memory figure's. */
const STORE_WARMUPS = 1;
const STORE_RUNS = 5;

interface Env {
  d: EnvDesired;
  o: EnvObserved;
  seeded: EnvironmentStatus;
}

function versionsOf(delivery: number): Map<string, VersionView[]> {
  const m = new Map<string, VersionView[]>();
  for (let a = 0; a < ARTIFACTS; a++) {
    const artifactId = `d${delivery}-a${a}`;
    const list: VersionView[] = [];
    for (let j = 0; j < VERSIONS; j++) {
      const digest = `sha256:${sha256(`${artifactId}:${j}`)}`;
      const version = `1.${j}.0`;
      const createdAtMs = NOW - (VERSIONS - j) * 60 * MIN;
      list.push({
        id: `${artifactId}.${version}`,
        artifactId,
        version,
        digest,
        reference: `r/${artifactId}@${digest}`,
        createdAtMs,
        metadata: {},
      });
    }
    m.set(artifactId, newestFirst(list));
  }
  return m;
}

/** Release j: every artifact of the delivery at version 1.j.0. */
function releaseAt(versions: Map<string, VersionView[]>, j: number): Release {
  return makeRelease(
    [...versions.values()].map((list) => {
      const v = list[VERSIONS - 1 - j]!;
      return { artifactId: v.artifactId, version: v.version, digest: v.digest, reference: v.reference } as never;
    }),
  );
}

function historyOf(releases: Release[], newest: number, runningSince: number): EnvironmentStatus {
  const history = [];
  for (let j = newest; j >= Math.max(0, newest - 19); j--) {
    const since = j === newest ? runningSince : NOW - (200 - j) * MIN;
    history.push(
      create(ReleaseRecordSchema, { release: releases[j]!, outcome: ReleaseOutcome.VERIFIED, runningSince: timestampFromMs(since) }),
    );
  }
  return create(EnvironmentStatusSchema, { current: releases[newest]!, history });
}

function deliveryWorld(n: number): Env[] {
  const versions = versionsOf(n);
  const releases = Array.from({ length: VERSIONS }, (_, j) => releaseAt(versions, j));
  const artifactIds = [...versions.keys()];
  const pendingHalf = n % 2 === 0;
  const statuses: EnvironmentStatus[] = [];
  const envs: Env[] = [];
  for (let k = 0; k < ENVS; k++) {
    const id = `d${n}-e${k}`;
    const newest = VERSIONS - 2 - k;
    const st = historyOf(releases, newest, pendingHalf ? NOW - 10 * MIN : NOW - 60 * MIN);
    const tenants = [`${id}-t1`, `${id}-t2`];
    const orders = new Map();
    if (k === 5) {
      const r = releases[newest]!;
      st.history.shift();
      const order = verificationOrderId(id, r.id, "smoke", 1);
      st.inFlight = create(PromotionSchema, {
        release: r,
        phase: PromotionPhase.VERIFYING,
        started: create(RolloutActorSchema, { actor: "controller", at: timestampFromMs(NOW - 30 * MIN) }),
        runningSince: timestampFromMs(NOW - 20 * MIN),
        verifications: [create(VerificationStateSchema, { name: "smoke", phase: ConstraintPhase.PENDING, workOrderId: order })],
      });
      orders.set(order, { id: order, status: WorkOrderStatus.RUNNING, resultCode: "", message: "", createdAtMs: NOW - 5 * MIN });
    }
    statuses.push(st);
    const spec = create(EnvironmentSpecSchema, {
      deliveryId: `d${n}`,
      tenantIds: tenants,
      artifactIds,
      requireApproval: k === 0 && pendingHalf,
      dependsOn: k === 0 ? [] : [{ environmentId: `d${n}-e${k - 1}`, bakeTime: { seconds: 1800n, nanos: 0 } }],
      verifications: k === 5 ? [{ name: "smoke", requiredPasses: 3 }] : [],
    });
    const converged = create(TenantReleaseSchema, {
      environmentId: id,
      releaseId: st.current!.id,
      convergedSince: timestampFromMs(NOW - 20 * MIN),
    });
    envs.push({
      d: { env: { id, spec }, delivery: create(DeliverySpecSchema, {}), artifacts: new Map() },
      o: {
        status: st,
        versions,
        upstream: k === 0 ? new Map() : new Map([[`d${n}-e${k - 1}`, statuses[k - 1]!]]),
        tenants: tenants.map((t) => ({ id: t, release: converged })),
        freezes: [],
        verificationOrders: orders,
        nodesRunning: new Map(tenants.map((t) => [t, [`${t}-n1`]])),
      },
      seeded: st,
    });
  }
  return envs;
}

/** One pass: every plan. Returns the CPU ms it took and what it did. */
function pass(envs: Env[]): { cpuMs: number; promoted: number; unchanged: number } {
  let promoted = 0;
  let unchanged = 0;
  const t = process.cpuUsage();
  const plans = envs.map((e) => planEnvironment(e.d, e.o, NOW));
  const used = process.cpuUsage(t);
  for (let i = 0; i < envs.length; i++) {
    const p = plans[i]!;
    if (p.actions.some((a) => a.type === "promote")) promoted++;
    else if (p.actions.length === 0) unchanged++;
    // The next pass reads this one's output; those that promoted start from their seed again.
    envs[i]!.o.status = p.actions.some((a) => a.type === "promote") ? envs[i]!.seeded : p.status;
  }
  return { cpuMs: (used.user + used.system) / 1000, promoted, unchanged };
}

async function main(): Promise<void> {
  const envs = Array.from({ length: DELIVERIES }, (_, n) => deliveryWorld(n)).flat();
  for (let i = 0; i < 5; i++) pass(envs);
  const runs = Array.from({ length: 20 }, () => pass(envs));
  const ms = runs.map((r) => r.cpuMs).sort((a, b) => a - b);
  const last = runs[runs.length - 1]!;
  const median = percentile(ms, 50);
  console.log(
    `promotion pass: ${envs.length} plans (${DELIVERIES * ARTIFACTS} artifacts x ${ENVS} environments, ${VERSIONS} versions each)`,
  );
  console.log(
    `  per pass: promoted ${last.promoted}, unchanged ${last.unchanged}, changed without promoting ${envs.length - last.promoted - last.unchanged}`,
  );
  console.log(
    `  CPU per pass: median ${median.toFixed(1)} ms (min ${ms[0]!.toFixed(1)}, max ${ms[ms.length - 1]!.toFixed(1)}); target < 100 ms`,
  );
  console.log(`  CPU per plan: median ${((median / envs.length) * 1000).toFixed(0)} µs; target about 100 µs`);
  // The second figure: the same world, each status as the passes above left it, read from a file store each pass.
  printStoreFigure(await storeFigure(envs, NOW, STORE_WARMUPS, STORE_RUNS), envs.length);
}

await main();
