// Plans of rollouts (rollouts/rollout-plan.ts) from what is stored: the compose file each node
// runs comes from the newest kept order that applied its spec there (orders keep no secret
// values; the diff blanks secret-shaped ones anyway), the one it would get from the rendered
// desired state. Used when a rollout that needs approval starts, and for a dry run of a tenant.
import { create } from "@bufbuild/protobuf";
import { type Rollout, type RolloutPlan, RolloutSchema } from "../../gen/skipper/v1/rollout_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import { notFound } from "../base/errors.js";
import { buildPlan, type PlanInput } from "../rollouts/rollout-plan.js";
import { planWaves } from "../rollouts/wave-plan.js";
import { eachWorkOrder } from "../store/each-page.js";
import type { Store } from "../store/store.js";
import { desiredForTenant, type TenantDesire } from "./desired-targets.js";
import type { NodeCache } from "./node-cache.js";
import { REMOVAL_HASH } from "./plan-target.js";
import { tenantStatusOf } from "./target-records.js";
import { loadTenantWorld } from "./world.js";

type Project = NonNullable<PlanInput["from"]>;

/** The plan of `rollout`'s nodes against `desire`. */
export async function planOfRollout(store: Store, rollout: Rollout, desire: TenantDesire): Promise<RolloutPlan> {
  const nodes = rollout.waves.flatMap((w) => w.nodes.map((n) => ({ ...n, wave: w.name })));
  const kept = await keptProjects(store, rollout.tenantId, new Set(nodes.map((n) => n.fromSpecHash)));
  const inputs: PlanInput[] = nodes.map((n) => {
    const to = desire.targets.get(n.nodeId)?.project;
    return {
      nodeId: n.nodeId,
      wave: n.wave,
      fromSpecHash: n.fromSpecHash,
      toSpecHash: n.toSpecHash,
      from: kept.get(n.fromSpecHash),
      to: { composeFile: to?.composeFile ?? "", env: to?.env ?? {} },
    };
  });
  return buildPlan(rollout.tenantId, inputs);
}

/** What a rollout of `tenantId`'s desired state would change now (a dry run; nothing is stored). */
export async function planForTenant(store: Store, tenantId: string, nodeCache?: NodeCache): Promise<RolloutPlan> {
  const world = await loadTenantWorld(store, tenantId, nodeCache);
  const tenant = await store.getResource("tenant", tenantId);
  if (!tenant) throw notFound("tenant", tenantId);
  const desire = desiredForTenant(world.tenantWorld(tenant, tenantId));
  const applied = new Map(tenantStatusOf(tenant).targets.map((t) => [t.nodeId, t.appliedHash]));
  const behind = [...desire.targets]
    .filter(([nodeId, r]) => {
      const node = world.node(nodeId);
      const a = applied.get(nodeId) ?? "";
      return node !== undefined && !node.disabled && a !== "" && a !== REMOVAL_HASH && a !== r.specHash;
    })
    .map(([nodeId]) => nodeId);
  const policy = tenant.desiredState?.kind.case === "tenant" ? tenant.desiredState.kind.value.rollout : undefined;
  const waves = planWaves(
    policy,
    behind.map((id) => ({ id, labels: world.labelsOf(id) })),
  );
  const rollout = create(RolloutSchema, {
    tenantId,
    waves: waves.map((w) => ({
      name: w.name,
      nodes: w.nodeIds.map((nodeId) => ({ nodeId, fromSpecHash: applied.get(nodeId)!, toSpecHash: desire.targets.get(nodeId)!.specHash })),
    })),
  });
  return planOfRollout(store, rollout, desire);
}

// The compose file and env of each wanted spec hash, from the newest successful order that
// applied it on any node of the tenant (the hash covers file and env: any node's copy will do).
async function keptProjects(store: Store, tenantId: string, wanted: ReadonlySet<string>): Promise<Map<string, Project>> {
  const out = new Map<string, Project>();
  for await (const o of eachWorkOrder(store, { tenantId, status: WorkOrderStatus.SUCCESS, pageSize: 500 })) {
    const ds = o.desiredState;
    if (!ds || !wanted.has(ds.specHash)) continue;
    if (o.type !== WorkOrderType.DEPLOY_SERVICE && o.type !== WorkOrderType.ROLLBACK) continue;
    // Oldest first: a later order of the same spec replaces an earlier one.
    out.set(ds.specHash, { composeFile: ds.composeProject?.composeFile ?? "", env: ds.composeProject?.env ?? {} });
  }
  return out;
}
