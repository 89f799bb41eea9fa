// Apply: "reconcile this tenant now". The same pass the loop runs, forced to deploy even when the
// target looks converged; an order already in flight for the same desired state is returned
// instead of a second one, and one in flight for an older state is a CONFLICT (the change
// follows when it ends). When no order comes of it, the pass's verdict becomes the error a
// caller can act on.
import { create } from "@bufbuild/protobuf";
import { ApplyResponseSchema, type ApplyRequest, type ApplyResponse } from "../../gen/skipper/v1/deployment_service_pb.js";
import { ConvergenceStatus, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { Logger } from "../../common/logging/logger.js";
import type { Trace } from "../base/context.js";
import { conflict, invalid, notFound, type SkipperError } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import type { Store } from "../store/store.js";
import type { Reconciler } from "./reconciler.js";
import type { PassResult } from "./tenant-pass.js";

export interface ApplyDeps {
  store: Store;
  reconciler: Reconciler;
}

/** Deploys the tenant's desired state to its nodes (or one node) now; returns the deployment and its order. */
export async function applyNow(deps: ApplyDeps, req: ApplyRequest, trace: Trace, log: Logger): Promise<ApplyResponse> {
  const { store } = deps;
  const tenantId = checkId(req.tenantId, "tenant_id");
  if (req.nodeId !== "") checkId(req.nodeId, "node_id");
  const tenant = await store.getResource("tenant", tenantId);
  if (!tenant) throw notFound("tenant", tenantId);
  if (req.nodeId !== "" && !(await store.getResource("node", req.nodeId)))
    throw notFound("node", req.nodeId, `node ${req.nodeId} is not registered`);
  const pass = await deps.reconciler.reconcileTenant(tenantId, { force: true, nodeId: req.nodeId || undefined, trace });
  const pick = pass.orders.find((o) => req.nodeId === "" || o.nodeId === req.nodeId);
  if (!pick) throw whyNoOrder(tenant, req.nodeId, pass);
  const desiredHash = pass.desire.targets.get(pick.nodeId)?.specHash ?? "";
  if (!pick.created && (pick.workOrder.desiredState?.specHash ?? "") !== desiredHash) {
    throw conflict(
      `work order ${pick.workOrder.id} for node ${pick.nodeId} is still in flight with an older desired state; the change follows when it ends`,
      {
        work_order_id: pick.workOrder.id,
        node_id: pick.nodeId,
      },
    );
  }
  const deploymentId = pick.workOrder.desiredState?.deploymentId ?? "";
  const deployment = pick.deployment ?? (deploymentId ? await store.getResource("deployment", deploymentId) : undefined);
  log.info(
    {
      action: "apply",
      result: pick.created ? "issued" : "in_flight",
      tenant_id: tenantId,
      node_id: pick.nodeId,
      metadata: { deployment_id: deploymentId, work_order_id: pick.workOrder.id },
    },
    pick.created ? "deployment started" : "deployment already in flight",
  );
  return create(ApplyResponseSchema, { deployment, workOrder: pick.workOrder });
}

// Turns the pass's verdict into the error a caller can act on.
function whyNoOrder(tenant: Resource, nodeId: string, pass: PassResult): SkipperError {
  if (nodeId !== "" && !pass.desire.targets.has(nodeId)) {
    return invalid(`tenant ${tenant.id} is not placed on node ${nodeId}`, { field: "node_id", tenant_id: tenant.id });
  }
  const policyNode =
    tenant.desiredState?.kind.case === "tenant" ? (tenant.desiredState.kind.value.deploymentPolicy?.targetNodeId ?? "") : "";
  const blocker = pass.desire.blocker;
  if (blocker?.status === ConvergenceStatus.NO_MATCHING_NODE && policyNode !== "") {
    return notFound("node", policyNode, `node ${policyNode} is not registered`);
  }
  const verdict = [...pass.verdicts.values()][0];
  if (verdict?.status === ConvergenceStatus.NODE_DISABLED) return conflict(verdict.message, { status: "NODE_DISABLED" });
  const why = blocker ?? verdict;
  return invalid(`nothing to deploy for tenant ${tenant.id}: ${why?.message ?? "no target"}`, {
    field: "tenant_id",
    status: ConvergenceStatus[why?.status ?? ConvergenceStatus.UNSPECIFIED] ?? "",
  });
}
