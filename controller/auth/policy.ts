// Who may call what. One table, keyed by RPC, so the rule for any route is one lookup away.
//   public        anyone (health)
//   admin         the admin token
//   node          a node token; handlers also check the node acts only on its own id and orders
//   admin_or_node either; node access is narrowed by the handler
import type { DescMethod } from "@bufbuild/protobuf";

export type Access = "public" | "admin" | "node" | "admin_or_node";

const POLICY: Record<string, Access> = {
  "skipper.v1.HealthService/Check": "public",
  "skipper.v1.ResourceService/ListResources": "admin",
  "skipper.v1.ResourceService/GetResource": "admin",
  "skipper.v1.ResourceService/CreateResource": "admin",
  "skipper.v1.ResourceService/UpdateResource": "admin",
  "skipper.v1.ResourceService/DeleteResource": "admin",
  "skipper.v1.ResourceService/ExplainResource": "admin",
  "skipper.v1.WorkOrderService/CreateWorkOrder": "admin",
  "skipper.v1.WorkOrderService/ListWorkOrders": "admin",
  "skipper.v1.WorkOrderService/GetWorkOrder": "admin_or_node",
  "skipper.v1.WorkOrderService/ClaimWorkOrder": "node",
  "skipper.v1.WorkOrderService/ReportWorkOrderResult": "node",
  "skipper.v1.WorkOrderService/RenewWorkOrderLease": "node",
  "skipper.v1.WorkOrderService/CancelWorkOrder": "admin",
  "skipper.v1.NodeService/RegisterNode": "admin",
  "skipper.v1.NodeService/RotateNodeToken": "admin",
  "skipper.v1.NodeService/Heartbeat": "node",
  "skipper.v1.NodeService/GetNextWorkOrder": "node",
  "skipper.v1.NodeService/WatchWorkOrders": "node",
  "skipper.v1.NodeService/ReportResourceState": "node",
  "skipper.v1.DeploymentService/Apply": "admin",
  "skipper.v1.SnapshotService/GetSystemSnapshot": "admin",
  "skipper.v1.SnapshotService/GetTenantSnapshot": "admin",
  "skipper.v1.EventService/ListEvents": "admin",
  "skipper.v1.RolloutService/GetRollout": "admin",
  "skipper.v1.RolloutService/ListRollouts": "admin",
  "skipper.v1.RolloutService/PauseRollout": "admin",
  "skipper.v1.RolloutService/ResumeRollout": "admin",
  "skipper.v1.RolloutService/PromoteRollout": "admin",
  "skipper.v1.RolloutService/AbortRollout": "admin",
  "skipper.v1.RolloutService/ApproveRollout": "admin",
  "skipper.v1.RolloutService/PlanRollout": "admin",
};

/** Access rule for a method; unknown methods are admin-only (fail closed). */
export function accessFor(method: DescMethod): Access {
  return POLICY[`${method.parent.typeName}/${method.name}`] ?? "admin";
}

/** Every RPC named in the table (used by a test that checks the table covers the contract). */
export function policyEntries(): ReadonlyArray<[string, Access]> {
  return Object.entries(POLICY);
}
