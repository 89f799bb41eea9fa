// The controller's API from the browser: the same generated clients the CLI and the agent use,
// over Connect (JSON) on this origin's /v1, with the signed-in credential as a bearer token.
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AccessService } from "../../gen/skipper/v1/access_service_pb.js";
import { AgentBundleService } from "../../gen/skipper/v1/agent_bundle_service_pb.js";
import { EnrollmentService } from "../../gen/skipper/v1/enrollment_service_pb.js";
import { DeliveryService } from "../../gen/skipper/v1/delivery_service_pb.js";
import { EventService } from "../../gen/skipper/v1/event_service_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { RolloutService } from "../../gen/skipper/v1/rollout_service_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";

export interface Api {
  access: Client<typeof AccessService>;
  agentBundles: Client<typeof AgentBundleService>;
  enrollment: Client<typeof EnrollmentService>;
  delivery: Client<typeof DeliveryService>;
  events: Client<typeof EventService>;
  resources: Client<typeof ResourceService>;
  rollouts: Client<typeof RolloutService>;
  orders: Client<typeof WorkOrderService>;
}

export function connect(token: string): Api {
  const bearer: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport = createConnectTransport({ baseUrl: `${location.origin}/v1`, interceptors: [bearer] });
  return {
    access: createClient(AccessService, transport),
    agentBundles: createClient(AgentBundleService, transport),
    enrollment: createClient(EnrollmentService, transport),
    delivery: createClient(DeliveryService, transport),
    events: createClient(EventService, transport),
    resources: createClient(ResourceService, transport),
    rollouts: createClient(RolloutService, transport),
    orders: createClient(WorkOrderService, transport),
  };
}
