// Builds the records a reconcile action creates: for a deploy, the deployment resource (an
// immutable record of what was sent where) and its deploy_service work order; for a removal,
// a remove_service work order. Pure: the reconciler stores what these return.
import { clone, create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ComposeProjectSchema, DeploymentPhase, MetadataSchema, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { SCHEMA_VERSION } from "../context.js";
import { DeploySafetySchema, type DeploySafety } from "../../gen/skipper/v1/safety_pb.js";
import type { RenderedProject } from "./render-project.js";

/** Claims an order gets: retriable failures (engine down, timeouts) are retried by the order itself. */
export const MAX_ATTEMPTS = 3;

export interface OrderIds {
  tenantId: string;
  /** The tenant's priority: of a node's pending orders the highest runs first. */
  priority?: number;
  nodeId: string;
  workOrderId: string;
  requestId: string;
  correlationId: string;
  now: Date;
}

/** The deployment and deploy_service order that ship `rendered` to the node. */
export function planDeployment(ids: OrderIds & { deploymentId: string; rendered: RenderedProject; reason: string; safety?: DeploySafety }): { deployment: Resource; workOrder: WorkOrder } {
  const at = timestampFromDate(ids.now);
  const trace = { requestId: ids.requestId, correlationId: ids.correlationId };
  const project = clone(ComposeProjectSchema, ids.rendered.project);
  const deployment = create(ResourceSchema, {
    id: ids.deploymentId,
    resourceType: "deployment",
    schemaVersion: SCHEMA_VERSION,
    desiredState: {
      kind: {
        case: "deployment",
        value: {
          tenantId: ids.tenantId,
          nodeId: ids.nodeId,
          serviceIds: [...ids.rendered.serviceIds],
          composeProject: project,
          workOrderId: ids.workOrderId,
          specHash: ids.rendered.specHash,
        },
      },
    },
    currentState: { kind: { case: "deployment", value: { phase: DeploymentPhase.PENDING, workOrderId: ids.workOrderId, startedAt: at } } },
    metadata: create(MetadataSchema, { labels: { tenant_id: ids.tenantId, node_id: ids.nodeId }, annotations: { reason: ids.reason }, ...trace }),
    createdAt: at,
    updatedAt: at,
  });
  const workOrder = create(WorkOrderSchema, {
    id: ids.workOrderId,
    resourceType: "work_order",
    schemaVersion: SCHEMA_VERSION,
    type: WorkOrderType.DEPLOY_SERVICE,
    target: { tenantId: ids.tenantId, nodeId: ids.nodeId },
    desiredState: {
      deploymentId: ids.deploymentId,
      tenantId: ids.tenantId,
      serviceIds: [...ids.rendered.serviceIds],
      composeProject: project,
      composeServices: { ...ids.rendered.composeServices },
      specHash: ids.rendered.specHash,
      // How to deploy safely is not what runs: it travels with the order, outside the spec hash.
      safety: ids.safety && clone(DeploySafetySchema, ids.safety),
    },
    status: WorkOrderStatus.PENDING,
    maxAttempts: MAX_ATTEMPTS,
    priority: ids.priority ?? 0,
    ...trace,
    createdAt: at,
    metadata: create(MetadataSchema, { labels: { deployment_id: ids.deploymentId }, annotations: { reason: ids.reason }, ...trace }),
  });
  return { deployment, workOrder };
}

/** The remove_service order that brings the tenant's project down on the node. */
export function planRemoval(ids: OrderIds & { projectName: string; removeVolumes: boolean }): WorkOrder {
  const at = timestampFromDate(ids.now);
  const trace = { requestId: ids.requestId, correlationId: ids.correlationId };
  return create(WorkOrderSchema, {
    id: ids.workOrderId,
    resourceType: "work_order",
    schemaVersion: SCHEMA_VERSION,
    type: WorkOrderType.REMOVE_SERVICE,
    target: { tenantId: ids.tenantId, nodeId: ids.nodeId },
    desiredState: { tenantId: ids.tenantId, composeProject: { projectName: ids.projectName }, removeVolumes: ids.removeVolumes },
    status: WorkOrderStatus.PENDING,
    maxAttempts: MAX_ATTEMPTS,
    priority: ids.priority ?? 0,
    ...trace,
    createdAt: at,
    metadata: create(MetadataSchema, { annotations: { reason: "not_desired" }, ...trace }),
  });
}
