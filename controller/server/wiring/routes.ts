// Every service the controller serves, and the routes that put each implementation behind it.
import type { ConnectRouter, ConnectRouterOptions } from "@connectrpc/connect";
import type { DescService } from "@bufbuild/protobuf";
import { DeploymentService } from "../../../gen/skipper/v1/deployment_service_pb.js";
import { EventService } from "../../../gen/skipper/v1/event_service_pb.js";
import { HealthService } from "../../../gen/skipper/v1/health_service_pb.js";
import { NodeService } from "../../../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../../../gen/skipper/v1/resource_service_pb.js";
import { SnapshotService } from "../../../gen/skipper/v1/snapshot_service_pb.js";
import { WorkOrderService } from "../../../gen/skipper/v1/work_order_service_pb.js";
import { RolloutService } from "../../../gen/skipper/v1/rollout_service_pb.js";
import { AccessService } from "../../../gen/skipper/v1/access_service_pb.js";
import { EnrollmentService } from "../../../gen/skipper/v1/enrollment_service_pb.js";
import { AuditService } from "../../../gen/skipper/v1/audit_service_pb.js";
import { SecretService } from "../../../gen/skipper/v1/secret_service_pb.js";
import { WebhookService } from "../../../gen/skipper/v1/webhook_service_pb.js";
import { DeliveryService } from "../../../gen/skipper/v1/delivery_service_pb.js";
import { GitSourceService } from "../../../gen/skipper/v1/git_source_service_pb.js";
import { TerminalService } from "../../../gen/skipper/v1/terminal_service_pb.js";
import { AgentBundleService } from "../../../gen/skipper/v1/agent_bundle_service_pb.js";
import type { ServiceDeps } from "../../services/deps.js";
import { healthService } from "../../services/health-service.js";
import { resourceService } from "../../services/resource-service.js";
import { workOrderService } from "../../services/work-order-service.js";
import { nodeService } from "../../services/node-service.js";
import { deploymentService } from "../../services/deployment-service.js";
import { snapshotService } from "../../services/snapshot-service.js";
import { eventService } from "../../services/event-service.js";
import { rolloutService } from "../../services/rollout-service.js";
import { accessService } from "../../services/access-service.js";
import { enrollmentService } from "../../services/enrollment-service.js";
import { auditService } from "../../services/audit-service.js";
import { secretService } from "../../services/secret-service.js";
import { webhookService } from "../../services/webhook-service.js";
import { deliveryService } from "../../services/delivery-service.js";
import { gitSourceService } from "../../services/git-source-service.js";
import { terminalService } from "../../services/terminal-service.js";
import { agentBundleService } from "../../services/agent-bundle-service.js";
import type { AuditSigner } from "../../audit/audit-signer.js";

/** Every service the controller serves, in the order REST routes are listed. */
export const SERVICES: DescService[] = [
  HealthService,
  ResourceService,
  WorkOrderService,
  NodeService,
  DeploymentService,
  SnapshotService,
  EventService,
  RolloutService,
  AccessService,
  EnrollmentService,
  AuditService,
  SecretService,
  WebhookService,
  DeliveryService,
  GitSourceService,
  TerminalService,
  AgentBundleService,
];

/** The routes of every service; audit exports are signed by `signer` when the controller has a certificate. */
/** The services agents call: their JSON requests read a newer agent's unknown fields as absent. */
export const AGENT_SERVICES: ReadonlySet<string> = new Set([NodeService.typeName, WorkOrderService.typeName]);

export function serviceRoutes(
  deps: ServiceDeps,
  signer: AuditSigner | undefined,
  agentJson?: ConnectRouterOptions["jsonOptions"],
): (router: ConnectRouter) => void {
  // What agents call reads JSON fields it does not know (a newer agent's) as absent, so agents one
  // version ahead of the controller are heard; what people call refuses them (a typo is an error).
  const agents = agentJson ? { jsonOptions: agentJson } : {};
  return (router) => {
    router.service(HealthService, healthService(deps));
    router.service(ResourceService, resourceService(deps));
    router.service(WorkOrderService, workOrderService(deps), agents);
    router.service(NodeService, nodeService(deps), agents);
    router.service(DeploymentService, deploymentService(deps));
    router.service(SnapshotService, snapshotService(deps));
    router.service(EventService, eventService(deps));
    router.service(RolloutService, rolloutService(deps));
    router.service(AccessService, accessService(deps));
    router.service(EnrollmentService, enrollmentService(deps));
    router.service(AuditService, auditService({ store: deps.store, signer }));
    router.service(SecretService, secretService(deps));
    router.service(WebhookService, webhookService(deps));
    router.service(DeliveryService, deliveryService(deps));
    router.service(GitSourceService, gitSourceService(deps));
    router.service(TerminalService, terminalService(deps));
    router.service(AgentBundleService, agentBundleService(deps));
  };
}
