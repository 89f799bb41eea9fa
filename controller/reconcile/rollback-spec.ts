// Resolves a rollback order to the spec it restores on its node: the named deployment's project,
// or else the newest spec that applied successfully there and differs from the one applied now
// (a rollout's rollback names that spec's hash: the newest order that applied it).
// The order carries that spec as its desired_state, so the agent needs nothing but the order; the
// secret values it lacks (records keep none) come from the tenant's current spec.
import { clone, create } from "@bufbuild/protobuf";
import { RollbackActionSchema, type RollbackAction } from "../../gen/skipper/v1/order_action_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import {
  WorkOrderDesiredStateSchema,
  WorkOrderStatus,
  WorkOrderType,
  type WorkOrder,
  type WorkOrderDesiredState,
} from "../../gen/skipper/v1/work_order_pb.js";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { conflict, invalid, notFound } from "../base/errors.js";
import type { Store } from "../store/store.js";
import { eachWorkOrder } from "../store/each-page.js";
import { withCurrentSecrets } from "./rollback-secrets.js";

export interface RollbackPlan {
  desiredState: WorkOrderDesiredState;
  action: RollbackAction;
}

export async function resolveRollback(
  store: Store,
  tenant: Resource,
  nodeId: string,
  requested: RollbackAction,
  specHash?: string,
): Promise<RollbackPlan> {
  const status = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value : undefined;
  const target = status?.targets.find((t) => t.nodeId === nodeId);
  const applied = target?.appliedHash ?? "";
  const done = async (stored: WorkOrderDesiredState, from: string): Promise<RollbackPlan> => {
    // Deployments and finished orders keep no secret values: the current ones fill them in.
    const ds = await withCurrentSecrets(store, tenant, stored);
    // The restored spec is not a new deployment: no deployment id, and no health gate of its own.
    const desiredState = clone(WorkOrderDesiredStateSchema, ds);
    desiredState.deploymentId = "";
    desiredState.safety = undefined;
    // The desired hash to hold is the one wanted now: a change made while the rollback runs is a
    // new desired state and deploys after it.
    const holds = target?.desiredHash ?? "";
    return {
      desiredState,
      action: create(RollbackActionSchema, {
        deploymentId: requested.deploymentId,
        resolvedFrom: from,
        replacesSpecHash: applied,
        holdsDesiredHash: holds,
      }),
    };
  };
  if (requested.deploymentId !== "") {
    const dep = await store.getResource("deployment", requested.deploymentId);
    const spec = dep?.desiredState?.kind.case === "deployment" ? dep.desiredState.kind.value : undefined;
    if (!dep || !spec) throw notFound("deployment", requested.deploymentId);
    if (spec.tenantId !== tenant.id || spec.nodeId !== nodeId) {
      throw invalid(
        `deployment ${dep.id} shipped tenant ${spec.tenantId} to node ${spec.nodeId}, not tenant ${tenant.id} to node ${nodeId}`,
        { field: "action.rollback.deployment_id" },
      );
    }
    // Which compose service each service resource is: on the deployment, or (deployments made
    // before it carried the map) on its order while that is kept.
    const order =
      spec.workOrderId && Object.keys(spec.composeServices).length === 0 ? await store.getWorkOrder(spec.workOrderId) : undefined;
    const ds = create(WorkOrderDesiredStateSchema, {
      tenantId: tenant.id,
      serviceIds: spec.serviceIds,
      composeProject: spec.composeProject,
      composeServices: Object.keys(spec.composeServices).length > 0 ? spec.composeServices : (order?.desiredState?.composeServices ?? {}),
      specHash: spec.specHash || order?.desiredState?.specHash || "",
      processes: spec.processes,
      routes: spec.routes,
    });
    return done(ds, `deployment/${dep.id}`);
  }
  // Orders list oldest first: the one to restore is the newest to finish.
  let newest: { order: WorkOrder; at: number } | undefined;
  for await (const o of eachWorkOrder(store, { tenantId: tenant.id, nodeId, status: WorkOrderStatus.SUCCESS, pageSize: 200 })) {
    const restores = o.type === WorkOrderType.DEPLOY_SERVICE || o.type === WorkOrderType.ROLLBACK;
    if (!restores || !o.desiredState) continue;
    // Named: that spec (a quarantine restores the one applied now); else the newest other one.
    if (specHash !== undefined ? o.desiredState.specHash !== specHash : o.desiredState.specHash === applied) continue;
    const at = o.finishedAt ? timestampDate(o.finishedAt).getTime() : 0;
    if (!newest || at >= newest.at) newest = { order: o, at };
  }
  if (newest) return done(newest.order.desiredState!, `work_order/${newest.order.id}`);
  const which = specHash === undefined ? "earlier successful spec" : `successful order of spec ${specHash.slice(0, 12)} left`;
  throw conflict(`node ${nodeId} has no ${which} of tenant ${tenant.id} to roll back to`, {
    tenant_id: tenant.id,
    node_id: nodeId,
    reason: "NO_PREVIOUS_SPEC",
  });
}
