// Planner for DeploymentService.Apply: a pure function from the tenant's desired state and the
// target node to the deployment resource and the deploy_service work order that realise it.
// It reads nothing and writes nothing; the service stores what it returns.
import { create, clone } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  ComposeProjectSchema,
  DeploymentPhase,
  MetadataSchema,
  ResourceSchema,
  type Resource,
} from "../../gen/skipper/v1/resource_pb.js";
import {
  WorkOrderSchema,
  WorkOrderStatus,
  WorkOrderType,
  type WorkOrder,
} from "../../gen/skipper/v1/work_order_pb.js";
import { invalid, SkipperError } from "../errors.js";
import { SCHEMA_VERSION } from "../context.js";

export interface DeploymentPlanInput {
  tenant: Resource;
  /** The node resource the order targets (already resolved by the caller). */
  node: Resource;
  /** The tenant's service resources that exist (by id); others map to a compose service of their id. */
  services?: Resource[];
  deploymentId: string;
  workOrderId: string;
  requestId: string;
  correlationId: string;
  now: Date;
}

export interface DeploymentPlan {
  deployment: Resource;
  workOrder: WorkOrder;
}

/** The node a tenant deploys to: the explicit request wins over the tenant's policy. */
export function targetNodeId(tenant: Resource, requested: string): string {
  if (requested !== "") return requested;
  const spec = tenant.desiredState?.kind.case === "tenant" ? tenant.desiredState.kind.value : undefined;
  const id = spec?.deploymentPolicy?.targetNodeId ?? "";
  if (id === "") {
    throw invalid("tenant has no deployment_policy.target_node_id and the request names no node_id", {
      field: "node_id",
      tenant_id: tenant.id,
    });
  }
  return id;
}

/** Plans a deployment of the tenant's compose project to the node. */
export function planDeployment(input: DeploymentPlanInput): DeploymentPlan {
  const { tenant, node, now } = input;
  if (tenant.desiredState?.kind.case !== "tenant") {
    throw invalid(`resource ${tenant.id} has no tenant desired_state`, { field: "desired_state" });
  }
  const spec = tenant.desiredState.kind.value;
  const nodeSpec = node.desiredState?.kind.case === "node" ? node.desiredState.kind.value : undefined;
  if (nodeSpec?.disabled) {
    throw new SkipperError("CONFLICT", `node ${node.id} is disabled and accepts no new work`, { node_id: node.id });
  }
  const compose = spec.compose ? clone(ComposeProjectSchema, spec.compose) : create(ComposeProjectSchema);
  if (compose.composeFile.trim() === "") {
    throw invalid("tenant has no compose project to deploy (desired_state.tenant.compose.compose_file is empty)", {
      field: "desired_state.tenant.compose.compose_file",
      tenant_id: tenant.id,
    });
  }
  if (compose.projectName === "") compose.projectName = tenant.id;
  const at = timestampFromDate(now);
  const trace = { requestId: input.requestId, correlationId: input.correlationId };
  const deployment = create(ResourceSchema, {
    id: input.deploymentId,
    resourceType: "deployment",
    schemaVersion: SCHEMA_VERSION,
    desiredState: {
      kind: {
        case: "deployment",
        value: {
          tenantId: tenant.id,
          nodeId: node.id,
          serviceIds: [...spec.serviceIds],
          composeProject: compose,
          workOrderId: input.workOrderId,
        },
      },
    },
    currentState: {
      kind: {
        case: "deployment",
        value: { phase: DeploymentPhase.PENDING, workOrderId: input.workOrderId, startedAt: at },
      },
    },
    metadata: create(MetadataSchema, { labels: { tenant_id: tenant.id, node_id: node.id }, ...trace }),
    createdAt: at,
    updatedAt: at,
  });
  const workOrder = create(WorkOrderSchema, {
    id: input.workOrderId,
    resourceType: "work_order",
    schemaVersion: SCHEMA_VERSION,
    type: WorkOrderType.DEPLOY_SERVICE,
    target: { tenantId: tenant.id, nodeId: node.id },
    desiredState: {
      deploymentId: input.deploymentId,
      tenantId: tenant.id,
      serviceIds: [...spec.serviceIds],
      composeProject: compose,
      composeServices: composeServiceNames(spec.serviceIds, input.services ?? []),
    },
    status: WorkOrderStatus.PENDING,
    ...trace,
    createdAt: at,
    metadata: create(MetadataSchema, { labels: { deployment_id: input.deploymentId }, ...trace }),
  });
  return { deployment, workOrder };
}

/** service id -> compose service name: the service's compose_service, else its id. */
export function composeServiceNames(serviceIds: string[], services: Resource[]): Record<string, string> {
  const byId = new Map(services.map((s) => [s.id, s]));
  const out: Record<string, string> = {};
  for (const id of serviceIds) {
    const s = byId.get(id);
    const named = s?.desiredState?.kind.case === "service" ? s.desiredState.kind.value.composeService : "";
    out[id] = named !== "" ? named : id;
  }
  return out;
}
