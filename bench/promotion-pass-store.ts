// The promotion pass benchmark's second figure (design section 7, printed for information): the
// same synthetic world written to a file store in a temp dir (deliveries, artifacts, versions,
// environments with their statuses, tenants converged on their releases, their nodes online, the
// verification orders in flight), then one pass = for every environment, readEnvironmentWorld +
// planEnvironment + the status diff (sameStatus), as environment-pass.ts does before it writes.
// Nothing is written during a pass, so every pass reads the same world. CPU time as the
// in-memory figure (process.cpuUsage around a pass: the whole process, so the store's reads on
// libuv's threads count too); wall time beside it.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { ConvergenceStatus, NodeLiveness, type Resource, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { planEnvironment } from "../controller/delivery/plan-environment.js";
import type { EnvDesired, EnvObserved } from "../controller/delivery/plan-types.js";
import { sameStatus } from "../controller/delivery/status-copy.js";
import { planInput } from "../controller/promotion/environment-pass.js";
import { readEnvironmentWorld } from "../controller/promotion/environment-world.js";
import { FileStore } from "../controller/store/file/file-store.js";
import type { Store } from "../controller/store/store.js";
import { percentile } from "./measure.js";

/**
 * One environment of the synthetic world, as promotion-pass.ts builds it; `o.status` is written as
 * its stored status (after the in-memory passes: the settled status, or the seed of one that promotes).
 */
export interface BenchEnv {
  d: EnvDesired;
  o: EnvObserved;
}

export interface StoreFigure {
  records: number;
  writeSeconds: number;
  cpuMs: number[];
  wallMs: number[];
  promoted: number;
  unchanged: number;
}

const BATCH = 256;

function resource(type: string, id: string, desired: unknown, current: unknown, createdAtMs: number): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: type,
    desiredState: desired as never,
    currentState: current as never,
    createdAt: timestampFromMs(createdAtMs),
    updatedAt: timestampFromMs(createdAtMs),
  });
}

/** Every record of the world, in write order. */
function recordsOf(envs: BenchEnv[], now: number): Resource[] {
  const out: Resource[] = [];
  const deliveries = new Set<string>();
  const artifacts = new Set<string>();
  for (const e of envs) {
    const spec = e.d.env.spec;
    if (!deliveries.has(spec.deliveryId)) {
      deliveries.add(spec.deliveryId);
      out.push(resource("delivery", spec.deliveryId, { kind: { case: "delivery", value: e.d.delivery } }, undefined, now));
    }
    for (const [artifactId, versions] of e.o.versions) {
      if (artifacts.has(artifactId)) continue;
      artifacts.add(artifactId);
      const tenantId = spec.tenantIds[0]!;
      out.push(resource("artifact", artifactId, { kind: { case: "artifact", value: { tenantId } } }, undefined, now));
      for (const v of versions) {
        const value = { artifactId, tenantId, version: v.version, digest: v.digest, reference: v.reference, metadata: v.metadata };
        out.push(resource("artifact_version", v.id, { kind: { case: "artifactVersion", value } }, undefined, v.createdAtMs));
      }
    }
    out.push(
      resource(
        "environment",
        e.d.env.id,
        { kind: { case: "environment", value: spec } },
        { kind: { case: "environment", value: e.o.status } },
        now,
      ),
    );
    for (const t of e.o.tenants) {
      const nodeId = e.o.nodesRunning.get(t.id)?.[0] ?? `${t.id}-n1`;
      const targets = [{ nodeId, desiredHash: `h-${t.id}`, convergence: { status: ConvergenceStatus.CONVERGED } }];
      out.push(
        resource(
          "tenant",
          t.id,
          { kind: { case: "tenant", value: {} } },
          { kind: { case: "tenant", value: { release: t.release, targets } } },
          now,
        ),
      );
      out.push(
        resource(
          "node",
          nodeId,
          { kind: { case: "node", value: {} } },
          { kind: { case: "node", value: { liveness: NodeLiveness.ONLINE } } },
          now,
        ),
      );
    }
  }
  return out;
}

/** Writes the world (BATCH writes at a time), then the verification orders the statuses name. */
async function writeWorld(store: Store, envs: BenchEnv[], now: number): Promise<number> {
  const records = recordsOf(envs, now);
  for (let i = 0; i < records.length; i += BATCH) await Promise.all(records.slice(i, i + BATCH).map((r) => store.createResource(r)));
  let orders = 0;
  for (const e of envs)
    for (const o of e.o.verificationOrders.values()) {
      const tenantId = e.o.tenants[0]!.id;
      await store.createWorkOrder(
        create(WorkOrderSchema, {
          id: o.id,
          type: WorkOrderType.EXECUTE_COMMAND,
          status: WorkOrderStatus.PENDING,
          target: { nodeId: e.o.nodesRunning.get(tenantId)?.[0] ?? "", tenantId },
          createdAt: timestampFromMs(o.createdAtMs),
        }),
      );
      orders++;
    }
  return records.length + orders;
}

/** One pass over every environment through the store: read, plan, diff. */
async function storePass(store: Store, ids: string[], now: number) {
  let promoted = 0;
  let unchanged = 0;
  const wall = performance.now();
  const t = process.cpuUsage();
  for (const id of ids) {
    const world = await readEnvironmentWorld(store, id);
    if (!world) throw new Error(`environment ${id} was not read back`);
    const [desired, observed] = planInput(world);
    const plan = planEnvironment(desired, observed, now);
    if (plan.actions.some((a) => a.type === "promote")) promoted++;
    else if (plan.actions.length === 0 && sameStatus(world.status, plan.status)) unchanged++;
  }
  const used = process.cpuUsage(t);
  return { cpuMs: (used.user + used.system) / 1000, wallMs: performance.now() - wall, promoted, unchanged };
}

/** Writes the world to a fresh file store and measures `runs` passes after `warmups`. */
export async function storeFigure(envs: BenchEnv[], now: number, warmups: number, runs: number): Promise<StoreFigure> {
  const dir = await mkdtemp(join(tmpdir(), "skipper-bench-promotion-"));
  const store = new FileStore(dir);
  try {
    await store.open();
    const started = performance.now();
    const records = await writeWorld(store, envs, now);
    const writeSeconds = (performance.now() - started) / 1000;
    const ids = envs.map((e) => e.d.env.id);
    for (let i = 0; i < warmups; i++) await storePass(store, ids, now);
    const passes = [];
    for (let i = 0; i < runs; i++) passes.push(await storePass(store, ids, now));
    const last = passes[passes.length - 1]!;
    return {
      records,
      writeSeconds,
      cpuMs: passes.map((p) => p.cpuMs).sort((a, b) => a - b),
      wallMs: passes.map((p) => p.wallMs).sort((a, b) => a - b),
      promoted: last.promoted,
      unchanged: last.unchanged,
    };
  } finally {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  }
}

/** The figure's lines. */
export function printStoreFigure(f: StoreFigure, plans: number): void {
  const cpu = percentile(f.cpuMs, 50);
  const wall = percentile(f.wallMs, 50);
  console.log(`promotion pass through a file store (for information): ${f.records} records written in ${f.writeSeconds.toFixed(1)} s`);
  console.log(
    `  per pass: promoted ${f.promoted}, unchanged ${f.unchanged}, changed without promoting ${plans - f.promoted - f.unchanged}`,
  );
  console.log(
    `  CPU per pass (read + plan + diff): median ${cpu.toFixed(0)} ms (min ${f.cpuMs[0]!.toFixed(0)}, max ${f.cpuMs[f.cpuMs.length - 1]!.toFixed(0)}) over ${f.cpuMs.length} passes; wall median ${wall.toFixed(0)} ms`,
  );
  console.log(`  CPU per environment: median ${((cpu / plans) * 1000).toFixed(0)} µs`);
}
