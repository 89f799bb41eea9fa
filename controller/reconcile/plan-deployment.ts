// Builds the records a reconcile action creates: for a deploy, the deployment resource (an
// immutable record of what was sent where) and its deploy_service work order; for a removal,
// a remove_service work order. Pure: the reconciler stores what these return.
import { SecretUseSchema } from "../../gen/skipper/v1/secret_pb.js";
import { clone, create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  ComposePolicySchema,
  ComposeProjectSchema,
  DeploymentPhase,
  type ComposePolicy,
  MetadataSchema,
  ResourceSchema,
  type Resource,
} from "../../gen/skipper/v1/resource_pb.js";
import {
  ImageLockSchema,
  type ImageLock,
  WorkOrderSchema,
  WorkOrderStatus,
  WorkOrderType,
  type WorkOrder,
  type WorkOrderDesiredState,
} from "../../gen/skipper/v1/work_order_pb.js";
import type { RollbackAction } from "../../gen/skipper/v1/order_action_pb.js";
import { ProcessSpecSchema } from "../../gen/skipper/v1/process_pb.js";
import { ProxyRouteSchema } from "../../gen/skipper/v1/proxy_pb.js";
import { SCHEMA_VERSION } from "../../common/schema-version.js";
import { DeploySafetySchema, type DeploySafety } from "../../gen/skipper/v1/safety_pb.js";
import type { RenderedProject } from "./render-project.js";
import { redact } from "../../common/logging/redact.js";

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
  /** W3C trace context the order continues. */
  traceparent?: string;
  now: Date;
}

/** The deployment and deploy_service order that ship `rendered` to the node. */
export function planDeployment(
  ids: OrderIds & {
    deploymentId: string;
    rendered: RenderedProject;
    reason: string;
    safety?: DeploySafety;
    composePolicy?: ComposePolicy;
    /** The spec's image lock, once a node resolved it (image-locks.ts). */
    imageLock?: ImageLock;
  },
): { deployment: Resource; workOrder: WorkOrder } {
  const at = timestampFromDate(ids.now);
  const trace = { requestId: ids.requestId, correlationId: ids.correlationId, traceparent: ids.traceparent ?? "" };
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
          // The record of what was sent keeps no secret values: the resources hold them, the
          // order carries them to the node, and a rollback to this deployment takes the current
          // ones (reconcile/rollback-spec.ts). One copy of a secret, not one per apply.
          composeProject: redact(project),
          workOrderId: ids.workOrderId,
          specHash: ids.rendered.specHash,
          composeServices: { ...ids.rendered.composeServices },
          // A tenant's process env takes no secret-shaped keys (resources/process-rules.ts).
          processes: ids.rendered.processes.map((p) => clone(ProcessSpecSchema, p)),
          routes: ids.rendered.routes.map((r) => clone(ProxyRouteSchema, r)),
        },
      },
    },
    currentState: { kind: { case: "deployment", value: { phase: DeploymentPhase.PENDING, workOrderId: ids.workOrderId, startedAt: at } } },
    metadata: create(MetadataSchema, {
      labels: { tenant_id: ids.tenantId, node_id: ids.nodeId },
      annotations: { reason: ids.reason },
      ...trace,
    }),
    createdAt: at,
    updatedAt: at,
  });
  const workOrder = pendingOrder({
    id: ids.workOrderId,
    type: WorkOrderType.DEPLOY_SERVICE,
    target: { tenantId: ids.tenantId, nodeId: ids.nodeId },
    trace,
    now: ids.now,
    reason: ids.reason,
    labels: { deployment_id: ids.deploymentId },
    maxAttempts: MAX_ATTEMPTS,
    priority: ids.priority ?? 0,
    desiredState: {
      deploymentId: ids.deploymentId,
      tenantId: ids.tenantId,
      serviceIds: [...ids.rendered.serviceIds],
      composeProject: project,
      composeServices: { ...ids.rendered.composeServices },
      specHash: ids.rendered.specHash,
      deleteVolumes: [...ids.rendered.deleteVolumes],
      secretUses: ids.rendered.secretUses.map((u) => clone(SecretUseSchema, u)),
      registrySecretIds: [...ids.rendered.registrySecretIds],
      processes: ids.rendered.processes.map((p) => clone(ProcessSpecSchema, p)),
      routes: ids.rendered.routes.map((r) => clone(ProxyRouteSchema, r)),
      // How to deploy safely is not what runs: it travels with the order, outside the spec hash.
      safety: ids.safety && clone(DeploySafetySchema, ids.safety),
      // The tenant's compose policy, which the node checks the project against before it runs it.
      composePolicy: ids.composePolicy && clone(ComposePolicySchema, ids.composePolicy),
      // The digests the spec's images resolved to on the first node: every other node runs them.
      imageLock: ids.imageLock && clone(ImageLockSchema, ids.imageLock),
    },
  });
  return { deployment, workOrder };
}

/** The remove_service order that brings the tenant's project down on the node. */
export function planRemoval(ids: OrderIds & { projectName: string; removeVolumes: boolean; deleteVolumes?: string[] }): WorkOrder {
  return pendingOrder({
    id: ids.workOrderId,
    type: WorkOrderType.REMOVE_SERVICE,
    target: { tenantId: ids.tenantId, nodeId: ids.nodeId },
    trace: { requestId: ids.requestId, correlationId: ids.correlationId, traceparent: ids.traceparent ?? "" },
    now: ids.now,
    reason: "not_desired",
    maxAttempts: MAX_ATTEMPTS,
    priority: ids.priority ?? 0,
    desiredState: {
      tenantId: ids.tenantId,
      composeProject: { projectName: ids.projectName },
      removeVolumes: ids.removeVolumes,
      deleteVolumes: ids.removeVolumes ? [] : [...(ids.deleteVolumes ?? [])],
    },
  });
}

/** A rollback order that returns the node to the spec rollback-spec.ts resolved: a rollout's or a quarantine's. */
export function planRollback(ids: OrderIds & { desiredState: WorkOrderDesiredState; action: RollbackAction; reason: string }): WorkOrder {
  return pendingOrder({
    id: ids.workOrderId,
    type: WorkOrderType.ROLLBACK,
    target: { tenantId: ids.tenantId, nodeId: ids.nodeId },
    trace: { requestId: ids.requestId, correlationId: ids.correlationId, traceparent: ids.traceparent ?? "" },
    now: ids.now,
    reason: ids.reason,
    maxAttempts: MAX_ATTEMPTS,
    priority: ids.priority ?? 0,
    desiredState: ids.desiredState,
    action: { kind: { case: "rollback", value: ids.action } },
  });
}

type OrderInit = MessageInitShape<typeof WorkOrderSchema>;

/** A new pending order: what every order has (kind, schema, status, trace, time, reason) plus `init`. */
export function pendingOrder(
  o: {
    id: string;
    type: WorkOrderType;
    /** A pool order (ad hoc) also carries its pool and required capabilities. */
    target: { tenantId: string; nodeId: string } & Pick<NonNullable<OrderInit["target"]>, "pool" | "requiredCapabilities">;
    trace: { requestId: string; correlationId: string; traceparent?: string };
    now: Date;
    reason: string;
    labels?: Record<string, string>;
  } & Pick<OrderInit, "desiredState" | "action" | "maxAttempts" | "priority" | "timeout" | "expiresAt">,
): WorkOrder {
  const { id, type, target, trace, now, reason, labels, ...init } = o;
  return create(WorkOrderSchema, {
    ...init,
    id,
    resourceType: "work_order",
    schemaVersion: SCHEMA_VERSION,
    type,
    target,
    status: WorkOrderStatus.PENDING,
    ...trace,
    createdAt: timestampFromDate(now),
    metadata: create(MetadataSchema, { labels: labels ?? {}, annotations: { reason }, ...trace }),
  });
}
