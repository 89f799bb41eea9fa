// After an order ends, the agent reports the observed state of what it touched: the tenant's
// project (services with their containers, the result, where the compose file is), the
// deployment's last applied state when it succeeded, and each service resource's containers.
// Best effort: the result is already stored, and the next heartbeat reports the project again.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import {
  DeploymentSpecSchema,
  ResourceSpecSchema,
  ResourceStatusSchema,
  ServiceStatusSchema,
  TenantStatusSchema,
  type ServiceObservation,
} from "../gen/skipper/v1/resource_pb.js";
import { ResourceStateReportSchema, type ResourceStateReport } from "../gen/skipper/v1/node_service_pb.js";
import type { WorkOrder, WorkOrderResult } from "../gen/skipper/v1/work_order_pb.js";
import type { OrderChannel } from "./session/order-channel.js";

/** Reports what `order` touched; `call`: the options of a call made for the order (its ids and span). */
export async function reportStates(
  deps: { channel: OrderChannel; nodeId: string; call: { headers: Record<string, string> } },
  order: WorkOrder,
  result: WorkOrderResult,
  services: ServiceObservation[],
  log: Logger,
): Promise<void> {
  const ds = order.desiredState;
  if (!ds) return;
  const now = timestampFromDate(new Date());
  const nodeId = deps.nodeId;
  const own: ResourceStateReport[] = [
    create(ResourceStateReportSchema, {
      resourceType: "tenant",
      id: ds.tenantId,
      currentState: create(ResourceStatusSchema, {
        kind: {
          case: "tenant",
          value: create(TenantStatusSchema, {
            nodeId,
            deploymentId: ds.deploymentId,
            workOrderId: order.id,
            resultCode: result.code,
            composePath: result.details?.composePath ?? "",
            services,
            observedAt: now,
          }),
        },
      }),
    }),
  ];
  if (result.success && ds.deploymentId) {
    own.push(
      create(ResourceStateReportSchema, {
        resourceType: "deployment",
        id: ds.deploymentId,
        lastAppliedState: create(ResourceSpecSchema, {
          kind: {
            case: "deployment",
            value: create(DeploymentSpecSchema, {
              tenantId: ds.tenantId,
              nodeId,
              serviceIds: ds.serviceIds,
              composeProject: ds.composeProject,
              workOrderId: order.id,
            }),
          },
        }),
      }),
    );
  }
  const byCompose = new Map(services.map((s) => [s.service, s]));
  const serviceReports = ds.serviceIds.flatMap((id) => {
    const seen = byCompose.get(ds.composeServices[id] ?? id);
    if (!seen) return [];
    return [
      create(ResourceStateReportSchema, {
        resourceType: "service",
        id,
        currentState: create(ResourceStatusSchema, {
          kind: {
            case: "service",
            value: create(ServiceStatusSchema, { nodeId, containers: seen.containers, state: seen.state, observedAt: now }),
          },
        }),
      }),
    ];
  });
  // Tenant and deployment first; services separately, since a service id without a resource
  // behind it must not keep the tenant's state from being recorded.
  for (const reports of [own, serviceReports]) {
    if (reports.length === 0) continue;
    try {
      await deps.channel.reportState({ nodeId, workOrderId: order.id, reports }, deps.call);
    } catch (e) {
      const err = ConnectError.from(e);
      log.warn(
        {
          action: "report_state",
          result: Code[err.code],
          metadata: { message: err.rawMessage, resources: reports.map((r) => `${r.resourceType}/${r.id}`) },
        },
        "could not report observed state",
      );
    }
  }
}
